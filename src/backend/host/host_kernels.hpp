// streampool: the fixed kernel set (kernel.hpp) run on the CPU, for the host backend.
#pragma once

#include "streampool/kernel.hpp"

namespace streampool::detail {

/// Runs `k` to completion on the calling thread. Throws logic_error for an op that the kernel
/// kind does not support (e.g. sqrt as a fold).
void run_host_kernel(const kernel_command& k);

}  // namespace streampool::detail
