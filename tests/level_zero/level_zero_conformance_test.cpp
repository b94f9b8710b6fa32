// The conformance suites on the Level Zero backend over the test driver: once as it runs, once
// with the driver's delay injection (each command sleeps up to 50 us first, so unordered work
// really overlaps). Every test ends by asserting that the driver saw no event reuse while a wait
// on the event was pending, and TrimReturnsEverything that the driver holds what it held before.
// The scenario suite runs once, without the delay injection but for its ordering test's heavier
// one, scaled for CI.
#include <type_traits>

#include "conformance/array_conformance.hpp"
#include "conformance/pool_conformance.hpp"
#include "conformance/scenario_conformance.hpp"
#include "level_zero/level_zero_support.hpp"

namespace sp = streampool;
namespace st = streampool::test;

template <unsigned DelayUs>
struct level_zero_fixture {
  static constexpr const char* name =
      DelayUs == 0 ? "level_zero (test driver)" : "level_zero (test driver, delay injection)";
  static constexpr std::size_t busy_bytes = std::size_t{16} << 20;
  static constexpr int busy_fills = 2;  // tens of ms each on the driver, with busy_scope's delays
  static constexpr int origin_rounds = 6;
  static constexpr int origin_arrays = 200;
  // Never false where CTest runs it (ZE_ENABLE_ALT_DRIVERS names the test driver), so no test
  // skips there; make_device fails loudly if the driver is broken.
  static bool available() { return std::getenv("ZE_ENABLE_ALT_DRIVERS") != nullptr; }
  static sp::device make_device() {
    if (!sp::level_zero_available()) (void)sp::make_level_zero_backend(0);  // throws the reason
    st::hooks().set_delay_us(DelayUs);
    return sp::device(sp::make_level_zero_backend(0));
  }
  static std::vector<std::string> violations(const sp::device&) { return st::ze_violations(); }
  static std::optional<std::size_t> upstream_bytes(const sp::device&) {
    return st::ze_bytes_held();
  }

  /// The ordering test: the delay injection makes stream A's commands slow (each command waits
  /// up to 4 ms before it runs, and A queues three in a row), so that without the device-side
  /// wait B's fill runs first.
  class busy_scope {
   public:
    busy_scope() { st::hooks().set_delay_us(4000); }
    busy_scope(const busy_scope&) = delete;
    busy_scope& operator=(const busy_scope&) = delete;
    ~busy_scope() { st::hooks().set_delay_us(DelayUs); }
  };
  /// A violation aborts the process at once during the scenarios: a backend that resets an event
  /// under a pending wait can leave that wait blocked for ever, and the test must fail then, not
  /// hang until CTest's timeout.
  class scenario_scope {
   public:
    scenario_scope() { st::hooks().set_abort_on_violation(1); }
    scenario_scope(const scenario_scope&) = delete;
    scenario_scope& operator=(const scenario_scope&) = delete;
    ~scenario_scope() { st::hooks().set_abort_on_violation(0); }
  };
};

// A misspelt scope would fall back to none without a word; the ordering test needs the delays.
static_assert(std::is_same_v<st::scenario_traits<level_zero_fixture<0>>::busy_scope,
                             level_zero_fixture<0>::busy_scope>);
static_assert(std::is_same_v<st::scenario_traits<level_zero_fixture<0>>::scenario_scope,
                             level_zero_fixture<0>::scenario_scope>);

using level_zero_fixtures = ::testing::Types<level_zero_fixture<0>, level_zero_fixture<50>>;
namespace streampool::test {
INSTANTIATE_TYPED_TEST_SUITE_P(LevelZero, PoolConformance, level_zero_fixtures);
INSTANTIATE_TYPED_TEST_SUITE_P(LevelZero, ArrayConformance, level_zero_fixtures);
INSTANTIATE_TYPED_TEST_SUITE_P(LevelZero, ScenarioConformance,
                               ::testing::Types<level_zero_fixture<0>>);
}  // namespace streampool::test
