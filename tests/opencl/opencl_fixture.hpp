// The OpenCL backend under test: device 0 (PoCL's CPU device on CI), and what the conformance
// suites ask of a fixture.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "streampool/opencl.hpp"
#include "streampool/streampool.hpp"

namespace streampool::test {

struct opencl_fixture {
  static constexpr const char* name = "opencl";
  /// A fill of this many bytes keeps PoCL's CPU device busy for milliseconds (a few GB/s on two
  /// cores), long enough for work on another queue to overtake it if nothing orders the two.
  static constexpr std::size_t busy_bytes = std::size_t{64} << 20;
  static bool available() { return opencl_available(); }
  static device make_device() { return device(make_opencl_backend(0)); }
  static std::vector<std::string> violations(const device&) { return {}; }  // no race detector
  static std::optional<std::size_t> upstream_bytes(const device& d) {
    return opencl_allocated_bytes(d.get_backend());
  }
};

}  // namespace streampool::test
