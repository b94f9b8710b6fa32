// gpu_pool_bench: streampool on the CUDA backend next to the anchors, in one program and one run
// (issue 3). Anchors: cudaMalloc/cudaFree, cudaMallocAsync/cudaFreeAsync (the device's default
// memory pool, release threshold UINT64_MAX, warmed), and PyTorch's caching allocator
// (raw_alloc_with_stream / raw_delete) when built with STREAMPOOL_BENCH_TORCH.
//
//   gpu_pool_bench [--quick] [--latency]
//
// --latency: table 1 alone (seconds, not minutes), for scripts/device-bench-compare.sh to alternate
// two libraries many times in one call when the machine is noisy.
//
// Measures, each printed as a markdown table with ratios against the anchors:
//   1. ns per alloc+free pair, one thread, at 256 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB, and per step of
//      the mixed 1000-live pattern (one step = one free + one allocation, bench_workloads.hpp);
//      median of 5 timed repetitions of ~40 ms each, after a warm-up.
//   2. aggregate pairs/s at 1, 4 and 16 threads, each thread on its own stream (4 KiB pairs and
//      the mixed pattern).
//   3. cross-stream reuse: allocate 1 MiB on stream A, run a ~1 ms kernel on it, free it on A, then
//      allocate 1 MiB on a fresh stream B: same memory or not, device-side wait or not, host
//      blocked or not, host latency of that allocation (and of the free), pool growth.
// Exits 77 (skip) when no CUDA device is available.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench_workloads.hpp"
#include "streampool/cuda.hpp"

#ifdef STREAMPOOL_BENCH_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#endif

cudaError_t streampool_bench_spin(cudaStream_t stream, unsigned long long ns, void* touch);

namespace {

using namespace streampool;
using namespace streampool::bench;
using clock_type = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_pool_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define BENCH_CUDA(call) check((call), #call)

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

bool quick = false;
bool latency_only = false;

// ---- adaptors (one per thread; each creates its own stream) -------------------------------------

struct cuda_device {
  static device& get() {
    static device d(make_cuda_backend(0));
    return d;
  }
};

struct streampool_alloc : pool_allocator<cuda_device> {
  static constexpr const char* name = "streampool";
  cudaStream_t native() const { return static_cast<cudaStream_t>(get_stream().native()); }
};

struct cuda_malloc_alloc {
  static constexpr const char* name = "cudaMalloc";
  void* allocate(std::size_t n) {
    void* p = nullptr;
    BENCH_CUDA(cudaMalloc(&p, n));
    return p;
  }
  void deallocate(void* p, std::size_t /*n*/) { BENCH_CUDA(cudaFree(p)); }
};

class own_stream {
 public:
  own_stream() { BENCH_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  own_stream(const own_stream&) = delete;
  own_stream& operator=(const own_stream&) = delete;
  ~own_stream() {
    BENCH_CUDA(cudaStreamSynchronize(s_));
    BENCH_CUDA(cudaStreamDestroy(s_));
  }
  [[nodiscard]] cudaStream_t native() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

struct cuda_async_alloc : own_stream {
  static constexpr const char* name = "cudaMallocAsync";
  void* allocate(std::size_t n) {
    void* p = nullptr;
    BENCH_CUDA(cudaMallocAsync(&p, n, native()));
    return p;
  }
  void deallocate(void* p, std::size_t /*n*/) { BENCH_CUDA(cudaFreeAsync(p, native())); }
  static void setup() {
    cudaMemPool_t pool = nullptr;
    BENCH_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t threshold = UINT64_MAX;
    BENCH_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  static std::size_t reserved() {
    cudaMemPool_t pool = nullptr;
    BENCH_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t v = 0;
    BENCH_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v));
    return static_cast<std::size_t>(v);
  }
};

#ifdef STREAMPOOL_BENCH_TORCH
struct torch_alloc : own_stream {
  static constexpr const char* name = "PyTorch";
  void* allocate(std::size_t n) {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(n, native());
  }
  void deallocate(void* p, std::size_t /*n*/) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
  static void setup() {
    int n = 0;
    BENCH_CUDA(cudaGetDeviceCount(&n));
    c10::cuda::CUDACachingAllocator::init(n);
  }
  static std::size_t reserved() {
    auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return static_cast<std::size_t>(st.reserved_bytes[0].current);
  }
};
#endif

// ---- 1. ns per pair ----------------------------------------------------------------------------

/// Median ns per call of f over 5 timed repetitions (after calibration, which also warms up).
template <class F>
double median_ns(F&& f) {
  const double rep_s = quick ? 0.01 : 0.04;
  std::size_t n = 8;
  double t = 0;
  for (;;) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; ++i) f();
    t = seconds_since(t0);
    if (t >= rep_s / 4 || n >= (std::size_t{1} << 26)) break;
    n *= 4;
  }
  n = std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(n) * rep_s / t));
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; ++i) f();
    reps.push_back(seconds_since(t0) * 1e9 / static_cast<double>(n));
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

template <class A>
double pair_ns(std::size_t bytes) {
  A a;
  return median_ns([&] {
    void* p = a.allocate(bytes);
    a.deallocate(p, bytes);
  });
}

template <class A>
double mixed_ns() {
  A a;
  mixed_runner<A> run(a);
  return median_ns([&] { run.step(); });
}

// ---- 2. aggregate pairs/s -----------------------------------------------------------------------

/// What the last streampool run of pairs_per_s left behind (issue 8's memory and contention check).
struct scaling_note {
  std::size_t peak_live_sum = 0;  // the threads' peak live bytes (mixed: as requested), summed
  std::uint64_t contended = 0;    // the pool's contended lock acquisitions during the run
  lock_contention by_lock;        // the same, by lock (pool totals at the end of the run)
};
scaling_note last_scaling;

/// `warm`: steps each thread runs before the timed part. 256 measures a start (what a short
/// program sees, growth included); mixed_pattern::length / 8 (what host_pool_bench warms) a
/// steady state.
template <class A>
double pairs_per_s(int threads, bool mixed, int warm = 256) {
  const double seconds = quick ? 0.05 : 0.25;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::uint64_t> count(static_cast<std::size_t>(threads), 0);
  std::vector<std::size_t> peak(static_cast<std::size_t>(threads), 0);
  constexpr bool is_pool = std::is_same_v<A, streampool_alloc>;
  std::uint64_t contended0 = 0;
  if constexpr (is_pool) {
    contended0 = cuda_device::get().default_pool().statistics().contention.total();
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      BENCH_CUDA(cudaSetDevice(0));
      A a;
      std::optional<mixed_runner<A>> run;
      if (mixed) run.emplace(a);
      auto one = [&] {
        if (mixed) {
          run->step();
        } else {
          a.deallocate(a.allocate(4096), 4096);
        }
      };
      for (int i = 0; i < warm; ++i) one();
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 32; ++i) one();
        n += 32;
      }
      count[static_cast<std::size_t>(t)] = n;
      peak[static_cast<std::size_t>(t)] = mixed ? run->peak_live() : 4096;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = clock_type::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  // Threads finish their last batch of 32 before seeing `stop`; count that time too.
  for (auto& th : pool) th.join();
  const double wall = seconds_since(t0);
  std::uint64_t total = 0;
  for (auto c : count) total += c;
  if constexpr (is_pool) {
    const pool_statistics st = cuda_device::get().default_pool().statistics();
    last_scaling.peak_live_sum = 0;
    for (auto p : peak) last_scaling.peak_live_sum += p;
    last_scaling.contended = st.contention.total() - contended0;
    last_scaling.by_lock = st.contention;
  }
  return static_cast<double>(total) / wall;
}

// ---- 3. cross-stream reuse ---------------------------------------------------------------------

struct cross_result {
  int trials = 0;
  int same_memory = 0;
  int host_blocked = 0;     // the allocation on B returned after the kernel on A finished
  std::string device_wait;  // "yes (n)", "no", "implied", "n/a"
  double alloc_us = 0;      // median host latency of the allocation on B
  double free_us = 0;       // median host latency of the free on A
  double growth_mib = 0;    // reserved bytes added over all trials
  std::string extra;
};

constexpr std::size_t cross_bytes = std::size_t{1} << 20;
constexpr unsigned long long spin_ns = 1'000'000;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// One scenario over any adaptor type A whose objects each own a stream (A::native()).
/// `reserved` reads the allocator's reserved bytes; `stats` (may be empty) returns a note.
template <class A>
cross_result cross_stream(const std::function<std::size_t()>& reserved,
                          const std::function<std::uint64_t()>& device_waits) {
  cross_result r;
  const int trials = quick ? 3 : 9;
  A a;
  // Warm: stream A has handed out and taken back a 1 MiB block before.
  a.deallocate(a.allocate(cross_bytes), cross_bytes);
  BENCH_CUDA(cudaStreamSynchronize(a.native()));
  const std::size_t reserved0 = reserved();
  const std::uint64_t waits0 = device_waits ? device_waits() : 0;
  std::vector<double> alloc_us, free_us;
  for (int t = 0; t < trials; ++t) {
    A b;  // a fresh stream B each trial, so B never finds its own earlier block
    void* p = a.allocate(cross_bytes);
    BENCH_CUDA(streampool_bench_spin(a.native(), spin_ns, p));
    auto t0 = clock_type::now();
    a.deallocate(p, cross_bytes);
    free_us.push_back(seconds_since(t0) * 1e6);
    t0 = clock_type::now();
    void* q = b.allocate(cross_bytes);
    alloc_us.push_back(seconds_since(t0) * 1e6);
    const cudaError_t busy = cudaStreamQuery(a.native());
    if (busy != cudaErrorNotReady) {
      check(busy, "cudaStreamQuery");
      ++r.host_blocked;  // the kernel had finished by the time the allocation returned
    }
    if (q == p) ++r.same_memory;
    b.deallocate(q, cross_bytes);
    BENCH_CUDA(cudaStreamSynchronize(b.native()));
    BENCH_CUDA(cudaStreamSynchronize(a.native()));
  }
  r.trials = trials;
  r.alloc_us = median(alloc_us);
  r.free_us = median(free_us);
  r.growth_mib = static_cast<double>(reserved() - reserved0) / (1 << 20);
  if (device_waits) {
    const std::uint64_t w = device_waits() - waits0;
    r.device_wait = w != 0 ? "yes (" + std::to_string(w) + ")" : "no";
  } else {
    r.device_wait = r.same_memory != 0 && r.host_blocked == 0 ? "implied" : "no";
  }
  return r;
}

// ---- the run -----------------------------------------------------------------------------------

std::string format_row(const std::string& run, double contended_per_kpair, std::size_t reserved,
                       std::size_t peak_reserved, std::size_t peak_live_sum,
                       const lock_contention& c) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "| %s | %.3f | %zu | %zu | %.1f | %.2f | %llu, %llu, %llu, %llu, %llu, %llu |\n", run.c_str(),
      contended_per_kpair, reserved >> 20, peak_reserved >> 20,
      static_cast<double>(peak_live_sum) / (1 << 20),
      peak_live_sum > 0 ? static_cast<double>(reserved) / static_cast<double>(peak_live_sum) : 0.0,
      static_cast<unsigned long long>(c.stream_caches),
      static_cast<unsigned long long>(c.class_lists),
      static_cast<unsigned long long>(c.large_shards), static_cast<unsigned long long>(c.growth),
      static_cast<unsigned long long>(c.segments), static_cast<unsigned long long>(c.other));
  return buf;
}

struct row {
  std::string measure;
  std::map<std::string, double> v;  // by allocator name
};

std::vector<std::string> allocator_names() {
  std::vector<std::string> n = {"streampool", "cudaMalloc", "cudaMallocAsync"};
#ifdef STREAMPOOL_BENCH_TORCH
  n.emplace_back("PyTorch");
#endif
  return n;
}

std::string fmt(double x, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, x);
  return buf;
}

void print_table(const char* title, const char* unit, const std::vector<row>& rows,
                 bool lower_is_better) {
  const auto names = allocator_names();
  std::printf("\n### %s\n\n| %s |", title, unit);
  for (auto& n : names) std::printf(" %s |", n.c_str());
  for (std::size_t i = 1; i < names.size(); ++i)
    std::printf(" %s / %s |", lower_is_better ? names[i].c_str() : "streampool",
                lower_is_better ? "streampool" : names[i].c_str());
  std::printf("\n|---|");
  for (std::size_t i = 0; i < 2 * names.size() - 1; ++i) std::printf("---:|");
  std::printf("\n");
  for (const row& r : rows) {
    std::printf("| %s |", r.measure.c_str());
    for (auto& n : names) {
      auto it = r.v.find(n);
      std::printf(" %s |",
                  it == r.v.end() ? "-" : fmt(it->second, it->second < 100 ? 2 : 0).c_str());
    }
    const double sp = r.v.at("streampool");
    for (std::size_t i = 1; i < names.size(); ++i) {
      auto it = r.v.find(names[i]);
      if (it == r.v.end() || sp <= 0 || it->second <= 0) {
        std::printf(" - |");
      } else {
        const double ratio = lower_is_better ? it->second / sp : sp / it->second;
        std::printf(" %s |", fmt(ratio, ratio < 10 ? 2 : 1).c_str());
      }
    }
    std::printf("\n");
  }
  std::printf("\n(ratio > 1: streampool is faster by that factor)\n");
  std::fflush(stdout);
}

template <class F>
void for_each_allocator(F&& f) {
  f.template operator()<streampool_alloc>();
  f.template operator()<cuda_malloc_alloc>();
  f.template operator()<cuda_async_alloc>();
#ifdef STREAMPOOL_BENCH_TORCH
  f.template operator()<torch_alloc>();
#endif
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--latency") == 0) {
      latency_only = true;
    } else {
      std::fprintf(stderr, "usage: gpu_pool_bench [--quick] [--latency]\n");
      return 2;
    }
  }
  if (!cuda_available()) {
    std::printf("gpu_pool_bench: no CUDA device available; skipped\n");
    return 77;
  }
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaFree(nullptr));  // create the primary context
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  int runtime = 0, driver = 0;
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  std::printf("gpu_pool_bench: %s, runtime %d, driver %d, streampool pool on backend '%s'%s\n",
              prop.name, runtime, driver, cuda_device::get().get_backend().name().c_str(),
              quick ? ", --quick" : "");
  cuda_async_alloc::setup();
#ifdef STREAMPOOL_BENCH_TORCH
  torch_alloc::setup();
#else
  std::printf("(built without STREAMPOOL_BENCH_TORCH: no PyTorch column)\n");
#endif
  // Load the spin kernel's module now (lazy loading would otherwise stall the first trial).
  BENCH_CUDA(streampool_bench_spin(nullptr, 1000, nullptr));
  BENCH_CUDA(cudaDeviceSynchronize());

  // 1. ns per pair
  std::vector<row> latency;
  for (std::size_t bytes : pair_sizes) {
    row r;
    r.measure = bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB pair"
                : bytes >= 1024     ? std::to_string(bytes >> 10) + " KiB pair"
                                    : std::to_string(bytes) + " B pair";
    for_each_allocator([&]<class A>() { r.v[A::name] = pair_ns<A>(bytes); });
    latency.push_back(r);
  }
  {
    row r;
    r.measure = "mixed 1000-live, per step";
    for_each_allocator([&]<class A>() { r.v[A::name] = mixed_ns<A>(); });
    latency.push_back(r);
  }
  print_table("1. ns per alloc+free pair, one thread (median of 5)", "ns", latency, true);
  if (latency_only) return 0;

  // 2. aggregate throughput
  std::vector<row> rate;
  std::vector<std::string> scaling;        // streampool's contention and memory per run
  const auto note_scaling = [&](row& r) {  // right after the run, from last_scaling
    const pool_statistics st = cuda_device::get().default_pool().statistics();
    const double pairs = r.v["streampool"] * 1e6 * (quick ? 0.05 : 0.25);
    scaling.push_back(format_row(
        r.measure, pairs > 0 ? 1e3 * static_cast<double>(last_scaling.contended) / pairs : 0,
        st.reserved_bytes, st.peak_reserved_bytes, last_scaling.peak_live_sum,
        last_scaling.by_lock));
  };
  for (bool mixed : {false, true}) {
    for (int threads : {1, 4, 16}) {
      row r;
      r.measure = std::string(mixed ? "mixed" : "4 KiB") + ", " + std::to_string(threads) +
                  (threads == 1 ? " thread" : " threads");
      for_each_allocator([&]<class A>() { r.v[A::name] = pairs_per_s<A>(threads, mixed) / 1e6; });
      rate.push_back(r);
      note_scaling(r);
    }
  }
  // The mixed pattern in steady state: each thread first runs as many steps as host_pool_bench
  // warms, so that the timed part sees reuse, not the growth of a start. Not cudaMalloc: it
  // would take minutes to warm 16 threads.
  constexpr int steady_warm = static_cast<int>(mixed_pattern::length / 8);
  for (int threads : {1, 4, 16}) {
    row r;
    r.measure =
        "mixed, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + ", warmed";
    for_each_allocator([&]<class A>() {
      if constexpr (!std::is_same_v<A, cuda_malloc_alloc>) {
        r.v[A::name] = pairs_per_s<A>(threads, true, quick ? 256 : steady_warm) / 1e6;
      }
    });
    rate.push_back(r);
    note_scaling(r);
  }
  print_table("2. aggregate M pairs/s, each thread on its own stream", "M pairs/s", rate, false);
  std::printf(
      "\n### 2b. streampool in those runs: contended lock acquisitions and memory\n\n"
      "Reserved: the pool's, right after the run (it also holds what earlier runs left). Threads' "
      "peak live: each thread's most bytes live at once as requested, summed over the run's "
      "threads. By lock: the pool's totals so far.\n\n"
      "| run | contended per 1,000 pairs | reserved MiB | peak reserved MiB | threads' peak "
      "live MiB | reserved / threads' peak live | by lock: caches, class lists, large shards, "
      "growth, segments, other |\n|---|---:|---:|---:|---:|---:|---|\n");
  for (const std::string& line : scaling) std::printf("%s", line.c_str());

  // 3. cross-stream reuse
  std::map<std::string, cross_result> cross;
  const pool sp_pool = cuda_device::get().default_pool();
  cross["streampool"] =
      cross_stream<streampool_alloc>([&] { return sp_pool.statistics().reserved_bytes; },
                                     [&] { return sp_pool.statistics().device_waits; });
  {
    const auto st0 = sp_pool.statistics();
    cross["streampool"].extra = "host_waits " + std::to_string(st0.host_waits) +
                                ", waited_reuses " + std::to_string(st0.waited_reuses) +
                                " (pool totals)";
  }
  {
    // cudaMalloc has no streams: measure it separately (cudaFree synchronises the device).
    cross_result r;
    std::vector<double> alloc_us, free_us;
    const int trials = quick ? 3 : 9;
    own_stream a;
    for (int t = 0; t < trials; ++t) {
      void* p = nullptr;
      BENCH_CUDA(cudaMalloc(&p, cross_bytes));
      BENCH_CUDA(streampool_bench_spin(a.native(), spin_ns, p));
      auto t0 = clock_type::now();
      BENCH_CUDA(cudaFree(p));
      free_us.push_back(seconds_since(t0) * 1e6);
      t0 = clock_type::now();
      void* q = nullptr;
      BENCH_CUDA(cudaMalloc(&q, cross_bytes));
      alloc_us.push_back(seconds_since(t0) * 1e6);
      if (q == p) ++r.same_memory;
      if (cudaStreamQuery(a.native()) == cudaSuccess) ++r.host_blocked;
      BENCH_CUDA(cudaFree(q));
    }
    r.trials = trials;
    r.alloc_us = median(alloc_us);
    r.free_us = median(free_us);
    r.device_wait = "n/a";
    r.extra = "cudaFree blocks the host until the kernel is done";
    cross["cudaMalloc"] = r;
  }
  cross["cudaMallocAsync"] = cross_stream<cuda_async_alloc>(cuda_async_alloc::reserved, {});
#ifdef STREAMPOOL_BENCH_TORCH
  cross["PyTorch"] = cross_stream<torch_alloc>(torch_alloc::reserved, {});
#endif
  std::printf(
      "\n### 3. cross-stream reuse: 1 MiB freed on A behind a %.1f ms kernel, then "
      "allocated on a fresh stream B\n\n",
      static_cast<double>(spin_ns) / 1e6);
  std::printf(
      "| allocator | same memory | device-side wait | host blocked | alloc latency us | "
      "free latency us | pool growth MiB | note |\n|---|---|---|---|---:|---:|---:|---|\n");
  for (const auto& n : allocator_names()) {
    const cross_result& r = cross.at(n);
    std::printf("| %s | %d/%d | %s | %d/%d | %.2f | %.2f | %.1f | %s |\n", n.c_str(), r.same_memory,
                r.trials, r.device_wait.c_str(), r.host_blocked, r.trials, r.alloc_us, r.free_us,
                r.growth_mib, r.extra.c_str());
  }
  std::printf(
      "\n(device-side wait: streampool from its statistics; 'implied' = same memory "
      "without blocking the host, which needs a device-side wait)\n");

  // 3b. The same, when the pool has no other free memory for B: a fresh pool with large blocks
  // shared between streams (pool_options::share_between_streams; by default, as in
  // table 3, a live stream's free large blocks stay its own and B grows), A holding 8 x 1 MiB,
  // one freed behind the kernel. streampool then hands B that busy block with a device-side wait
  // instead of growing.
  {
    const int trials = quick ? 3 : 9;
    pool p3(cuda_device::get(), pool_options{.share_between_streams = true});
    stream a(cuda_device::get());
    std::vector<double> lat;
    int same = 0, blocked = 0;
    std::uint64_t waits = 0;
    std::size_t reserved0 = 0;
    for (int t = 0; t < trials; ++t) {
      std::vector<void*> held;
      for (int i = 0; i < 8; ++i) held.push_back(p3.allocate(a, cross_bytes));
      if (t == 0) reserved0 = p3.statistics().reserved_bytes;
      void* busy = held.back();
      held.pop_back();
      BENCH_CUDA(streampool_bench_spin(static_cast<cudaStream_t>(a.ref().native()), spin_ns, busy));
      p3.deallocate(a, busy);
      stream b(cuda_device::get());
      const auto w0 = p3.statistics().device_waits;
      const auto t0 = clock_type::now();
      void* q = p3.allocate(b, cross_bytes);
      lat.push_back(seconds_since(t0) * 1e6);
      if (cudaStreamQuery(static_cast<cudaStream_t>(a.ref().native())) != cudaErrorNotReady)
        ++blocked;
      waits += p3.statistics().device_waits - w0;
      if (q == busy) ++same;
      p3.deallocate(b, q);
      b.synchronize();
      a.synchronize();
      for (void* h : held) p3.deallocate(a, h);
    }
    const double growth =
        static_cast<double>(p3.statistics().reserved_bytes - reserved0) / (1 << 20);
    std::printf(
        "\n### 3b. cross-stream reuse with no other free memory (streampool only, large blocks "
        "shared): 8 x 1 MiB held on A, one freed behind the kernel, then 1 MiB on a fresh stream "
        "B\n\n"
        "| allocator | same memory | device-side waits | host blocked | alloc latency us | pool "
        "growth MiB |\n|---|---|---:|---|---:|---:|\n| streampool | %d/%d | %llu | %d/%d | %.2f | "
        "%.1f |\n",
        same, trials, static_cast<unsigned long long>(waits), blocked, trials, median(lat), growth);
  }

  const auto st = sp_pool.statistics();
  std::printf(
      "\nstreampool pool at the end: reserved %zu MiB (peak %zu MiB), %llu upstream "
      "allocations, %llu device waits, %llu host waits, %llu waited reuses\n",
      st.reserved_bytes >> 20, st.peak_reserved_bytes >> 20,
      static_cast<unsigned long long>(st.upstream_allocations),
      static_cast<unsigned long long>(st.device_waits),
      static_cast<unsigned long long>(st.host_waits),
      static_cast<unsigned long long>(st.waited_reuses));
  return 0;
}
