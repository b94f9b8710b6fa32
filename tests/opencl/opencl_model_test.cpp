// The destruction-order model test (tests/model/, docs/testing.md) on the OpenCL backend: random
// sequences of stream, thread, pool and block operations with the happens-before oracle watching
// every backend call, and the backend's allocated bytes as the teardown's leak check. Fewer seeds
// than on the host backend: every sequence creates a backend (an OpenCL context) and runs real
// queues on two cores. Skips where no OpenCL device exists.
#include "model/model_test_body.hpp"
#include "streampool/opencl.hpp"

namespace sm = streampool::model;

TEST(OpenclModelTest, RandomSequences) {
  if (!streampool::opencl_available()) GTEST_SKIP() << "no OpenCL device";
  sm::run_options o;
  o.make_backend = [](const streampool::host_options&) {
    sm::backend_under_test b;
    b.inner = streampool::make_opencl_backend(0);
    streampool::backend* raw = b.inner.get();
    b.upstream_bytes = [raw] { return streampool::opencl_allocated_bytes(*raw); };
    b.description = "opencl backend, device 0";
    return b;  // fresh_content -1: SVM memory holds whatever it held; no race detector
  };
  sm::run_model_test(o, sm::under_sanitizer ? 200 : 1000);
}
