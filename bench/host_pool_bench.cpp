// host_pool_bench: streampool on the host backend next to glibc malloc/free (issue 2).
//
//   build/release/bench/host_pool_bench [--benchmark_min_time=0.2] [--benchmark_filter=...]
//
// Benchmarks (each templated on an allocator adaptor, see bench_workloads.hpp):
//   pair/<alloc>/<bytes>   alloc+free pairs of one size, 1, 4 and 16 threads, each thread on its
//                          own stream (created in the benchmark body, i.e. per thread)
//   mixed/<alloc>          the 1000-live pattern (log-uniform 256 B .. 4 MiB, random free order)
// Time is wall-clock per pair over all threads together (UseRealTime), so at N threads
// "Time" is 1 / aggregate throughput and items_per_second is aggregate pairs/s.
// After the runs a summary prints streampool ns / malloc ns per benchmark (the ratio column).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_workloads.hpp"
#include "streampool/host.hpp"

namespace {

using namespace streampool;
using namespace streampool::bench;

struct host_device {
  static device& get() {
    static device d(make_host_backend());  // checking off, default 64 KiB granularity
    return d;
  }
};
using host_pool_allocator = pool_allocator<host_device>;

/// Contended lock acquisitions of the pool per 1,000 pairs over the timed loop (streampool only):
/// the column that shows which runs the threads spent waiting for each other. Thread 0 reads the
/// pool's counters before and after; the others report 0, and the counter sums over threads.
template <class Alloc>
class contention_counter {
 public:
  explicit contention_counter(const Alloc& a, const benchmark::State& state) {
    if constexpr (requires { a.get_pool(); }) {
      if (state.thread_index() == 0) before_ = a.get_pool().statistics().contention.total();
    }
  }
  void report(const Alloc& a, benchmark::State& state) const {
    if constexpr (requires { a.get_pool(); }) {
      double per_kpair = 0;
      if (state.thread_index() == 0) {
        const auto waited = a.get_pool().statistics().contention.total() - before_;
        per_kpair = 1e3 * static_cast<double>(waited) /
                    static_cast<double>(state.iterations() * state.threads());
      }
      state.counters["contended/kpair"] = per_kpair;
    }
  }

 private:
  std::uint64_t before_ = 0;
};

template <class Alloc>
void bm_pair(benchmark::State& state) {
  Alloc a;  // per thread: streampool creates this thread's stream here
  const auto n = static_cast<std::size_t>(state.range(0));
  for (int i = 0; i < 16; ++i) a.deallocate(a.allocate(n), n);  // warm the thread's cache
  const contention_counter<Alloc> contention(a, state);
  for (auto _ : state) {
    void* p = a.allocate(n);
    benchmark::DoNotOptimize(p);
    a.deallocate(p, n);
  }
  state.SetItemsProcessed(state.iterations());
  contention.report(a, state);
}

template <class Alloc>
void bm_mixed(benchmark::State& state) {
  Alloc a;
  mixed_runner<Alloc> run(a);
  for (std::size_t i = 0; i < mixed_pattern::length / 8; ++i) run.step();  // warm
  const contention_counter<Alloc> contention(a, state);
  for (auto _ : state) benchmark::DoNotOptimize(run.step());
  state.SetItemsProcessed(state.iterations());
  contention.report(a, state);
}

template <class Alloc>
void register_all() {
  const std::string name = Alloc::name;
  for (std::size_t n : pair_sizes) {
    benchmark::RegisterBenchmark(("pair/" + name).c_str(), bm_pair<Alloc>)
        ->Arg(static_cast<std::int64_t>(n))
        ->Threads(1)
        ->Threads(4)
        ->Threads(16)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark(("mixed/" + name).c_str(), bm_mixed<Alloc>)
      ->Threads(1)
      ->Threads(4)
      ->Threads(16)
      ->UseRealTime();
}

// Console output as usual, plus a summary table with the ratio against malloc at the end.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      // function_name is "<pattern>/<alloc>", args is "<bytes>" for pairs.
      const std::string& fn = r.run_name.function_name;
      const auto slash = fn.find('/');
      const std::string pattern = fn.substr(0, slash);
      const std::string alloc = fn.substr(slash + 1);
      const double to_ns = benchmark::GetTimeUnitMultiplier(benchmark::kNanosecond) /
                           benchmark::GetTimeUnitMultiplier(r.time_unit);
      results_[{pattern, r.run_name.args, r.threads}][alloc] = {r.GetAdjustedRealTime() * to_ns,
                                                                r.GetAdjustedCPUTime() * to_ns};
    }
  }

  void print_summary() const {
    std::printf(
        "\nSummary. wall ns: wall time per alloc+free pair over all threads together (1 / "
        "aggregate rate); cpu ns: CPU time per pair of one thread (robust on a loaded machine). "
        "ratio = streampool / malloc (below 1: streampool is faster).\n\n");
    std::printf(
        "| benchmark | bytes | threads | streampool wall ns | malloc wall ns | wall ratio | "
        "streampool cpu ns | malloc cpu ns | cpu ratio | streampool M pairs/s | "
        "malloc M pairs/s |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto& [key, by_alloc] : results_) {
      const auto& [pattern, args, threads] = key;
      auto sp = by_alloc.find("streampool");
      auto ml = by_alloc.find("malloc");
      if (sp == by_alloc.end() || ml == by_alloc.end()) continue;
      const auto [sp_wall, sp_cpu] = sp->second;
      const auto [ml_wall, ml_cpu] = ml->second;
      std::printf("| %s | %s | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
                  pattern.c_str(), args.empty() ? "1000-live" : args.c_str(), threads, sp_wall,
                  ml_wall, sp_wall / ml_wall, sp_cpu, ml_cpu, sp_cpu / ml_cpu, 1e3 / sp_wall,
                  1e3 / ml_wall);
    }
  }

 private:
  struct key_less {
    bool operator()(const std::tuple<std::string, std::string, int>& a,
                    const std::tuple<std::string, std::string, int>& b) const {
      // pattern, then bytes numerically, then threads
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);  // pair first
      const long long na = std::get<1>(a).empty() ? 0 : std::stoll(std::get<1>(a));
      const long long nb = std::get<1>(b).empty() ? 0 : std::stoll(std::get<1>(b));
      if (na != nb) return na < nb;
      return std::get<2>(a) < std::get<2>(b);
    }
  };
  // (pattern, bytes, threads) -> allocator -> (wall ns, cpu ns) per pair
  std::map<std::tuple<std::string, std::string, int>,
           std::map<std::string, std::pair<double, double>>, key_less>
      results_;
};

}  // namespace

int main(int argc, char** argv) {
  register_all<host_pool_allocator>();
  register_all<malloc_allocator>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ratio_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  const lock_contention c = host_device::get().default_pool().statistics().contention;
  std::printf(
      "\nstreampool: contended lock acquisitions over the whole run, by lock: stream caches %llu, "
      "class lists %llu, large shards %llu, growth %llu, segments %llu, other %llu\n",
      static_cast<unsigned long long>(c.stream_caches),
      static_cast<unsigned long long>(c.class_lists),
      static_cast<unsigned long long>(c.large_shards), static_cast<unsigned long long>(c.growth),
      static_cast<unsigned long long>(c.segments), static_cast<unsigned long long>(c.other));
  benchmark::Shutdown();
  return 0;
}
