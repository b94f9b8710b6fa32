// streampool: large blocks without virtual memory (docs/large-blocks.md, "The segment path"):
// blocks of whole upstream allocations (segments), one arena range each. Three rules keep reserved
// memory close to live memory: give wholly free segments back before a growth (rule 1, here and
// in allocate_large), do not split a big free block for a small request (rule 2,
// take_free_large), and let mid-size requests share a segment when the granularity is coarse
// (rule 3, grow_segment). Reuse and frees are pool_large.cpp's, as on the virtual-memory path.
#include <algorithm>

#include "core/pool/pool_state.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

void* pool_state::grow_segment(stream_ref s, stream_cache& cache, std::size_t size) {
  large_shard& own = *shards_[cache.shard()];
  // Exactly the request, rounded to the upstream granularity: large requests dominate reserved
  // memory on real traces, and every extra byte here is a byte of reserved-over-live.
  const std::size_t g = backend_->caps().granularity;
  std::size_t bytes = round_up(size, g);
  const growing_scope growing(growing_);
  void* base = nullptr;
  // Rule 3: a mid-size request that is not a multiple of the granularity gets a shared segment
  // of mid_segment bytes, which later mid-size requests fill. A segment each would strand its
  // rounding tail (up to a granule per request), a tail no later request <= small_max uses and
  // few large ones fit (docs/performance.md, "The segment path"). Only with a coarse granularity
  // (a GPU's 2 MiB): with a fine one the tails are small and a shared segment would cost more
  // than it saves.
  if (g >= (std::size_t{1} << 20) && bytes != size && size <= mid_max && mid_segment >= 2 * bytes) {
    base = grow(round_up(mid_segment, g));
    if (base != nullptr) bytes = round_up(mid_segment, g);
  }
  if (base == nullptr) base = grow(bytes);  // also when the limit refuses the shared segment
  if (base == nullptr) return nullptr;
  auto owned = std::make_unique<large_range>(base, bytes, /*is_virtual=*/false);
  large_range* r = owned.get();
  r->shard = &own;
  {
    std::lock_guard lock(own.mu);
    r->arena = own.arena.add_range(to_addr(base), bytes, block_state::mapped, r);
    (void)own.arena.take(r->arena->first, to_addr(base), size, cache.timeline_id());
    count_large_out(own, /*fresh=*/true, /*waits=*/false);
  }
  {
    std::lock_guard lock(segments_mu_);
    map_.insert(base, bytes, r);
    large_ranges_.emplace(base, std::move(owned));
    unpublished_ -= bytes;  // registered now (grow())
  }
  return hand_out_large(s, cache, to_addr(base), size, {});
}

void pool_state::give_back_free_segments() {
  // Nothing goes back to the driver during a stream capture (backend.hpp, begin_capture).
  if (options_.keep_memory) return;
  const backend::outside_capture_scope no_capture = backend_->outside_capture();
  if (!no_capture) return;
  std::vector<std::pair<large_range*, token_set>> whole;
  for (const auto& sh : shards_) {
    std::lock_guard lock(sh->mu);
    const std::size_t first = whole.size();
    for (const auto& r : sh->arena.ranges()) {
      if (arena_block* b = block_arena::sole_free_block(*r)) {
        whole.emplace_back(static_cast<large_range*>(r->owner), std::move(b->tokens));
      }
    }
    for (std::size_t i = first; i < whole.size(); ++i)
      sh->arena.remove_range(whole[i].first->arena);
  }
  // Out of the arena, nobody else can take them; no lock is held while waiting. Memory goes
  // back to the upstream only after its pending work is complete (invariant 1).
  for (auto& [lr, tokens] : whole) {
    for (const token& t : tokens) {
      if (t.line->completed() >= t.at) continue;
      t.line->wait_host(t.at);
      host_waits_.fetch_add(1, std::memory_order_relaxed);
    }
    (void)release_segment(lr);
  }
}

}  // namespace streampool::detail
