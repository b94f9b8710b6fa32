// The conformance suites (tests/conformance/) on the OpenCL backend. Skips where no OpenCL device
// exists; on CI that is PoCL's CPU device, where it must run. The scenario suite runs at its
// default scale, made for CI on two cores.
#include "conformance/array_conformance.hpp"
#include "conformance/pool_conformance.hpp"
#include "conformance/scenario_conformance.hpp"
#include "opencl/opencl_fixture.hpp"

namespace streampool::test {
INSTANTIATE_TYPED_TEST_SUITE_P(Opencl, PoolConformance, ::testing::Types<opencl_fixture>);
INSTANTIATE_TYPED_TEST_SUITE_P(Opencl, ArrayConformance, ::testing::Types<opencl_fixture>);
INSTANTIATE_TYPED_TEST_SUITE_P(Opencl, ScenarioConformance, ::testing::Types<opencl_fixture>);
}  // namespace streampool::test
