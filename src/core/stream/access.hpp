// streampool: the library's own door into its public handles. Internal.
//
// The public classes keep what only the library needs (a pool's or device's shared state, a
// timeline's per-pool caches and queue, a stream_ref made from a stream's state) private and
// befriend this one struct, so the public headers show users only what they may call, and every
// place inside the library that reaches behind a handle is found by one grep.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "streampool/detail/stream_state.hpp"
#include "streampool/pool.hpp"
#include "streampool/stream.hpp"
#include "streampool/timeline.hpp"

namespace streampool::detail {

class pool_state;
class stream_cache;
struct device_state;

struct access {
  [[nodiscard]] static const std::shared_ptr<pool_state>& state(const pool& p) noexcept {
    return p.state_;
  }
  [[nodiscard]] static pool make_pool(std::shared_ptr<pool_state> s) { return pool(std::move(s)); }

  [[nodiscard]] static const std::shared_ptr<device_state>& state(const device& d) noexcept {
    return d.state_;
  }
  [[nodiscard]] static device make_device(std::shared_ptr<device_state> s) {
    return device(std::move(s));
  }

  /// The stream cache of `line` for pool `p`, created on first use (the first pool's is found
  /// without a lock).
  [[nodiscard]] static stream_cache& cache_for(timeline& line, pool_state& p,
                                               std::uint64_t pool_id) {
    stream_cache* c = line.first_cache(pool_id);
    return c != nullptr ? *c : *line.cache_for(p);
  }
  /// The stream cache of `line` for pool `pool_id` when it is the timeline's first (no lock, no
  /// call); else null, and cache_for() finds or makes it.
  [[nodiscard]] static stream_cache* first_cache(const timeline& line,
                                                 std::uint64_t pool_id) noexcept {
    return line.first_cache(pool_id);
  }
  [[nodiscard]] static native_queue queue(const timeline& line) noexcept {
    return line.queue_for_submit();
  }
  static void mark_now_and_then(timeline& line, std::uint32_t blocks, std::size_t bytes,
                                std::uint32_t every, std::size_t bytes_between) {
    line.mark_now_and_then(blocks, bytes, every, bytes_between);
  }

  [[nodiscard]] static stream_ref make_ref(const stream_state* s) noexcept { return stream_ref(s); }
  [[nodiscard]] static const stream_state* state(stream_ref s) noexcept { return s.state_; }
};

}  // namespace streampool::detail
