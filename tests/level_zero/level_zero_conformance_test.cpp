// The conformance suites on the Level Zero backend over the test driver: once as it runs, once
// with the driver's delay injection (each command sleeps up to 50 us first, so unordered work
// really overlaps). Every test ends by asserting that the driver saw no event reuse while a wait
// on the event was pending, and TrimReturnsEverything that the driver holds what it held before.
#include "conformance/array_conformance.hpp"
#include "conformance/pool_conformance.hpp"
#include "level_zero/level_zero_support.hpp"

namespace sp = streampool;
namespace st = streampool::test;

template <unsigned DelayUs>
struct level_zero_fixture {
  static constexpr const char* name =
      DelayUs == 0 ? "level_zero (test driver)" : "level_zero (test driver, delay injection)";
  static constexpr std::size_t busy_bytes = std::size_t{16} << 20;
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
};

using level_zero_fixtures = ::testing::Types<level_zero_fixture<0>, level_zero_fixture<50>>;
namespace streampool::test {
INSTANTIATE_TYPED_TEST_SUITE_P(LevelZero, PoolConformance, level_zero_fixtures);
INSTANTIATE_TYPED_TEST_SUITE_P(LevelZero, ArrayConformance, level_zero_fixtures);
}  // namespace streampool::test
