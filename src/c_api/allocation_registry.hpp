// streampool C ABI: the registry of live allocations made through sp_pool_allocate.
//
// Why it exists: a C (or Python) caller frees from finalisers, in any order. By the time a pointer
// is freed its pool handle, its stream and its device handle may all be gone. So each live pointer
// has an `allocation` record that
//   - owns its pool (shared ownership of the pool state): a pool handle destroyed with live memory
//     leaves the pool alive until the last pointer is freed, then the pool goes back;
//   - names the timelines of the streams that used it (the allocating stream, record_use, the copy
//     and fill helpers). A free with no stream waits for all work submitted to them up to the free,
//     through tokens: never through a stream, which may be destroyed (the origin report's bug).
//
// One ordered map (so the helpers can find the allocation containing an interior pointer) under
// one mutex. The mutex is never held while calling into the pool, so a reclaim hook that frees
// memory inside an allocation on the same thread cannot deadlock on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "streampool/pool.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::c_api {

struct allocation {
  allocation(pool p, void* base, std::size_t bytes, std::shared_ptr<timeline> first)
      : owner(std::move(p)), ptr(base), size(bytes), users{std::move(first)} {}

  pool owner;  // never reassigned; keeps the pool alive while the pointer lives
  void* const ptr;
  const std::size_t size;  // as requested

  std::mutex mu;  // guards users
  // Timelines whose work may touch the memory. Retired ones are dropped (every point complete).
  std::vector<std::shared_ptr<timeline>> users;

  /// Adds `line` to users (once) and drops retired ones. Caller holds mu.
  void add_user_locked(const std::shared_ptr<timeline>& line);
  /// Tokens covering all work submitted so far to every user except `except`. Caller holds mu.
  [[nodiscard]] std::vector<token> pending_locked(const timeline* except) const;
};

class allocation_registry {
 public:
  static allocation_registry& instance();

  void insert(std::shared_ptr<allocation> a);
  /// The allocation starting exactly at p, or nullptr.
  [[nodiscard]] std::shared_ptr<allocation> find(const void* p) const;
  /// The allocation containing p, or nullptr.
  [[nodiscard]] std::shared_ptr<allocation> containing(const void* p) const;
  /// Removes and returns the allocation starting at p if `accept` says yes; nullptr if none.
  template <class Accept>
  std::shared_ptr<allocation> take_if(const void* p, Accept&& accept) {
    std::lock_guard lock(mu_);
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == live_.end()) return nullptr;
    accept(*it->second);  // throws to refuse
    std::shared_ptr<allocation> a = std::move(it->second);
    live_.erase(it);
    return a;
  }

 private:
  mutable std::mutex mu_;  // guards live_
  std::map<std::uintptr_t, std::shared_ptr<allocation>> live_;
};

}  // namespace streampool::c_api
