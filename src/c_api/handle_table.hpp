// streampool C ABI: the tables behind sp_device_t, sp_stream_t and sp_pool_t: C handles that
// cannot crash, whatever value a caller passes.
//
// Glossary
//   handle      what a C caller holds: not an address but a number,
//               (generation << 32) | (index << 4) | kind. A value that decodes to no live cell of
//               its kind's table (destroyed, of another kind, never made) is refused with
//               STREAMPOOL_STATUS_INVALID_ARGUMENT naming it; nothing behind it is read.
//   cell        one entry of a table: a generation and the payload behind the handle. Cells are
//               never freed (a reader may look at any cell it can index), only reused.
//   generation  odd while the cell holds a live handle, even while it is free. Destroying a
//               handle makes it even (refusing every copy of the handle from then on), making a
//               new one in the cell makes it odd again: a handle is live exactly while its
//               generation is the cell's. 32 bits: a stale handle could name a live one again
//               only after 2^31 handles were made in its cell.
//   payload     the C++ object behind a handle (handles.hpp): a device, stream or pool.
//
// The read path (every entry point, once per handle it takes): decode, index the directory and
// the chunk (two dependent loads), pin the cell (pins.hpp: one store to the thread's own line),
// load its generation and compare. No lock, no read-modify-write. Creating and destroying take
// the table's mutex; destroying then waits for other threads' pins on the cell before the
// payload goes, so a call racing with the destroy either finishes on the payload or is refused.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "pins.hpp"

namespace streampool::c_api {

enum class handle_kind : std::uint8_t { device = 1, stream = 2, pool = 3 };

/// "device", "stream" or "pool".
[[nodiscard]] const char* kind_name(handle_kind k) noexcept;

class handle_table {
 public:
  struct cell {
    std::atomic<std::uint32_t> generation{0};
    // Written before the generation turns odd (release) and read after it is seen odd (acquire);
    // cleared only after the destroy's wait for pins.
    void* payload = nullptr;
  };

  /// The table of handles of kind `k` (one per kind, never destroyed: handles are used from
  /// finalizers during static destruction).
  static handle_table& of(handle_kind k) noexcept {
    return *tables[static_cast<std::size_t>(k) - 1];
  }

  /// A new live handle holding `payload` (which the caller keeps owning until it is destroyed).
  [[nodiscard]] std::uint64_t add(void* payload);

  /// The payload of live handle `h`, with its cell pinned in `p` (empty; `t` is the calling
  /// thread's state) for as long as the caller uses it. @throws error{INVALID_ARGUMENT} naming
  /// `function`, `what` and the handle when `h` is NULL, destroyed, of another kind or not a
  /// handle. Inline: every entry point's way in.
  void* resolve(std::uint64_t h, pin& p, thread_state& t, const char* function,
                const char* what) const {
    const auto generation = static_cast<std::uint32_t>(h >> 32);
    const auto index = static_cast<std::uint32_t>(h >> 4) & ((1U << index_bits) - 1);
    if ((h & 0xfU) == static_cast<unsigned>(kind_)) [[likely]] {
      if (cell* c = find(index)) [[likely]] {
        p.set(t, c);
        // After the pin (pins.hpp): either this load sees a destroy's new generation, or the
        // destroy sees the pin and waits for this call.
        if (c->generation.load(std::memory_order_seq_cst) == generation && (generation & 1U) != 0)
            [[likely]] {
          return c->payload;
        }
        p.reset();
      }
    }
    refuse(h, function, what);
  }

  /// A handle taken out of reach by invalidate(), until its cell is recycled.
  struct retired {
    void* payload;
    const void* pinned_as;  // what calls pin: wait_unpinned(pinned_as) before the teardown
    std::uint32_t index;
  };
  /// Takes live handle `h` out of reach: every call through it is refused from now on, and
  /// exactly one of several racing destroys gets here. @throws as resolve().
  retired invalidate(std::uint64_t h, const char* function, const char* what);
  /// Makes an invalidated cell reusable. The caller has waited for pins on it and torn its
  /// payload down.
  void recycle(const retired& r);

 private:
  explicit handle_table(handle_kind k) : kind_(k) {}

  static constexpr unsigned chunk_bits = 12;  // 4096 cells a chunk
  static constexpr unsigned index_bits = 28;  // 2^28 cells a table
  static constexpr std::size_t chunks = std::size_t{1} << (index_bits - chunk_bits);

  [[nodiscard]] cell* find(std::uint32_t index) const noexcept {
    if (index >= size_.load(std::memory_order_acquire)) return nullptr;
    cell* chunk = directory_[index >> chunk_bits].load(std::memory_order_acquire);
    return chunk + (index & ((1U << chunk_bits) - 1));
  }
  [[noreturn]] void refuse(std::uint64_t h, const char* function, const char* what) const;

  static handle_table* const tables[3];  // device, stream, pool

  const handle_kind kind_;
  std::atomic<std::uint32_t> size_{0};  // cells made so far (indexes below it are readable)
  // Chunks are allocated as the table grows and never freed.
  std::array<std::atomic<cell*>, chunks> directory_{};
  std::mutex mu_;                   // guards free_ and growth
  std::deque<std::uint32_t> free_;  // invalidated cells, recycled; reused oldest first
};

}  // namespace streampool::c_api
