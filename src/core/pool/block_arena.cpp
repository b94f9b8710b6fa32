#include "core/pool/block_arena.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

std::string broken(const char* what, const arena_block& b) {
  return format("block arena: %s (block [%#zx, %#zx) of %zu bytes, state %d, %zu token(s))", what,
                static_cast<std::size_t>(b.start), static_cast<std::size_t>(b.end()), b.size,
                static_cast<int>(b.state), b.tokens.size());
}

/// The number of distinct timelines named by the tokens of a and b.
std::size_t timelines_of(const arena_block& a, const arena_block& b) {
  std::vector<const timeline*> lines;
  for (const token_set* set : {&a.tokens, &b.tokens})
    for (const token& t : *set)
      if (std::find(lines.begin(), lines.end(), t.line.get()) == lines.end())
        lines.push_back(t.line.get());
  return lines.size();
}

}  // namespace

block_arena::block_arena(std::size_t granularity, bool keep_streams_apart, std::size_t index_min)
    : granularity_(granularity), keep_streams_apart_(keep_streams_apart), index_min_(index_min) {
  STREAMPOOL_EXPECTS(granularity != 0 && (granularity & (granularity - 1)) == 0,
                     format("block arena: granularity %zu is not a power of two", granularity));
}

block_arena::~block_arena() {
  for (auto& r : ranges_) {
    for (arena_block* b = r->first; b != nullptr;) {
      arena_block* next = b->next;
      delete b;  // not delete_block: that would keep it
      b = next;
    }
  }
  for (arena_block* b : spare_) delete b;
}

arena_block* block_arena::new_block() {
  if (spare_.empty()) return new arena_block;
  arena_block* b = spare_.back();
  spare_.pop_back();
  b->start = 0;
  b->size = 0;
  b->range = nullptr;
  b->prev = b->next = nullptr;
  b->state = block_state::unmapped;
  b->absorbed_complete = false;
  b->shelved = false;
  b->shelf_older = b->shelf_newer = nullptr;
  b->tokens.clear();  // keeps the capacity: no malloc when the next free block gets its tokens
  return b;
}

void block_arena::delete_block(arena_block* b) {
  if (spare_.size() < spare_max) {
    spare_.push_back(b);
  } else {
    delete b;
  }
}

arena_range* block_arena::add_range(std::uintptr_t base, std::size_t size, block_state initial,
                                    void* owner) {
  STREAMPOOL_ASSERT(initial != block_state::live && size > 0);
  STREAMPOOL_ASSERT(initial == block_state::mapped ||
                    (base % granularity_ == 0 && size % granularity_ == 0));
  auto r = std::make_unique<arena_range>();
  r->base = base;
  r->size = size;
  r->owner = owner;
  arena_block* b = new_block();
  b->start = base;
  b->size = size;
  b->range = r.get();
  b->state = initial;
  r->first = b;
  index(b);
  ranges_.push_back(std::move(r));
  return ranges_.back().get();
}

arena_block* block_arena::sole_free_block(const arena_range& r) noexcept {
  arena_block* b = r.first;
  return b != nullptr && b->next == nullptr && b->is_free() ? b : nullptr;
}

void block_arena::remove_range(arena_range* r) {
  arena_block* b = sole_free_block(*r);
  STREAMPOOL_ASSERT(b != nullptr);
  unindex(b);
  delete_block(b);
  std::erase_if(ranges_, [&](const std::unique_ptr<arena_range>& x) { return x.get() == r; });
}

namespace {

// The unmapped set's nodes, recycled (block_arena.hpp): at most spare_nodes.
constexpr std::size_t spare_nodes = 1024;

void keep_node(std::vector<unmapped_set::node_type>& spare, unmapped_set::node_type node) {
  if (spare.size() < spare_nodes) spare.push_back(std::move(node));
}

/// Inserts b into `set`, in a kept node when there is one.
unmapped_set::iterator insert_recycled(unmapped_set& set,
                                       std::vector<unmapped_set::node_type>& spare,
                                       arena_block* b) {
  if (spare.empty()) return set.insert(b).first;
  unmapped_set::node_type node = std::move(spare.back());
  spare.pop_back();
  node.value() = b;
  return set.insert(std::move(node)).position;
}

}  // namespace

void block_arena::index(arena_block* b) {
  if (b->state == block_state::mapped) {
    if (b->size < index_min_) {
      ++unindexed_;
    } else {
      mapped_.insert(b);
    }
  } else if (b->state == block_state::unmapped) {
    b->in_unmapped = insert_recycled(unmapped_, spare_unmapped_nodes_, b);
  }
}

void block_arena::unindex(arena_block* b) {
  if (b->state == block_state::mapped) {
    if (b->size < index_min_) {
      --unindexed_;
    } else {
      mapped_.erase(b);
    }
  } else if (b->state == block_state::unmapped) {
    keep_node(spare_unmapped_nodes_, unmapped_.extract(b->in_unmapped));
  }
}

arena_block* block_arena::split(arena_block* b, std::uintptr_t at, bool move_tokens) {
  arena_block* right = new_block();
  right->start = at;
  right->size = b->end() - at;
  right->range = b->range;
  right->prev = b;
  right->next = b->next;
  right->state = b->state;
  right->absorbed_complete = b->absorbed_complete;  // both halves keep the exemption
  if (move_tokens) {
    // A swap, not a move: b gets right's empty vector and keeps its capacity, so that the tokens
    // of its next free need no malloc.
    right->tokens.swap(b->tokens);
    b->tokens.clear();
  } else {
    right->tokens = b->tokens;
  }
  if (b->next != nullptr) b->next->prev = right;
  b->next = right;
  b->size = at - b->start;
  return right;
}

void block_arena::absorb(arena_block* left, arena_block* right) {
  // A token of right's that is complete by now is dropped: right's far neighbour, which becomes
  // left's, may then be apart from left with fewer timelines between them (the "merged"
  // invariant's exemption).
  bool dropped = right->absorbed_complete;
  for (const token& t : right->tokens) dropped = !merge_token(left->tokens, t) || dropped;
  left->absorbed_complete = left->absorbed_complete || dropped;
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  delete_block(right);
}

bool block_arena::may_merge(const arena_block& a, const arena_block& b) const noexcept {
  if (a.state != b.state || !a.is_free()) return false;
  if (a.state == block_state::unmapped || !keep_streams_apart_) return true;
  // The work not yet known complete must be on one timeline at most. Tokens of one timeline
  // only (a stream freeing next to its own freed blocks: nearly every merge) pass with no
  // look at completion, whose counters are other threads' cache lines.
  const timeline* only = nullptr;
  bool one_line = true;
  for (const token_set* set : {&a.tokens, &b.tokens}) {
    for (const token& t : *set) {
      if (only == nullptr) only = t.line.get();
      one_line = one_line && t.line.get() == only;
    }
  }
  if (one_line) return true;
  // completed() only: no marker is queried here (frees take this path).
  const timeline* pending = nullptr;
  for (const token_set* set : {&a.tokens, &b.tokens}) {
    for (const token& t : *set) {
      if (t.line->completed() >= t.at) continue;
      if (pending == nullptr) {
        pending = t.line.get();
      } else if (pending != t.line.get()) {
        return false;
      }
    }
  }
  return true;
}

arena_block* block_arena::merge_and_index(arena_block* b) {
  if (b->next != nullptr && may_merge(*b, *b->next)) {
    unindex(b->next);
    absorb(b, b->next);
  }
  if (b->prev != nullptr && may_merge(*b->prev, *b)) {
    arena_block* left = b->prev;
    unindex(left);
    absorb(left, b);
    b = left;
  }
  index(b);
  return b;
}

arena_block* block_arena::take(arena_block* b, std::uintptr_t at, std::size_t n,
                               std::uint64_t stream) {
  STREAMPOOL_ASSERT(b->state == block_state::mapped && at >= b->start && at + n <= b->end() &&
                    n > 0);
  unindex(b);
  if (at > b->start) {
    arena_block* right = split(b, at);
    index(b);
    b = right;
  }
  if (b->size > n) index(split(b, at + n, /*move_tokens=*/true));
  b->state = block_state::live;
  b->tokens.clear();
  b->absorbed_complete = false;
  b->stream = stream;
  live_.insert(b->start, b);
  return b;
}

arena_block* block_arena::release(arena_block* b, token_set tokens) {
  STREAMPOOL_ASSERT(b->state == block_state::live);
  live_.erase(b->start);
  b->state = block_state::mapped;
  b->tokens = std::move(tokens);
  return merge_and_index(b);
}

arena_block* block_arena::change_state(arena_block* b, std::uintptr_t from, std::uintptr_t to,
                                       block_state state) {
  STREAMPOOL_ASSERT(b->is_free() && state != block_state::live && b->state != state);
  STREAMPOOL_ASSERT(from >= b->start && to <= b->end() && from < to);
  STREAMPOOL_ASSERT(from % granularity_ == 0 && to % granularity_ == 0);
  unindex(b);
  if (from > b->start) {
    arena_block* right = split(b, from);
    index(b);  // keeps the old state: its neighbour (right) is about to change, so no merge
    b = right;
  }
  if (b->end() > to) index(split(b, to, /*move_tokens=*/true));
  b->state = state;
  b->tokens.clear();
  return merge_and_index(b);
}

std::size_t block_arena::coalesce(bool force) {
  std::vector<arena_block*> lefts;  // mapped blocks followed by a mapped block, in no order
  for_each_mapped_free([&](arena_block* b) {
    if (b->next != nullptr && b->next->state == block_state::mapped) lefts.push_back(b);
  });
  // Right to left (descending start), so that a block merged away is never visited after.
  std::sort(lefts.begin(), lefts.end(),
            [](const arena_block* x, const arena_block* y) { return x->start > y->start; });
  std::size_t merges = 0;
  for (arena_block* left : lefts) {
    arena_block* right = left->next;
    if (!force && !may_merge(*left, *right)) continue;
    unindex(left);
    unindex(right);
    absorb(left, right);
    index(left);
    ++merges;
  }
  return merges;
}

arena_block* block_arena::join(arena_block* b, std::uintptr_t to) {
  STREAMPOOL_ASSERT(b->state == block_state::mapped);
  while (b->end() < to) {
    arena_block* right = b->next;
    STREAMPOOL_ASSERT(right != nullptr && right->state == block_state::mapped);
    unindex(b);
    unindex(right);
    absorb(b, right);
    index(b);
  }
  return b;
}

arena_block* block_arena::find_live(std::uintptr_t p) const noexcept { return live_.find(p); }

arena_block* block_arena::block_at(const arena_range& r, std::uintptr_t a) noexcept {
  for (arena_block* b = r.first; b != nullptr; b = b->next)
    if (b->start <= a && a < b->end()) return b;
  return nullptr;
}

std::optional<block_arena::window> block_arena::best_window(
    std::size_t n, const std::function<bool(const arena_block&)>& ready) const {
  std::optional<window> best;
  auto better = [](const window& a, const window& b) {
    const std::size_t ca = a.chain_end - a.chain_start, cb = b.chain_end - b.chain_start;
    return std::tie(a.pending, a.map_granules, ca, a.start) <
           std::tie(b.pending, b.map_granules, cb, b.start);
  };
  std::uintptr_t done_until = 0;
  std::vector<arena_block*> chain;
  for (arena_block* u : unmapped_) {
    if (u->start < done_until) continue;  // part of a chain already looked at
    arena_block* first = u;
    while (first->prev != nullptr && first->prev->is_free()) first = first->prev;
    chain.clear();
    for (arena_block* b = first; b != nullptr && b->is_free(); b = b->next) chain.push_back(b);
    const std::uintptr_t lo = chain.front()->start, hi = chain.back()->end();
    done_until = hi;
    if (hi - lo < n) continue;
    // The cheapest window starts or ends on a piece boundary: between boundaries, sliding it only
    // trades mapped bytes on one side for bytes of the same kind on the other.
    auto consider = [&](std::uintptr_t w) {
      if (w < lo || w + n > hi) return;
      window c;
      c.start = w;
      c.chain_start = lo;
      c.chain_end = hi;
      for (arena_block* b : chain) {
        if (b->end() <= w || b->start >= w + n) continue;
        c.pieces.push_back(b);
        if (b->state == block_state::unmapped) {
          const std::uintptr_t a = std::max(b->start, w), z = std::min(b->end(), w + n);
          c.map_granules += (round_up(z) - round_down(a)) / granularity_;
        } else if (!ready(*b)) {
          c.pending = true;
        }
      }
      if (!best || better(c, *best)) best = std::move(c);
    };
    for (arena_block* b : chain) {
      consider(b->start);
      if (b->end() >= lo + n) consider(b->end() - n);
    }
  }
  return best;
}

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> block_arena::granules_to_map(
    const window& w, std::size_t n) const {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
  for (arena_block* b : w.pieces) {
    if (b->state != block_state::unmapped) continue;
    out.emplace_back(round_down(std::max(b->start, w.start)),
                     round_up(std::min(b->end(), w.start + n)));
  }
  return out;
}

void block_arena::check() const {
  const std::string broken_invariant = find_broken();
  if (!broken_invariant.empty()) {
    std::fprintf(stderr, "streampool: invariant broken: %s\n", broken_invariant.c_str());
    std::abort();
  }
}

std::string block_arena::find_broken_in(const arena_block& block, block_counts& n) const {
  auto* b = const_cast<arena_block*>(&block);  // the indexes hold non-const pointers
  switch (b->state) {
    case block_state::live:
      ++n.live;
      if (find_live(b->start) != b) return broken("indexes: live block not indexed", *b);
      break;
    case block_state::mapped:
      ++n.mapped;
      if (b->size < index_min_) {
        ++n.fragments;
        if (mapped_.contains(b))
          return broken("indexes: a fragment (under index_min) is in the size index", *b);
      } else if (!mapped_.contains(b)) {
        return broken("indexes: mapped block not indexed (or under another size or start)", *b);
      }
      for (std::size_t i = 0; i < b->tokens.size(); ++i)
        for (std::size_t j = i + 1; j < b->tokens.size(); ++j)
          if (b->tokens[i].line == b->tokens[j].line)
            return broken("tokens: two tokens of one timeline", *b);
      break;
    case block_state::unmapped:
      ++n.unmapped;
      if (unmapped_.count(b) == 0) return broken("indexes: unmapped block not indexed", *b);
      if (b->start % granularity_ != 0 || b->size % granularity_ != 0)
        return broken("unmapped: block not granule-aligned", *b);
      if (!b->tokens.empty()) return broken("unmapped: block with tokens", *b);
      break;
  }
  return {};
}

std::string block_arena::find_broken() const {
  block_counts counts;
  for (const auto& r : ranges_) {
    std::uintptr_t at = r->base;
    const arena_block* prev = nullptr;
    for (const arena_block* b = r->first; b != nullptr; prev = b, b = b->next) {
      if (b->range != r.get()) return broken("tiling: a block of another range", *b);
      if (b->prev != prev) return broken("tiling: prev link does not point back", *b);
      if (b->start != at || b->size == 0) {
        return broken(format("tiling: blocks do not tile the range (expected a block at %#zx)",
                             static_cast<std::size_t>(at))
                          .c_str(),
                      *b);
      }
      at = b->end();
      if (prev != nullptr && prev->is_free() && prev->state == b->state &&
          (b->state == block_state::unmapped || !keep_streams_apart_ ||
           (timelines_of(*prev, *b) < 2 && !prev->absorbed_complete && !b->absorbed_complete))) {
        return broken(format("merged: adjacent free blocks in the same state, previous one at "
                             "%#zx with %zu token(s), not merged",
                             static_cast<std::size_t>(prev->start), prev->tokens.size())
                          .c_str(),
                      *b);
      }
      if (std::string why = find_broken_in(*b, counts); !why.empty()) return why;
    }
    if (r->first != nullptr && at != r->base + r->size) {
      return format("block arena: tiling: the blocks of range [%#zx, %#zx) end at %#zx",
                    static_cast<std::size_t>(r->base), static_cast<std::size_t>(r->base + r->size),
                    static_cast<std::size_t>(at));
    }
  }
  const auto [mapped, fragments, unmapped, live] = counts;
  if (mapped != mapped_count() || fragments != unindexed_ || unmapped != unmapped_.size() ||
      live != live_.size()) {
    return format(
        "block arena: indexes: they hold %zu+%zu/%zu/%zu blocks, the ranges %zu+%zu/%zu/%zu "
        "(mapped+fragments/unmapped/live)",
        mapped_.size(), unindexed_, unmapped_.size(), live_.size(), mapped - fragments, fragments,
        unmapped, live);
  }
  return {};
}

}  // namespace streampool::detail
