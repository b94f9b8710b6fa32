// streampool: the allocation history in PyTorch's form (history.hpp).
#include "history.hpp"

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <utility>

namespace streampool::torch_native {
namespace {

using trace_action = c10::CachingDeviceAllocator::TraceEntry::Action;
using c10::CachingDeviceAllocator::RecordContext;

/// PyTorch's names of the actions (skip_actions, and the snapshot's "action" field).
constexpr std::array<std::pair<std::string_view, trace_action>, 9> action_names{{
    {"alloc", trace_action::ALLOC},
    {"free_requested", trace_action::FREE_REQUESTED},
    {"free_completed", trace_action::FREE_COMPLETED},
    {"segment_alloc", trace_action::SEGMENT_ALLOC},
    {"segment_free", trace_action::SEGMENT_FREE},
    {"segment_map", trace_action::SEGMENT_MAP},
    {"segment_unmap", trace_action::SEGMENT_UNMAP},
    {"snapshot", trace_action::SNAPSHOT},
    {"oom", trace_action::OOM},
}};

}  // namespace

void history::configure(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder,
                        std::size_t max_entries, RecordContext when, bool clear,
                        const std::vector<std::string>& skip_actions) {
  std::vector<bool> skipped(skipped_.size(), false);
  for (const std::string& name : skip_actions) {
    const auto it = std::find_if(action_names.begin(), action_names.end(),
                                 [&](const auto& a) { return a.first == name; });
    TORCH_CHECK(it != action_names.end(), "streampool: _record_memory_history: skip action '", name,
                "' is not one of PyTorch's (alloc, free_requested, free_completed, "
                "segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom)");
    skipped[static_cast<std::size_t>(it->second)] = true;
  }
  const std::lock_guard lock(mu_);
  recorder_ = recorder;
  when_ = enabled ? when : RecordContext::NEVER;
  max_entries_ = std::max<std::size_t>(1, max_entries);
  skipped_ = std::move(skipped);
  if (!enabled || clear || ring_.size() > max_entries_) {
    ring_.clear();
    next_ = 0;
  }
  on_.store(enabled, std::memory_order_relaxed);
}

history::context history::context_for(entry::Action action) const {
  c10::CachingDeviceAllocator::CreateContextFn recorder = nullptr;
  RecordContext when = RecordContext::NEVER;
  {
    const std::lock_guard lock(mu_);
    recorder = recorder_;
    when = when_;
  }
  const bool wanted =
      action == trace_action::ALLOC ? when >= RecordContext::ALLOC : when >= RecordContext::ALL;
  return wanted && recorder != nullptr ? recorder() : nullptr;
}

void history::record(entry::Action action, c10::DeviceIndex device, std::size_t addr,
                     std::size_t size, void* stream, c10::MempoolId_t pool, context ctx) {
  const c10::approx_time_t now = c10::getApproximateTime();
  const std::lock_guard lock(mu_);
  if (!on_.load(std::memory_order_relaxed) || skipped_[static_cast<std::size_t>(action)]) return;
  entry e(action, device, addr, size, stream, pool, now, std::move(ctx));
  if (ring_.size() < max_entries_) {
    ring_.push_back(std::move(e));
  } else {
    ring_[next_] = std::move(e);
    next_ = (next_ + 1) % max_entries_;
  }
}

std::vector<std::vector<history::entry>> history::traces(int devices) {
  static c10::ApproximateClockToUnixTimeConverter clock;
  static const std::function<time_t(c10::approx_time_t)> to_ns = clock.makeConverter();
  std::vector<std::vector<entry>> out(static_cast<std::size_t>(std::max(devices, 0)));
  const std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    entry e = ring_[(next_ + i) % ring_.size()];
    e.time_.t_ = to_ns(e.time_.approx_t_) / 1000;
    const auto d = static_cast<std::size_t>(static_cast<unsigned char>(e.device_));
    if (d < out.size()) out[d].push_back(std::move(e));
  }
  return out;
}

}  // namespace streampool::torch_native
