// streampool C ABI: the registry of memory the C layer knows: live allocations made through
// sp_pool_allocate, and foreign ranges registered with sp_memory_register.
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
// The copy and fill helpers accept only device memory found here: a pointer to freed memory that
// is still mapped, or to memory made elsewhere, would otherwise be written silently.
// Memory made elsewhere (a framework's tensor) is registered first; its record (a `known_range`
// without a pool) gives it the same cross-stream ordering in the helpers.
//
// Glossary
//   known range  [ptr, ptr + size) on one device, with the streams that used it: what the helpers
//                check a pointer against.
//   allocation   a known range made by sp_pool_allocate; it also owns its pool.
//   registration a known range of foreign memory, from sp_memory_register to sp_memory_unregister.
//
// Two ordered maps (so the helpers can find the range containing an interior pointer) under one
// mutex. Allocations never overlap one another, nor do registrations; a registration may not
// overlap a live allocation when it is made. The mutex is never held while calling into the pool,
// so a reclaim hook that frees memory inside an allocation on the same thread cannot deadlock on
// it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "streampool/pool.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::c_api {

/// Memory the helpers accept: a range on one device, and the streams whose helper work used it.
struct known_range {
  known_range(void* base, std::size_t bytes, std::uint64_t device, std::shared_ptr<timeline> first,
              bool from_pool);

  void* const ptr;
  const std::size_t size;         // as requested (allocations) or registered
  const std::uint64_t device_id;  // streams of other devices are refused
  const bool is_allocation;       // else a registration (for messages)

  std::mutex mu;  // guards users
  // Timelines whose work may touch the memory. Retired ones are dropped (every point complete).
  std::vector<std::shared_ptr<timeline>> users;

  /// Adds `line` to users (once) and drops retired ones. Caller holds mu.
  void add_user_locked(const std::shared_ptr<timeline>& line);
  /// Tokens covering all work submitted so far to every user except `except`. Caller holds mu.
  [[nodiscard]] std::vector<token> pending_locked(const timeline* except) const;
  /// Hands the memory to `s`: s waits (on the device) for every other user's work so far, and
  /// becomes a user, so that the next user elsewhere and the free wait for s. Takes mu.
  void acquire(stream_ref s);
  /// Waits on the host for all work submitted so far by every user. Takes mu (not while waiting).
  void synchronize();
};

struct allocation : known_range {
  allocation(pool p, void* base, std::size_t bytes, std::shared_ptr<timeline> first,
             std::shared_ptr<std::atomic<std::size_t>> live);

  pool owner;  // never reassigned; keeps the pool alive while the pointer lives
  // The owner's count of live allocations in the registry (live_counter), kept by the registry.
  std::shared_ptr<std::atomic<std::size_t>> pool_live;
};

class allocation_registry {
 public:
  static allocation_registry& instance();

  /// The count of live allocations of pool `pool_id` in the registry, shared by every handle of
  /// the pool (pool_payload): while it is 0, memory that sp_pool_deallocate_native is given
  /// cannot be a registered allocation, and the native free skips the lookup. Made on first use;
  /// gone with the last handle and allocation of the pool.
  [[nodiscard]] std::shared_ptr<std::atomic<std::size_t>> live_counter(std::uint64_t pool_id);

  void insert(std::shared_ptr<allocation> a);
  /// The allocation starting exactly at p, or nullptr.
  [[nodiscard]] std::shared_ptr<allocation> find(const void* p) const;
  /// The allocation containing p, or nullptr.
  [[nodiscard]] std::shared_ptr<allocation> containing(const void* p) const;
  /// What the helpers may use at p: the allocation containing p, else the registration
  /// containing p, else nullptr. One lookup in each map under the one mutex.
  [[nodiscard]] std::shared_ptr<known_range> known_containing(const void* p) const;
  /// The range the copy, fill and memory calls use at p: known_containing(p), holding all of
  /// [p, p + bytes) (bytes 0: p alone), on device `device_id` when one is given. Throws
  /// error{INVALID_ARGUMENT} naming `entry`, the pointer, the bytes and the devices otherwise.
  [[nodiscard]] std::shared_ptr<known_range> known_for(const void* p, std::size_t bytes,
                                                       std::optional<std::uint64_t> device_id,
                                                       const char* entry) const;
  /// Removes and returns the allocation starting at p if `accept` says yes; nullptr if none.
  template <class Accept>
  std::shared_ptr<allocation> take_if(const void* p, Accept&& accept) {
    std::lock_guard lock(mu_);
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == live_.end()) return nullptr;
    accept(*it->second);  // throws to refuse
    std::shared_ptr<allocation> a = std::move(it->second);
    live_.erase(it);
    a->pool_live->fetch_sub(1, std::memory_order_release);
    return a;
  }

  /// Adds a registration; throws error{INVALID_ARGUMENT} naming `entry` and both ranges when it
  /// overlaps a registration or a live allocation. (insert() does not check the other way round:
  /// pool memory that was registered, freed through another path and handed out again is found as
  /// the allocation, which known_containing() looks at first.)
  void add_registration(std::shared_ptr<known_range> r, const char* entry);
  /// Removes and returns the registration starting at p; throws error{INVALID_ARGUMENT} naming
  /// `entry` and p (and the registration containing it, if any) when there is none.
  std::shared_ptr<known_range> remove_registration(const void* p, const char* entry);

 private:
  mutable std::mutex mu_;  // guards live_, registered_ and counters_
  std::map<std::uintptr_t, std::shared_ptr<allocation>> live_;
  std::map<std::uint64_t, std::weak_ptr<std::atomic<std::size_t>>> counters_;  // by pool id
  std::map<std::uintptr_t, std::shared_ptr<known_range>> registered_;
};

}  // namespace streampool::c_api
