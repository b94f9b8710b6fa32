// streampool: the pool's state (pool.hpp is the handle and states the contract).
//
// Glossary: see pool.hpp. Locks, and what each guards:
//   stream_cache::mu   one stream's cached chunks (the fast path takes only this)
//   class_list::mu     one size class's shared list
//   large_mu_          the large free set, live large blocks, large block links
//   segments_mu_       the segment registry, reserved bytes, page map writes
//   caches_mu_         the registry of stream caches
//   hooks_mu_          reclaim hooks
//   uses_mu_           recorded uses of live chunks
// Order: caches_mu_ -> stream_cache::mu -> class_list::mu -> large_mu_ -> segments_mu_.
// Reclaim hooks run with no lock held.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "page_map.hpp"
#include "segment.hpp"
#include "size_classes.hpp"
#include "stream_cache.hpp"
#include "streampool/pool.hpp"

namespace streampool::detail {

struct device_state;

class pool_state : public std::enable_shared_from_this<pool_state> {
 public:
  pool_state(device d, pool_options options);
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;
  ~pool_state();

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// The pool's device. Throws logic_error once the device itself is gone (the pool holds its
  /// backend, not its device: the device owns its default pool, so the other way round would be
  /// a cycle).
  [[nodiscard]] device get_device() const;
  [[nodiscard]] std::uint64_t device_id() const noexcept { return device_id_; }

  void* allocate(stream_ref s, std::size_t bytes);
  void deallocate(stream_ref s, void* p);
  void deallocate(void* p, std::span<const token> uses);
  void record_use(void* p, const token& use);
  [[nodiscard]] std::size_t block_size(const void* p) const;
  [[nodiscard]] bool owns(const void* p) const noexcept;
  std::size_t trim();
  void set_memory_limit(std::size_t bytes) { limit_.store(bytes); }
  [[nodiscard]] std::size_t memory_limit() const noexcept { return limit_.load(); }
  std::uint64_t add_reclaim_hook(std::function<void(std::size_t)> hook);
  void remove_reclaim_hook(std::uint64_t id);
  [[nodiscard]] pool_statistics statistics() const;

  /// Called by timeline::cache_for under the timeline's lock.
  std::shared_ptr<stream_cache> make_stream_cache(timeline& line);
  /// Called by stream_cache::orphan: chunks whose tokens are all complete.
  void take_orphans(std::vector<stream_cache::entry>& entries);

 private:
  struct free_chunk {
    void* p;
    slab* owner;
    token_set tokens;
  };
  struct class_list {
    std::mutex mu;
    std::vector<free_chunk> chunks;  // freed chunks with their tokens
    std::vector<slab*> carving;      // slabs with chunks never handed out
  };
  struct by_size {
    bool operator()(const large_block* a, const large_block* b) const noexcept {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };

  // Large-block policy (see allocate_large and new_large_block for why).
  static constexpr std::size_t big_block = std::size_t{128} << 20;   // rule 2
  static constexpr std::size_t mid_max = std::size_t{16} << 20;      // rule 3
  static constexpr std::size_t mid_segment = std::size_t{64} << 20;  // rule 3

  void check_request(stream_ref s, std::size_t bytes) const;
  void* allocate_small(stream_ref s, std::size_t cls, stream_cache& cache);
  void* allocate_large(stream_ref s, std::size_t bytes);
  void* try_shared_small(stream_ref s, std::size_t cls);
  void* try_steal(stream_ref s, std::size_t cls);
  /// split_big: whether a big block may be split for a small request (rule 2, allocate_large).
  void* try_large_free_list(stream_ref s, std::size_t size, bool split_big);
  /// Returns every wholly free large segment to the upstream, host-waiting for its work first.
  /// Only before a growth, which may block (rule 1, allocate_large).
  void give_back_free_segments();
  void* new_slab_chunk(stream_ref s, std::size_t cls, stream_cache& cache);
  void* new_large_block(std::size_t size);
  void deallocate_chunk(slab& sl, void* p, stream_ref* s, std::span<const token> uses);
  void deallocate_large(void* p, std::span<const token> uses, stream_ref* s);
  void push_shared(std::size_t cls, free_chunk c);
  void spill(stream_cache& cache, std::size_t cls);
  /// Makes `s` wait for every token not ready for it. Returns true if any wait was needed.
  bool order_after(stream_ref s, const token_set& tokens);
  token_set take_uses(void* p);

  /// Upstream allocation within the limit; nullptr when refused.
  void* grow(std::size_t bytes);
  void release_segment(segment* seg);
  /// Runs the out-of-memory ladder around `attempt` (trim, hooks, retry) and throws when it
  /// still fails.
  template <class Attempt>
  void* with_reclaim(std::size_t bytes, Attempt&& attempt);
  [[noreturn]] void throw_out_of_memory(std::size_t bytes) const;
  void flush_caches();
  void wait_all_pending();
  /// Host-waits for the pending work of all cached memory (no lock held while waiting). Returns
  /// false when there was none.
  bool wait_cached_work();
  [[nodiscard]] std::size_t live_bytes() const;
  [[noreturn]] void bad_pointer(const void* p, const char* what) const;

  const std::uint64_t id_;
  const std::weak_ptr<device_state> device_;
  const std::uint64_t device_id_;
  const std::shared_ptr<backend> backend_;
  const pool_options options_;
  std::atomic<std::size_t> limit_;

  page_map map_;

  std::array<class_list, max_classes> shared_;

  mutable std::mutex large_mu_;
  std::set<large_block*, by_size> large_free_;
  std::unordered_map<const void*, large_block*> large_live_;

  mutable std::mutex segments_mu_;
  std::unordered_map<void*, std::unique_ptr<slab>> slabs_;
  std::unordered_map<void*, std::unique_ptr<large_segment>> large_segments_;
  std::size_t reserved_ = 0;       // guarded by segments_mu_; also mirrored below for reads
  std::atomic<std::size_t> reserved_now_{0};
  std::atomic<std::size_t> peak_reserved_{0};
  mutable std::atomic<std::size_t> peak_live_{0};

  mutable std::mutex caches_mu_;
  std::vector<std::shared_ptr<stream_cache>> caches_;

  mutable std::mutex hooks_mu_;
  std::map<std::uint64_t, std::function<void(std::size_t)>> hooks_;
  std::uint64_t next_hook_ = 1;

  std::mutex uses_mu_;
  std::unordered_map<const void*, token_set> uses_;

  // Slow-path statistics (fast-path ones live in the stream caches).
  std::atomic<std::uint64_t> allocations_{0}, deallocations_{0};
  std::atomic<std::uint64_t> allocated_bytes_{0}, freed_bytes_{0};
  std::atomic<std::uint64_t> fresh_allocations_{0}, ready_reuses_{0}, waited_reuses_{0};
  std::atomic<std::uint64_t> device_waits_{0}, host_waits_{0};
  std::atomic<std::uint64_t> upstream_allocations_{0}, upstream_deallocations_{0};
  std::atomic<std::uint64_t> reclaim_calls_{0};

  // Threads between reserving upstream memory in grow() and publishing the new segment.
  std::atomic<int> growing_{0};
  struct growing_scope {
    explicit growing_scope(std::atomic<int>& n) : n_(n) { n_.fetch_add(1, std::memory_order_relaxed); }
    ~growing_scope() { n_.fetch_sub(1, std::memory_order_release); }
    growing_scope(const growing_scope&) = delete;
    growing_scope& operator=(const growing_scope&) = delete;
    std::atomic<int>& n_;
  };
  std::atomic<std::uint64_t> same_stream_reuses_folded_{0};  // from caches pruned by trim()
};

}  // namespace streampool::detail
