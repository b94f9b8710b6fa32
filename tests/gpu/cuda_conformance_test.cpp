// The conformance suites on the CUDA backend. Skips (every test) where no driver or GPU exists.
// The scenario suite runs at the origin report's scale; its ordering test must fail under the
// fault-injection library (scripts/device-check.sh).
#include "conformance/array_conformance.hpp"
#include "conformance/pool_conformance.hpp"
#include "conformance/scenario_conformance.hpp"

#if __has_include("streampool/cuda.hpp") && defined(STREAMPOOL_HAVE_CUDA_BACKEND)
#include "streampool/cuda.hpp"
#define STREAMPOOL_TEST_CUDA 1
#endif

namespace sp = streampool;

struct cuda_fixture {
  static constexpr const char* name = "cuda";
  static constexpr std::size_t busy_bytes = std::size_t{1} << 30;  // a GPU fills fast
  static constexpr int busy_fills = 8;                             // ~2-3 ms of work on stream A
  static constexpr int origin_rounds = 20;                         // the origin report's scale
  static constexpr int origin_arrays = 1000;
#ifdef STREAMPOOL_TEST_CUDA
  static bool available() { return sp::cuda_available(); }
  static sp::device make_device() { return sp::device(sp::make_cuda_backend(0)); }
#else
  static bool available() { return false; }
  static sp::device make_device() { throw std::logic_error("built without the CUDA backend"); }
#endif
  static std::vector<std::string> violations(const sp::device&) { return {}; }  // no detector
  static std::optional<std::size_t> upstream_bytes(const sp::device&) { return std::nullopt; }
};

namespace streampool::test {
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, PoolConformance, ::testing::Types<cuda_fixture>);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ArrayConformance, ::testing::Types<cuda_fixture>);
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, ScenarioConformance, ::testing::Types<cuda_fixture>);
}  // namespace streampool::test
