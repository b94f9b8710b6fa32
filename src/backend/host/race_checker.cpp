#include "race_checker.hpp"

#include <algorithm>

#include "streampool/error.hpp"

namespace streampool::detail {

void merge_into(vector_clock& into, const vector_clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void race_checker::add_segment(const void* p, std::size_t bytes) {
  std::lock_guard lock(mu_);
  segments_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
}

void race_checker::remove_segment(const void* p, std::size_t bytes) {
  std::lock_guard lock(mu_);
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  segments_.erase(start);
  forget_locked(start, bytes);
}

void race_checker::forget(const void* p, std::size_t bytes) {
  std::lock_guard lock(mu_);
  forget_locked(reinterpret_cast<std::uintptr_t>(p), bytes);
}

void race_checker::forget_locked(std::uintptr_t start, std::size_t bytes) {
  const std::uintptr_t first = start / granule, last = (start + bytes) / granule;
  if (last - first > shadow_.size()) {
    // A big segment with few tracked granules: walk the shadow, not the range.
    std::erase_if(shadow_, [&](const auto& e) { return e.first >= first && e.first < last; });
  } else {
    for (std::uintptr_t g = first; g < last; ++g) shadow_.erase(g);
  }
}

void race_checker::observe(const vector_clock& vc) {
  std::lock_guard lock(mu_);
  merge_into(observed_, vc);
}

bool race_checker::ordered(const use& u, std::size_t queue, const vector_clock& vc) const {
  if (u.queue == ~0u || u.queue == queue) return true;
  if (u.queue < vc.size() && vc[u.queue] >= u.clock) return true;
  return u.queue < observed_.size() && observed_[u.queue] >= u.clock;
}

void race_checker::access(std::size_t queue, const vector_clock& vc, const void* p,
                          std::size_t bytes, bool write) {
  if (bytes == 0) return;
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  // Only memory inside the backend's own segments is tracked (not the user's host buffers).
  auto seg = segments_.upper_bound(start);
  if (seg == segments_.begin()) return;
  --seg;
  if (start >= seg->first + seg->second) return;
  const use now{static_cast<std::uint32_t>(queue), vc[queue]};
  for (std::uintptr_t g = start / granule; g <= (start + bytes - 1) / granule; ++g) {
    shadow& s = shadow_[g];
    auto report = [&](const use& prev, const char* what) {
      if (violations_.size() < 64) {
        violations_.push_back(format(
            "unordered reuse: queue %u (clock %llu) %s granule %#llx, last %s by queue %u at clock "
            "%llu, which this queue is not ordered after (it knows clock %llu of that queue)",
            now.queue, static_cast<unsigned long long>(now.clock), write ? "writes" : "reads",
            static_cast<unsigned long long>(std::uintptr_t{g * granule}), what, prev.queue,
            static_cast<unsigned long long>(prev.clock),
            static_cast<unsigned long long>(prev.queue < vc.size() ? vc[prev.queue] : 0)));
      }
    };
    if (!ordered(s.writer, queue, vc)) report(s.writer, "written");
    if (write) {
      for (const use& r : s.readers)
        if (!ordered(r, queue, vc)) report(r, "read");
      s.writer = now;
      s.readers.clear();
    } else {
      auto it = std::find_if(s.readers.begin(), s.readers.end(),
                             [&](const use& r) { return r.queue == now.queue; });
      if (it != s.readers.end())
        it->clock = now.clock;
      else
        s.readers.push_back(now);
    }
  }
}

void race_checker::violation(std::string message) {
  std::lock_guard lock(mu_);
  violations_.push_back(std::move(message));
}

std::vector<std::string> race_checker::violations() const {
  std::lock_guard lock(mu_);
  return violations_;
}

}  // namespace streampool::detail
