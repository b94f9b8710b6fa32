// streampool: the token set, what one piece of free memory waits for (docs/design.md, "The
// model: timelines and tokens").
//
// Invariant: at most one token per timeline, the latest point of that timeline that the memory
// must wait for; a complete token may be dropped at any time (a set never needs to hold one).
#pragma once

#include <memory>
#include <vector>

#include "streampool/timeline.hpp"

namespace streampool::detail {

/// Tokens that one piece of memory must wait for, at most one per timeline (the latest point).
using token_set = std::vector<token>;

/// Adds `t` to `set`, keeping one token per timeline and dropping complete ones. Returns false
/// when `t` was dropped (complete already, or no timeline).
bool merge_token(token_set& set, const token& t);
/// merge_token for the point `at` of `line`, without a token made for it: the set copies `line`
/// (a reference count's locked increment) only when it has no token of that timeline yet.
bool merge_point(token_set& set, const std::shared_ptr<timeline>& line, timeline::point at);
/// The same, taking over `line`'s reference when the set needs a new token.
bool merge_point(token_set& set, std::shared_ptr<timeline>&& line, timeline::point at);

/// A free on `line`: its point now joins `set`. `kept`: a reference to `line` the caller holds
/// anyway (arena_block::kept_line); when the set needs a new token, the token takes it over.
void merge_free_point(token_set& set, const std::shared_ptr<timeline>& line,
                      std::shared_ptr<timeline>* kept = nullptr);

/// At a free: each use declared ahead of its work (token::at_free) becomes its timeline's point
/// now, so that the free waits for everything that stream queued until it.
inline void resolve_at_free(token_set& set) {
  for (token& t : set)
    if (t.at == token::at_free) t.at = t.line->current();
}

/// Memory with these tokens may go to `on` with no wait. A plain loop, not std::all_of: a set
/// holds one token nearly always, and this is asked on every reuse.
[[nodiscard]] inline bool all_ready_for(const token_set& tokens, const timeline* on) {
  for (const token& t : tokens)
    if (!t.ready_for(on)) return false;
  return true;
}

/// Every token is complete (memory may go back to the upstream, or be remapped).
[[nodiscard]] inline bool all_complete(const token_set& tokens) {
  return all_ready_for(tokens, nullptr);
}

/// The invariant above, for validate().
[[nodiscard]] bool one_token_per_timeline(const token_set& tokens);

}  // namespace streampool::detail
