// streampool C ABI: the registry of memory the C layer knows (allocation_registry.hpp).
#include "allocation_registry.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "handles.hpp"
#include "streampool/error.hpp"

namespace streampool::c_api {

using streampool::detail::format;

namespace {

// The entry of `m` whose range contains key, or end(). Entries never overlap one another, so only
// the last one starting at or before key can. An allocation of 0 bytes contains its own pointer
// (so record_use finds it, and a helper is told it overruns 0 bytes rather than "unknown").
template <class Map>
auto containing_in(const Map& m, std::uintptr_t key) {
  auto it = m.upper_bound(key);
  if (it == m.begin()) return m.end();
  --it;
  return key == it->first || key - it->first < it->second->size ? it : m.end();
}

// The entry of `m` overlapping [begin, begin + bytes) (bytes > 0), or end().
template <class Map>
auto overlapping_in(const Map& m, std::uintptr_t begin, std::size_t bytes) {
  auto it = m.upper_bound(begin);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    if (begin - prev->first < prev->second->size) return prev;
  }
  // Entries of size 0 (sp_pool_allocate(0)) cover no byte: skip them.
  while (it != m.end() && it->first - begin < bytes) {
    if (it->second->size > 0) return it;
    ++it;
  }
  return m.end();
}

std::string describe(const known_range& r) {
  return format("%p (%zu bytes, device %llu)", printf_arg(r.ptr), r.size, printf_arg(r.device_id));
}

}  // namespace

known_range::known_range(void* base, std::size_t bytes, std::uint64_t device,
                         std::shared_ptr<timeline> first, bool from_pool)
    : ptr(base), size(bytes), device_id(device), is_allocation(from_pool) {
  if (first != nullptr) users.push_back(std::move(first));
}

allocation::allocation(pool p, void* base, std::size_t bytes, std::shared_ptr<timeline> first,
                       std::shared_ptr<std::atomic<std::size_t>> live)
    : known_range(base, bytes, p.device_id(), std::move(first), true),
      owner(std::move(p)),
      pool_live(std::move(live)) {}

void known_range::add_user_locked(const std::shared_ptr<timeline>& line) {
  std::erase_if(users, [](const std::shared_ptr<timeline>& l) { return l->retired(); });
  if (std::find(users.begin(), users.end(), line) == users.end()) users.push_back(line);
}

std::vector<token> known_range::pending_locked(const timeline* except) const {
  std::vector<token> tokens;
  for (const auto& l : users) {
    if (l.get() == except || l->retired()) continue;
    // current() covers all work submitted so far: what the free (or the next user) must follow.
    tokens.push_back(token{l, l->current()});
  }
  return tokens;
}

void known_range::acquire(stream_ref s) {
  const std::shared_ptr<timeline>& line = s.timeline_ptr();
  std::lock_guard lock(mu);
  for (const token& t : pending_locked(line.get())) s.wait(t);
  add_user_locked(line);
}

void known_range::synchronize() {
  std::vector<token> pending;
  {
    std::lock_guard lock(mu);
    pending = pending_locked(nullptr);
  }
  for (const token& t : pending) t.line->wait_host(t.at);
}

allocation_registry& allocation_registry::instance() {
  // Deliberately leaked: finalisers (a language runtime's, or atexit handlers) may free memory
  // during static destruction.
  static auto* r = new allocation_registry;
  return *r;
}

std::shared_ptr<std::atomic<std::size_t>> allocation_registry::live_counter(std::uint64_t pool_id) {
  std::lock_guard lock(mu_);
  std::weak_ptr<std::atomic<std::size_t>>& slot = counters_[pool_id];
  std::shared_ptr<std::atomic<std::size_t>> c = slot.lock();
  if (c == nullptr) {
    // Pools come and go: drop the entries of those gone before adding one.
    std::erase_if(counters_,
                  [&](const auto& e) { return e.first != pool_id && e.second.expired(); });
    c = std::make_shared<std::atomic<std::size_t>>(0);
    counters_[pool_id] = c;
  }
  return c;
}

void allocation_registry::insert(std::shared_ptr<allocation> a) {
  std::lock_guard lock(mu_);
  const auto key = reinterpret_cast<std::uintptr_t>(a->ptr);
  a->pool_live->fetch_add(1, std::memory_order_release);
  live_[key] = std::move(a);
}

std::shared_ptr<allocation> allocation_registry::find(const void* p) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
  return it == live_.end() ? nullptr : it->second;
}

std::shared_ptr<allocation> allocation_registry::containing(const void* p) const {
  std::lock_guard lock(mu_);
  auto it = containing_in(live_, reinterpret_cast<std::uintptr_t>(p));
  return it == live_.end() ? nullptr : it->second;
}

std::shared_ptr<known_range> allocation_registry::known_containing(const void* p) const {
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  if (auto it = containing_in(live_, key); it != live_.end()) return it->second;
  if (auto it = containing_in(registered_, key); it != registered_.end()) return it->second;
  return nullptr;
}

std::shared_ptr<known_range> allocation_registry::known_for(const void* p, std::size_t bytes,
                                                            std::optional<std::uint64_t> device_id,
                                                            const char* entry) const {
  std::shared_ptr<known_range> r = known_containing(p);
  if (r == nullptr) {
    const std::string what = bytes != 0
                                 ? format("%zu bytes at %p: the pointer", bytes, printf_arg(p))
                                 : format("%p", printf_arg(p));
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s is not inside a live allocation of sp_pool_allocate "
                       "nor in memory registered with sp_memory_register (freed memory, or "
                       "foreign memory not registered)",
                       entry, what.c_str())};
  }
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                               static_cast<const std::byte*>(r->ptr));
  if (bytes > r->size - offset) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %zu bytes at offset %zu overrun %s %p of %zu bytes", entry,
                       bytes, offset, r->is_allocation ? "the allocation" : "the registered range",
                       printf_arg(r->ptr), r->size)};
  }
  if (device_id && r->device_id != *device_id) {
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: memory %p is on device %llu, the stream on device %llu", entry,
               printf_arg(r->ptr), printf_arg(r->device_id), printf_arg(*device_id))};
  }
  return r;
}

void allocation_registry::add_registration(std::shared_ptr<known_range> r, const char* entry) {
  const auto key = reinterpret_cast<std::uintptr_t>(r->ptr);
  std::lock_guard lock(mu_);
  if (auto it = overlapping_in(registered_, key, r->size); it != registered_.end()) {
    const bool same = it->first == key && it->second->size == r->size;
    throw error{
        STREAMPOOL_STATUS_INVALID_ARGUMENT,
        format("streampool: %s: %s overlaps %s, %s", entry, describe(*r).c_str(),
               describe(*it->second).c_str(),
               same ? "which is already registered" : "registered earlier (unregister it first)")};
  }
  if (auto it = overlapping_in(live_, key, r->size); it != live_.end()) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: %s overlaps %s, a live allocation of sp_pool_allocate "
                       "(the helpers know it already)",
                       entry, describe(*r).c_str(), describe(*it->second).c_str())};
  }
  registered_.emplace(key, std::move(r));
}

std::shared_ptr<known_range> allocation_registry::remove_registration(const void* p,
                                                                      const char* entry) {
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = registered_.find(key);
  if (it != registered_.end()) {
    std::shared_ptr<known_range> r = std::move(it->second);
    registered_.erase(it);
    return r;
  }
  if (auto in = containing_in(registered_, key); in != registered_.end()) {
    throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
                format("streampool: %s: pointer %p is inside the registered range %s, not at "
                       "its start",
                       entry, printf_arg(p), describe(*in->second).c_str())};
  }
  throw error{STREAMPOOL_STATUS_INVALID_ARGUMENT,
              format("streampool: %s: pointer %p is not the start of memory registered with "
                     "sp_memory_register (never registered, or unregistered already)",
                     entry, printf_arg(p))};
}

}  // namespace streampool::c_api
