// The destruction-order model test (docs/testing.md, "Model test").
//
// Random sequences of stream, thread, pool and block operations run against the pool on a
// checking host backend, with a happens-before oracle (tests/model/hb_oracle.hpp) watching every
// backend call. Each seed is one sequence; a failure prints the seed and the operation list.
//
//   STREAMPOOL_MODEL_SEEDS=N       how many seeds (default 2000; 300 under ASan, 150 under TSan)
//   STREAMPOOL_MODEL_FIRST_SEED=N  the first seed (default 1)
//   STREAMPOOL_MODEL_SEED=N        replay exactly one seed, printing each operation as it runs
//   STREAMPOOL_MODEL_OPS=N         operations per sequence before the teardown (default 80)
//   STREAMPOOL_MODEL_JOBS=N        sequences run at once (default 4, 2 under sanitizers): they
//                                  mostly sleep in delay injection, so this shortens CI
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/driver.hpp"

namespace {

namespace sm = streampool::model;

#if defined(__SANITIZE_THREAD__)
constexpr bool under_tsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool under_tsan = true;
#else
constexpr bool under_tsan = false;
#endif
#else
constexpr bool under_tsan = false;
#endif

#ifdef STREAMPOOL_TEST_UNDER_SANITIZER
constexpr bool under_sanitizer = true;
#else
constexpr bool under_sanitizer = under_tsan;
#endif

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

sm::run_options options(bool verbose) {
  sm::run_options o;
  o.max_ops = env_or("STREAMPOOL_MODEL_OPS", o.max_ops);
  o.verbose = verbose;
  return o;
}

}  // namespace

TEST(ModelTest, RandomSequences) {
  if (const char* one = std::getenv("STREAMPOOL_MODEL_SEED"); one != nullptr && *one != '\0') {
    const std::uint64_t seed = std::strtoull(one, nullptr, 0);
    sm::seed_chooser c(seed);
    std::printf("replaying seed %llu\n", static_cast<unsigned long long>(seed));
    const sm::run_result r = sm::run_sequence(c, options(true));
    std::printf("configuration: %s\n", r.config.c_str());
    ASSERT_TRUE(r.ok) << "seed " << seed << "\n" << sm::format_report(r);
    return;
  }
  const std::uint64_t count = env_or("STREAMPOOL_MODEL_SEEDS", under_tsan        ? 150
                                                               : under_sanitizer ? 300
                                                                                 : 2000);
  const std::uint64_t first = env_or("STREAMPOOL_MODEL_FIRST_SEED", 1);
  const unsigned jobs = static_cast<unsigned>(
      std::max<std::uint64_t>(1, env_or("STREAMPOOL_MODEL_JOBS", under_sanitizer ? 2 : 4)));
  const auto start = std::chrono::steady_clock::now();
  std::mutex mu;  // guards the totals and the first failure
  std::uint64_t ops = 0, allocations = 0, cross = 0, waited = 0, data = 0, oom = 0;
  std::uint64_t failed_seed = 0;
  sm::run_result failed_result;
  std::atomic<std::uint64_t> next{first};
  std::atomic<bool> stop{false};
  auto work = [&] {
    for (;;) {
      const std::uint64_t seed = next.fetch_add(1);
      if (seed >= first + count || stop.load()) return;
      sm::seed_chooser c(seed);
      sm::run_result r = sm::run_sequence(c, options(false));
      std::lock_guard lock(mu);
      ops += r.ops.size();
      allocations += r.allocations;
      cross += r.cross_stream_reuses;
      waited += r.waited_allocations;
      data += r.data_checks;
      oom += r.out_of_memory;
      if (!r.ok && (failed_seed == 0 || seed < failed_seed)) {
        failed_seed = seed;
        failed_result = std::move(r);
        stop.store(true);
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned j = 0; j < jobs; ++j) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  if (failed_seed != 0) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ADD_FAILURE() << "seed " << failed_seed << " failed (after about " << failed_seed - first + 1
                  << " seeds, " << secs << " s); replay with STREAMPOOL_MODEL_SEED=" << failed_seed
                  << " ./model_test\n"
                  << sm::format_report(failed_result);
    return;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "model: %llu seeds (%llu..%llu) in %.1f s: %llu operations, %llu allocations, %llu "
      "cross-stream reuses, %llu with a pool-made device wait, %llu data checks, %llu "
      "out-of-memory\n",
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(first),
      static_cast<unsigned long long>(first + count - 1), secs,
      static_cast<unsigned long long>(ops), static_cast<unsigned long long>(allocations),
      static_cast<unsigned long long>(cross), static_cast<unsigned long long>(waited),
      static_cast<unsigned long long>(data), static_cast<unsigned long long>(oom));
  EXPECT_GT(cross, 0u) << "no sequence reused memory across streams: the test lost its teeth";
  if (count >= 200) {
    EXPECT_GT(waited, 0u) << "the pool never had to wait: the test lost its teeth";
  }
}
