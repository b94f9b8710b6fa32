// The conformance suites on the host backend: checking mode with delay injection; the same with
// device-side waits turned off (the host-wait fallback of backends that lack them); and without
// virtual memory (the pool's segment path for large blocks). The scenario suite runs scaled down,
// with and without device-side waits: the checker reports disorder whatever the scale.
#include "conformance/array_conformance.hpp"
#include "conformance/pool_conformance.hpp"
#include "conformance/scenario_conformance.hpp"

namespace sp = streampool;

template <bool DeviceWait, bool VirtualMemory = true>
struct host_fixture {
  static constexpr const char* name = !VirtualMemory ? "host (no virtual memory)"
                                      : DeviceWait   ? "host"
                                                     : "host (no device waits)";
  static constexpr std::size_t busy_bytes = std::size_t{16} << 20;
  static constexpr int origin_rounds = 3;
  static constexpr int origin_arrays = 100;
  static bool available() { return true; }
  static sp::device make_device() {
    return sp::device(sp::make_host_backend({.checking = true,
                                             .max_delay_us = 50,
                                             .seed = 42,
                                             .device_wait = DeviceWait,
                                             .virtual_memory = VirtualMemory}));
  }
  static std::vector<std::string> violations(const sp::device& d) {
    return sp::host_violations(d.get_backend());
  }
  static std::optional<std::size_t> upstream_bytes(const sp::device& d) {
    return sp::host_allocated_bytes(d.get_backend());
  }
};

using host_fixtures =
    ::testing::Types<host_fixture<true>, host_fixture<false>, host_fixture<true, false>>;
// The scenarios with and without device-side waits (the first one is the fault preset's check).
using host_scenario_fixtures = ::testing::Types<host_fixture<true>, host_fixture<false>>;
namespace streampool::test {
INSTANTIATE_TYPED_TEST_SUITE_P(Host, PoolConformance, host_fixtures);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ArrayConformance, host_fixtures);
INSTANTIATE_TYPED_TEST_SUITE_P(Host, ScenarioConformance, host_scenario_fixtures);
}  // namespace streampool::test
