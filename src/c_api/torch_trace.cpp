// streampool: the PyTorch plug-in's allocation recorder (torch_trace.hpp).
#include "torch_trace.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <vector>

namespace streampool::c_api {

class trace_recorder {
 public:
  explicit trace_recorder(std::FILE* out) : out_(out) {
    std::fputs("# streampool torch plug-in trace (STREAMPOOL_TORCH_TRACE)\n", out_);
    std::fputs("# format: <action> <id> <size-bytes> <stream>; sizes as requested\n", out_);
  }

  void alloc(const void* p, std::size_t size, const void* stream) {
    std::lock_guard lock(mu_);
    const std::uint32_t s = stream_number(stream);
    std::uint32_t id = next_id_;
    if (free_ids_.empty()) {
      ++next_id_;
    } else {
      id = free_ids_.top();
      free_ids_.pop();
    }
    live_[p] = {id, s, size};
    std::fprintf(out_, "alloc %u %zu %u\n", id, size, s);
  }

  void free(const void* p) {
    std::lock_guard lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not recorded (allocated before the recorder opened)
    const live_block b = it->second;
    live_.erase(it);
    free_ids_.push(b.id);
    std::fprintf(out_, "free_completed %u %zu %u\n", b.id, b.size, b.stream);
  }

  void phase(const char* name) {
    std::lock_guard lock(mu_);
    std::fprintf(out_, "# %s\n", name);
    std::fflush(out_);
  }

 private:
  struct live_block {
    std::uint32_t id;
    std::uint32_t stream;
    std::size_t size;
  };

  std::uint32_t stream_number(const void* stream) {
    if (stream == nullptr) return 0;
    auto [it, inserted] =
        streams_.try_emplace(stream, static_cast<std::uint32_t>(streams_.size() + 1));
    return it->second;
  }

  std::mutex mu_;
  std::FILE* out_;  // never closed: frees arrive from static destructors; exit() flushes it
  std::unordered_map<const void*, live_block> live_;
  std::unordered_map<const void*, std::uint32_t> streams_;
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> free_ids_;
  std::uint32_t next_id_ = 0;
};

std::atomic<int> trace_state{trace_unknown};

namespace {

trace_recorder* open_recorder() {
  const char* path = std::getenv("STREAMPOOL_TORCH_TRACE");
  if (path == nullptr || *path == '\0') return nullptr;
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "streampool: torch plug-in: cannot open STREAMPOOL_TORCH_TRACE=%s\n",
                 path);
    return nullptr;
  }
  return new trace_recorder(f);  // leaked deliberately, like the plug-in's pools
}

/// The recorder, opening it (once) on the first call; nullptr when off.
trace_recorder* recorder() {
  static trace_recorder* const r = [] {
    trace_recorder* opened = open_recorder();
    trace_state.store(opened != nullptr ? trace_on : trace_off, std::memory_order_release);
    return opened;
  }();
  return r;
}

}  // namespace

void record_alloc(const void* p, std::size_t size, const void* stream) {
  if (trace_recorder* r = recorder()) r->alloc(p, size, stream);
}
void record_free(const void* p) {
  if (trace_recorder* r = recorder()) r->free(p);
}
void record_phase(const char* name) {
  if (trace_recorder* r = recorder()) r->phase(name);
}

}  // namespace streampool::c_api
