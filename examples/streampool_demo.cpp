// streampool demo: plays the origin report's scenario on every backend that runs here, then
// prints a short alloc+free timing table. Run by `bash scripts/run-main.sh`.
//
// The scenario (see docs/design.md, "The failure"): a thread allocates 1000 small arrays on its
// own stream, fills them, synchronises and exits, dropping its stream; its arrays die after it.
// The main thread then uploads 1000 arrays of random data, which must reuse those blocks, and
// reads every one back. In the library this crashed, the pool kept the dead stream reachable.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "streampool/streampool.hpp"
#if defined(STREAMPOOL_HAVE_CUDA_BACKEND)
#include "streampool/cuda.hpp"
#endif
#if defined(STREAMPOOL_HAVE_OPENCL_BACKEND)
#include "streampool/opencl.hpp"
#endif
#if defined(STREAMPOOL_HAVE_LEVEL_ZERO_BACKEND)
#include "streampool/level_zero.hpp"
#endif

namespace sp = streampool;

namespace {

bool origin_scenario(const sp::device& d, const char* name) {
  sp::pool p = d.default_pool();
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  bool ok = true;
  for (int round = 0; round < 20 && ok; ++round) {
    std::vector<sp::array<float>> left_behind;
    std::thread([&] {
      sp::stream own(d);  // the task-local stream; dies with the thread
      sp::stream_scope scope(own);
      std::vector<sp::array<float>> as;
      for (int i = 0; i < 1000; ++i) as.emplace_back(1024, d);
      for (auto& a : as) a.fill(1.f);
      own.synchronize();
      left_behind = std::move(as);  // outlive the thread and its stream
    }).join();
    left_behind.clear();  // freed with tokens on a retired timeline: nothing to resurrect

    const auto before = p.statistics();
    std::vector<std::vector<float>> host(1000, std::vector<float>(1024));
    std::vector<sp::array<float>> bs;
    for (auto& h : host) {
      for (auto& x : h) x = dist(rng);
      bs.emplace_back(std::span<const float>(h), d);
    }
    for (std::size_t i = 0; i < bs.size(); ++i) ok = ok && bs[i].download() == host[i];
    const auto after = p.statistics();
    if (round == 19) {
      const auto reused = (after.ready_reuses + after.waited_reuses + after.same_stream_reuses) -
                          (before.ready_reuses + before.waited_reuses + before.same_stream_reuses);
      std::printf(
          "  %-6s 20 rounds: read-back %s; last round reused %llu blocks, reserved %.1f "
          "MiB (peak %.1f MiB), device waits %llu\n",
          name, ok ? "exact" : "WRONG", static_cast<unsigned long long>(reused),
          static_cast<double>(after.reserved_bytes) / (1 << 20),
          static_cast<double>(after.peak_reserved_bytes) / (1 << 20),
          static_cast<unsigned long long>(after.device_waits));
    }
  }
  return ok;
}

template <class Alloc, class Free>
double ns_per_pair(std::size_t bytes, Alloc&& alloc, Free&& free_) {
  constexpr int warm = 1000, iters = 200000;
  for (int i = 0; i < warm; ++i) free_(alloc(bytes));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) free_(alloc(bytes));
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

void timing_table(const sp::device& d, const char* name) {
  sp::pool p(d);
  sp::stream s(d);
  std::printf("  %-10s %10s %14s %12s %8s\n", "size", "backend", "streampool ns", "malloc ns",
              "ratio");
  for (std::size_t bytes : {256u, 4096u, 65536u, 1u << 20}) {
    const double pool_ns = ns_per_pair(
        bytes, [&](std::size_t n) { return p.allocate(s, n); },
        [&](void* q) { p.deallocate(s, q); });
    const double malloc_ns = ns_per_pair(
        bytes,
        [](std::size_t n) {
          void* q = std::malloc(n);
          static_cast<volatile char*>(q)[0] = 1;  // keep the pair from being optimised away
          return q;
        },
        [](void* q) { std::free(q); });
    std::printf("  %-10zu %10s %14.1f %12.1f %8.2f\n", bytes, name, pool_ns, malloc_ns,
                pool_ns / malloc_ns);
  }
}

/// A backend this build knows: whether its runtime and a device are here, and how to make one.
struct backend_entry {
  const char* name;
  bool built;            // compiled into this build of the library
  bool (*available)();   // runtime loaded and at least one device
  sp::device (*make)();  // a device on the first one
  const char* missing;   // what is absent when it is not available
};

std::vector<backend_entry> backends() {
  std::vector<backend_entry> all;
  all.push_back({"host", true, [] { return true; },
                 [] { return sp::device(sp::make_host_backend({.checking = true})); }, ""});
#if defined(STREAMPOOL_HAVE_CUDA_BACKEND)
  all.push_back({"cuda", true, [] { return sp::cuda_available(); },
                 [] { return sp::device(sp::make_cuda_backend(0)); }, "no CUDA driver or GPU"});
#else
  all.push_back({"cuda", false, nullptr, nullptr, ""});
#endif
#if defined(STREAMPOOL_HAVE_OPENCL_BACKEND)
  all.push_back({"opencl", true, [] { return sp::opencl_available(); },
                 [] { return sp::device(sp::make_opencl_backend(0)); },
                 "no OpenCL runtime (libOpenCL.so.1) or device"});
#else
  all.push_back({"opencl", false, nullptr, nullptr, ""});
#endif
#if defined(STREAMPOOL_HAVE_LEVEL_ZERO_BACKEND)
  all.push_back({"level_zero", true, [] { return sp::level_zero_available(); },
                 [] { return sp::device(sp::make_level_zero_backend(0)); },
                 "no Level Zero loader (libze_loader.so.1) with a driver and device"});
#else
  all.push_back({"level_zero", false, nullptr, nullptr, ""});
#endif
  return all;
}

}  // namespace

int main() {
  std::printf("streampool demo\n\nBackends in this build:\n");
  std::vector<std::pair<sp::device, const char*>> found;
  for (const backend_entry& b : backends()) {
    if (!b.built) {
      std::printf("  %-10s not built (its API headers were missing at build time)\n", b.name);
    } else if (!b.available()) {
      std::printf("  %-10s built; not available here: %s\n", b.name, b.missing);
    } else {
      found.emplace_back(b.make(), b.name);
      std::printf("  %-10s available: %s\n", b.name,
                  found.back().first.get_backend().name().c_str());
    }
  }
  std::printf(
      "\n1. The origin scenario on every available backend (threads die with their streams; "
      "their arrays are freed later; the main thread reuses the blocks)\n");
  bool ok = true;
  for (auto& [d, name] : found) ok = origin_scenario(d, name) && ok;
  std::printf(
      "\n2. Warm alloc+free pair on one stream (steady_clock, 200k pairs; the benchmarks "
      "in bench/ are the measurement)\n");
  std::vector<std::pair<sp::device, const char*>> timed{{sp::device::host(), "host"}};
  for (auto& entry : found)
    if (std::string(entry.second) != "host") timed.push_back(entry);
  for (auto& [d, name] : timed) timing_table(d, name);
  std::printf("\n%s\n", ok ? "demo: OK" : "demo: FAILED");
  return ok ? 0 : 1;
}
