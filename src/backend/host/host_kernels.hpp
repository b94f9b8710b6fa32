// streampool: the fixed kernel set (kernel.hpp) run on the CPU, for the host backend.
#pragma once

#include "streampool/kernel.hpp"

namespace streampool::detail {

/// Runs `k` to completion on the calling thread. `k` passed backend::submit's checks (a known
/// kind and dtype, an op valid for the kind, non-null operands where it reads or writes).
void run_host_kernel(const kernel_command& k);

}  // namespace streampool::detail
