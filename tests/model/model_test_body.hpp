// The model test's body, shared by every backend's model test (tests/model_test.cpp on the host
// backend; tests/opencl/ and tests/level_zero/ on theirs): runs seeds in parallel and reports the
// first failing seed with its replay.
//
//   STREAMPOOL_MODEL_SEEDS=N       how many seeds (the caller's default otherwise)
//   STREAMPOOL_MODEL_FIRST_SEED=N  the first seed (default 1)
//   STREAMPOOL_MODEL_SEED=N        replay exactly one seed, printing each operation as it runs
//   STREAMPOOL_MODEL_OPS=N         operations per sequence before the teardown (default 80)
//   STREAMPOOL_MODEL_JOBS=N        sequences run at once (default 4, 2 under sanitizers): they
//                                  mostly sleep in delay injection, so this shortens CI
#pragma once

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

namespace streampool::model {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool under_tsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool under_tsan = true;
#else
inline constexpr bool under_tsan = false;
#endif
#else
inline constexpr bool under_tsan = false;
#endif

#ifdef STREAMPOOL_TEST_UNDER_SANITIZER
inline constexpr bool under_sanitizer = true;
#else
inline constexpr bool under_sanitizer = under_tsan;
#endif

inline std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

/// Runs `default_seeds` seeds (or what the environment says) with `base` as the options, and
/// fails the current test with the first failing seed's report.
inline void run_model_test(run_options base, std::uint64_t default_seeds) {
  base.max_ops = env_or("STREAMPOOL_MODEL_OPS", base.max_ops);
  if (const char* one = std::getenv("STREAMPOOL_MODEL_SEED"); one != nullptr && *one != '\0') {
    const std::uint64_t seed = std::strtoull(one, nullptr, 0);
    seed_chooser c(seed);
    std::printf("replaying seed %llu\n", static_cast<unsigned long long>(seed));
    base.verbose = true;
    const run_result r = run_sequence(c, base);
    std::printf("configuration: %s\n", r.config.c_str());
    ASSERT_TRUE(r.ok) << "seed " << seed << "\n" << format_report(r);
    return;
  }
  const std::uint64_t count = env_or("STREAMPOOL_MODEL_SEEDS", default_seeds);
  const std::uint64_t first = env_or("STREAMPOOL_MODEL_FIRST_SEED", 1);
  const unsigned jobs = static_cast<unsigned>(
      std::max<std::uint64_t>(1, env_or("STREAMPOOL_MODEL_JOBS", under_sanitizer ? 2 : 4)));
  const auto start = std::chrono::steady_clock::now();
  std::mutex mu;  // guards the totals and the first failure
  std::uint64_t ops = 0, allocations = 0, cross = 0, waited = 0, data = 0, oom = 0;
  std::uint64_t failed_seed = 0;
  run_result failed_result;
  std::atomic<std::uint64_t> next{first};
  std::atomic<bool> stop{false};
  auto work = [&] {
    for (;;) {
      const std::uint64_t seed = next.fetch_add(1);
      if (seed >= first + count || stop.load()) return;
      seed_chooser c(seed);
      run_result r = run_sequence(c, base);
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
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed_seed != 0) {
    ADD_FAILURE() << "seed " << failed_seed << " failed (after about " << failed_seed - first + 1
                  << " seeds, " << secs << " s); replay with STREAMPOOL_MODEL_SEED=" << failed_seed
                  << " and this test's filter\n"
                  << format_report(failed_result);
    return;
  }
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

}  // namespace streampool::model
