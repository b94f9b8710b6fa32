// streampool C ABI: the handle tables (handle_table.hpp).
#include "handle_table.hpp"

#include "handles.hpp"
#include "streampool/error.hpp"

namespace streampool::c_api {
namespace {

using streampool::detail::format;

struct decoded {
  std::uint32_t generation;
  std::uint32_t index;
  unsigned kind;
};

constexpr decoded decode(std::uint64_t h) noexcept {
  return {static_cast<std::uint32_t>(h >> 32), static_cast<std::uint32_t>(h >> 4) & 0x0fffffffU,
          static_cast<unsigned>(h & 0xfU)};
}

constexpr std::uint64_t encode(std::uint32_t generation, std::uint32_t index,
                               handle_kind k) noexcept {
  return std::uint64_t{generation} << 32 | std::uint64_t{index} << 4 |
         static_cast<std::uint64_t>(k);
}

std::string handle_text(std::uint64_t h) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): printed the way a C caller prints its handle
  return detail::format_ptr(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(h)));
}

}  // namespace

const char* kind_name(handle_kind k) noexcept {
  switch (k) {
    case handle_kind::device:
      return "device";
    case handle_kind::stream:
      return "stream";
    case handle_kind::pool:
      return "pool";
  }
  return "?";
}

// Deliberately leaked: finalizers destroy handles during static destruction.
handle_table* const handle_table::tables[3] = {new handle_table(handle_kind::device),
                                               new handle_table(handle_kind::stream),
                                               new handle_table(handle_kind::pool)};

std::uint64_t handle_table::add(void* payload) {
  std::lock_guard lock(mu_);
  std::uint32_t index = 0;
  if (!free_.empty()) {
    index = free_.front();
    free_.pop_front();
  } else {
    index = size_.load(std::memory_order_relaxed);
    if (index >> index_bits != 0) {
      throw error{STREAMPOOL_STATUS_INTERNAL, format("streampool: more than %u live %s handles",
                                                     1U << index_bits, kind_name(kind_))};
    }
    std::atomic<cell*>& chunk = directory_[index >> chunk_bits];
    if (chunk.load(std::memory_order_relaxed) == nullptr) {
      chunk.store(new cell[std::size_t{1} << chunk_bits], std::memory_order_release);
    }
    size_.store(index + 1, std::memory_order_release);
  }
  // The cell is free (even generation), so no reader uses its payload: plain writes, then the
  // generation publishes them.
  cell& c = *find(index);
  c.payload = payload;
  const std::uint32_t generation = c.generation.load(std::memory_order_relaxed) + 1;
  c.generation.store(generation, std::memory_order_release);
  return encode(generation, index, kind_);
}

void handle_table::refuse(std::uint64_t h, const char* function, const char* what) const {
  if (h == 0) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s is NULL", function, what)};
  }
  const decoded d = decode(h);
  const std::string text = handle_text(h);
  if (d.kind != static_cast<unsigned>(kind_)) {
    // A live (or once live) handle of another table: a binding that mixed up its pointers.
    for (handle_kind other : {handle_kind::device, handle_kind::stream, handle_kind::pool}) {
      if (d.kind != static_cast<unsigned>(other)) continue;
      const cell* c = of(other).find(d.index);
      if (c != nullptr && (d.generation & 1U) != 0 &&
          d.generation <= c->generation.load(std::memory_order_acquire)) {
        throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                    format("streampool: %s: %s: %s is a %s handle, not a %s handle", function, what,
                           text.c_str(), kind_name(other), kind_name(kind_))};
      }
    }
  } else if (const cell* c = find(d.index);
             c != nullptr && (d.generation & 1U) != 0 &&
             d.generation < c->generation.load(std::memory_order_acquire)) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s: %s handle %s was destroyed", function, what,
                       kind_name(kind_), text.c_str())};
  }
  throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
              format("streampool: %s: %s: %s is not a %s handle (no call of this library made "
                     "it)",
                     function, what, text.c_str(), kind_name(kind_))};
}

handle_table::retired handle_table::invalidate(std::uint64_t h, const char* function,
                                               const char* what) {
  const decoded d = decode(h);
  cell* c = d.kind == static_cast<unsigned>(kind_) ? find(d.index) : nullptr;
  std::uint32_t expected = d.generation;
  // One destroy wins; a racing one sees the even generation and is told the handle was destroyed.
  if (c != nullptr && (d.generation & 1U) != 0 &&
      c->generation.compare_exchange_strong(expected, d.generation + 1,
                                            std::memory_order_seq_cst)) {
    return {c->payload, c, d.index};
  }
  refuse(h, function, what);
}

void handle_table::recycle(const retired& r) {
  find(r.index)->payload = nullptr;
  std::lock_guard lock(mu_);
  free_.push_back(r.index);
}

}  // namespace streampool::c_api
