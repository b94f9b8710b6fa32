// streampool: the stream cache's slow paths: orphaning, detaching, statistics and its own
// invariants (stream_cache.hpp; the fast path, spills and steals are inline there).
#include "core/pool/stream_cache.hpp"

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {

stream_cache::stream_cache(std::uint64_t pool_id, std::weak_ptr<pool_state> pool,
                           std::weak_ptr<timeline> line, std::uint64_t timeline_id,
                           std::size_t shard, std::size_t bin_limit,
                           std::shared_ptr<live_cell> owner_cell)
    : line_(std::move(line)),
      pool_(std::move(pool)),
      pool_id_(pool_id),
      timeline_id_(timeline_id),
      shard_(shard),
      bin_limit_(bin_limit),
      total_limit_(bin_limit > SIZE_MAX / total_factor ? SIZE_MAX : total_factor * bin_limit),
      owner_cell_(std::move(owner_cell)) {}

void stream_cache::orphan(const std::shared_ptr<timeline>& line) {
  std::vector<entry> all;
  {
    const visit_guard lock(mu_);
    if (detached_ || orphaned_.load(std::memory_order_relaxed)) return;
    for (std::size_t c = 0; c < bins_.size(); ++c) {
      all.insert(all.end(), bins_[c].begin(), bins_[c].end());
      bins_[c].clear();
      bin_bytes_[c] = 0;
    }
    total_bytes_ = 0;
    orphaned_.store(true, std::memory_order_release);  // after the bins: "empty for good"
  }
  // The pool may be going away concurrently; the weak reference decides. If this ends up holding
  // the last reference, the pool is destroyed right here, which is fine: no lock is held.
  if (auto p = pool_.lock()) {
    p->stream_gone(shard_);
    p->take_orphans(all, line);
    p->forget_cache(*this);
  }
}

void stream_cache::detach() {
  const visit_guard lock(mu_);
  detached_ = true;
  for (std::size_t c = 0; c < bins_.size(); ++c) {
    bins_[c].clear();
    bin_bytes_[c] = 0;
  }
  total_bytes_ = 0;
}

std::size_t stream_cache::cached_bytes() const { return total_bytes_; }

std::size_t stream_cache::fullest_bin() const noexcept {
  std::size_t best = 0;
  for (std::size_t c = 1; c < max_classes; ++c)
    if (bin_bytes_[c] > bin_bytes_[best]) best = c;
  return best;
}

stream_cache::contents stream_cache::copy() const {
  contents out;
  const visit_guard lock(mu_);
  out.line = line_.lock();
  out.gone = orphaned_.load(std::memory_order_relaxed) || detached_;
  for (std::size_t c = 0; c < max_classes; ++c)
    for (const entry& e : bins_[c]) out.entries.emplace_back(c, e);
  return out;
}

bool stream_cache::orphaned() const { return orphaned_.load(std::memory_order_acquire); }

std::string stream_cache::find_broken_locked() const {
  for (std::size_t c = 0; c < max_classes; ++c) {
    if (bin_bytes_[c] != bins_[c].size() * class_size(c)) {
      return format(
          "stream cache (timeline %llu): bin bytes: class %zu holds %zu bytes by its count, "
          "%zu entries x %zu bytes = %zu by its entries",
          static_cast<unsigned long long>(timeline_id_), c, static_cast<std::size_t>(bin_bytes_[c]),
          bins_[c].size(), class_size(c), bins_[c].size() * class_size(c));
    }
    const bool orphaned = orphaned_.load(std::memory_order_relaxed);
    if ((orphaned || detached_) && !bins_[c].empty()) {
      return format("stream cache (timeline %llu): %s, yet class %zu holds %zu entries",
                    static_cast<unsigned long long>(timeline_id_),
                    orphaned ? "orphaned" : "detached", c, bins_[c].size());
    }
  }
  std::size_t sum = 0;
  for (std::size_t b : bin_bytes_) sum += b;
  if (sum != total_bytes_) {
    return format("stream cache (timeline %llu): total bytes %zu, but the bins hold %zu",
                  static_cast<unsigned long long>(timeline_id_),
                  static_cast<std::size_t>(total_bytes_), sum);
  }
  return {};
}

}  // namespace streampool::detail
