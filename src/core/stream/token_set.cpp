// streampool: the token set (token_set.hpp).
#include "core/stream/token_set.hpp"

#include <algorithm>
#include <utility>

namespace streampool::detail {
namespace {

template <class Line>  // const std::shared_ptr<timeline>& or std::shared_ptr<timeline>
bool merge_line(token_set& set, Line&& line, timeline::point at) {
  if (!line || line->completed() >= at) return false;
  for (token& x : set) {
    if (x.line == line) {
      x.at = std::max(x.at, at);
      return true;
    }
  }
  set.push_back(token{std::forward<Line>(line), at});
  return true;
}

}  // namespace

bool merge_token(token_set& set, const token& t) { return merge_point(set, t.line, t.at); }

bool merge_point(token_set& set, const std::shared_ptr<timeline>& line, timeline::point at) {
  return merge_line(set, line, at);
}

bool merge_point(token_set& set, std::shared_ptr<timeline>&& line, timeline::point at) {
  return merge_line(set, std::move(line), at);
}

void merge_free_point(token_set& set, const std::shared_ptr<timeline>& line,
                      std::shared_ptr<timeline>* kept) {
  if (set.empty()) [[likely]] {
    // The usual free (nothing recorded): merge_point's search of the set, and its calls, skipped
    // (docs/performance.md, "The free path").
    const timeline::point at = line->current();
    if (line->completed() >= at) return;
    // Made in place (no temporary token to move from and destroy).
    token& t = set.emplace_back();
    t.at = at;
    if (kept != nullptr && *kept == line) {
      t.line = std::move(*kept);
    } else {
      t.line = line;
    }
    return;
  }
  if (kept != nullptr && *kept == line) {
    merge_point(set, std::move(*kept), line->current());
  } else {
    merge_point(set, line, line->current());
  }
}

bool one_token_per_timeline(const token_set& tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t j = i + 1; j < tokens.size(); ++j)
      if (tokens[i].line == tokens[j].line) return false;
  return true;
}

}  // namespace streampool::detail
