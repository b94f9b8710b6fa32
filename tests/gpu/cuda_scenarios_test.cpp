// What only the CUDA backend has to show on the real GPU: a wrapped foreign stream. (The origin
// report's scenarios and the ordering test are the scenario conformance suite, run by
// cuda_conformance_test.) Skips without a GPU.
#include <gtest/gtest.h>

#include "streampool/cuda.hpp"
#include "streampool/streampool.hpp"

namespace sp = streampool;

namespace {

sp::device gpu() {
  static sp::device* d = nullptr;  // one backend per process, like a runtime's device object
  if (d == nullptr) d = new sp::device(sp::make_cuda_backend(0));
  return *d;
}

#define SKIP_WITHOUT_GPU() \
  if (!sp::cuda_available()) GTEST_SKIP() << "no CUDA driver or device"

// A foreign stream (created by the user, wrapped) may be destroyed by its owner after streampool
// is done with it; tokens taken on it stay valid.
TEST(CudaStreams, WrappedForeignStreamTokensOutliveIt) {
  SKIP_WITHOUT_GPU();
  sp::device d = gpu();
  sp::pool p(d);
  sp::stream owner(d);  // stands in for a user's stream: we wrap its queue
  sp::token t;
  void* x = nullptr;
  {
    sp::stream wrapped = sp::stream::wrap(d, owner.ref().native());
    x = p.allocate(wrapped, 4096);
    wrapped.ref().submit(sp::command::make(sp::fill_command{x, 1, 1, 4096}));
    t = wrapped.ref().now();
    p.deallocate(wrapped, x);
  }  // the wrapper retires its timeline; the queue itself lives on with its owner
  EXPECT_TRUE(t.ready_for(nullptr));
  sp::stream other(d);
  void* y = p.allocate(other, 4096);
  EXPECT_NE(y, nullptr);
  p.deallocate(other, y);
}

}  // namespace
