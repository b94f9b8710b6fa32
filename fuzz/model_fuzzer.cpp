// libFuzzer target over the model test's operation sequences (docs/testing.md, "Fuzzing").
//
// The input bytes are the driver's choices (tests/model/driver.hpp, byte_chooser): which
// operation, stream, thread, block, size and free method, one byte each. The sequence ends when
// the bytes run out, then everything is destroyed in a drawn order, and the same oracle as in
// model_test checks every reuse. A failure prints the report and aborts, so libFuzzer keeps the
// input as a crash file; replay it with `./model_fuzzer crash-<hash>`.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "model/driver.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sm = streampool::model;
  sm::byte_chooser c(data, size);
  sm::run_options o;
  o.max_ops = 200;
  o.max_delay_us = 20;  // short races, quick runs; the oracle does not depend on timing
  o.verbose = std::getenv("STREAMPOOL_MODEL_VERBOSE") != nullptr;
  const sm::run_result r = sm::run_sequence(c, o);
  if (!r.ok) {
    std::fprintf(stderr, "%s", sm::format_report(r).c_str());
    std::abort();
  }
  return 0;
}
