// The destruction-order model test (tests/model/, docs/testing.md) on the Level Zero backend over
// the test driver: the happens-before oracle watches every backend call, and each sequence ends
// with the driver's event-reuse violations (none allowed) and, when sequences run one at a time,
// the bytes the driver still holds (none allowed: the driver's count is per process).
#include <cstdlib>
#include <string>

#include "level_zero/level_zero_support.hpp"
#include "model/model_test_body.hpp"

namespace sm = streampool::model;
namespace sp = streampool;
namespace st = streampool::test;

TEST(LevelZeroModel, RandomSequences) {
  st::require_level_zero();
  // One sequence at a time by default, so that the driver's byte count belongs to the sequence
  // that is tearing down (STREAMPOOL_MODEL_JOBS=N runs N at once, without that check).
  setenv("STREAMPOOL_MODEL_JOBS", "1", /*overwrite=*/0);
  const bool one_at_a_time = std::string(std::getenv("STREAMPOOL_MODEL_JOBS")) == "1";
  const auto held_before = st::ze_bytes_held();
  ASSERT_TRUE(held_before.has_value());
  sm::run_options o;
  o.make_backend = [&](const sp::host_options& h) {
    // The host options drawn for the sequence choose the driver's delay injection and whether
    // the backend offers virtual memory (without it the pool keeps large blocks in whole
    // allocations, where most cross-stream waits happen); device waits are always the backend's.
    if (one_at_a_time) st::hooks().set_delay_us(h.max_delay_us);
    setenv("STREAMPOOL_LEVEL_ZERO_VIRTUAL_MEMORY", h.virtual_memory ? "1" : "0", 1);
    sm::backend_under_test b;
    b.inner = sp::make_level_zero_backend(0);
    b.violations = [] { return st::ze_violations(); };
    if (one_at_a_time) {
      const std::size_t base = *held_before;
      b.upstream_bytes = [base] {
        const std::size_t held = st::ze_bytes_held().value_or(0);
        return held > base ? held - base : 0;
      };
    }
    b.description =
        "level_zero on the test driver, delay " + std::to_string(h.max_delay_us) + " us";
    return b;
  };
  sm::run_model_test(o, sm::under_sanitizer ? 60 : 400);
  EXPECT_EQ(st::ze_violations(), std::vector<std::string>{});
  EXPECT_EQ(st::ze_bytes_held(), held_before);
}
