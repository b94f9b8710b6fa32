// The record of event-reuse violations: what the driver exists to catch (event.hpp says which
// misuses count). Every violation is kept for the test hooks, printed to stderr at once (so a
// program that never asks still shows it), and aborts the process when
// SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION=1. Kernel launches that the emulation cannot run as a
// device would (kernel_emulator.cpp: not one-dimensional, a group size that is not a power of two,
// local memory too small) are reported here too, prefixed "kernel launch error".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace streampool::ze_test_driver {

void report_violation(std::string message);

[[nodiscard]] std::vector<std::string> violations();
void reset_violations();

}  // namespace streampool::ze_test_driver
