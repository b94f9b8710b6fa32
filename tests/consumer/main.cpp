// Uses an installed streampool through find_package: proves the exported target carries the
// include path, the C++ standard and the link line.
#include <cstdio>

#include "streampool/device.hpp"

int main() {
  const streampool::device d = streampool::device::host();
  const auto& name = d.get_backend().name();
  std::printf("streampool consumer: host device backend '%s'\n", name.c_str());
  return name.empty() ? 1 : 0;
}
