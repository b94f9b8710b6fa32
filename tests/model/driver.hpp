// streampool model test: the operation-sequence driver, shared by tests/model_test.cpp and the
// libFuzzer target in fuzz/.
//
// A sequence is generated and run one operation at a time. Every choice (which operation, which
// stream, block, thread, size, how to free) is drawn from a `chooser`: a seeded generator for the
// randomized test, the fuzzer's input bytes for the fuzz target. Choices depend only on the
// driver's own bookkeeping (never on addresses or timing), so a seed always produces the same
// operation list, and the list printed on failure is the replay.
//
// Operations run on the main thread or on worker threads that own their streams; the driver hands
// each operation to its thread and waits for it, so host calls are serialised (the oracle's
// single host clock relies on that) while streams, default streams and frees still happen on the
// threads that own them. Worker threads exit with their default streams, like the origin
// report's tasks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "streampool/backend.hpp"
#include "streampool/host.hpp"

namespace streampool::model {

/// The source of every choice.
class chooser {
 public:
  virtual ~chooser() = default;
  /// A value in [0, n), n > 0.
  virtual std::uint32_t below(std::uint32_t n) = 0;
  /// True when it has nothing left to give (the fuzzer's input is used up).
  [[nodiscard]] virtual bool exhausted() const = 0;
};

/// Choices from a seed (splitmix64).
class seed_chooser final : public chooser {
 public:
  explicit seed_chooser(std::uint64_t seed) : state_(seed) {}
  std::uint32_t below(std::uint32_t n) override;
  [[nodiscard]] bool exhausted() const override { return false; }

 private:
  std::uint64_t state_;
};

/// Choices from bytes (the fuzzer's input): one byte per choice (two when n > 256); zeros once
/// the bytes run out.
class byte_chooser final : public chooser {
 public:
  byte_chooser(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint32_t below(std::uint32_t n) override;
  [[nodiscard]] bool exhausted() const override { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// The backend a sequence runs on, under the oracle's observing wrapper.
struct backend_under_test {
  std::shared_ptr<backend> inner;
  int fresh_content = -1;  ///< what fresh upstream memory holds (-1: unknown)
  /// The backend's own race reports (the host backend's checker); empty: it has none.
  std::function<std::vector<std::string>()> violations;
  /// Upstream bytes still held, for the teardown's leak check; empty: the backend cannot tell.
  std::function<std::size_t()> upstream_bytes;
  std::string description;  ///< for the configuration line of a report
};

/// Makes the backend for one sequence from the host options drawn for it (a backend other than
/// the host may ignore them). The default is the checking host backend.
using backend_factory = std::function<backend_under_test(const host_options&)>;

/// The checking host backend of `h`, with its checker and leak count.
backend_under_test host_backend_under_test(const host_options& h);

struct run_options {
  std::size_t max_ops = 80;    ///< operations before the randomized teardown
  unsigned max_delay_us = 40;  ///< upper bound for the host backend's delay injection
  bool verbose = false;        ///< print each operation as it runs (replays)
  backend_factory make_backend = host_backend_under_test;  ///< the backend under the model
};

struct run_result {
  bool ok = true;
  std::string failure;           ///< what went wrong first, with the oracle's details
  std::vector<std::string> ops;  ///< the operations run, in order (the replay)
  std::string config;            ///< the pool/backend configuration drawn for this run
  // Coverage, so a passing run can show it exercised what it claims.
  std::uint64_t allocations = 0;
  std::uint64_t cross_stream_reuses = 0;  ///< memory last used on another queue, handed out
  std::uint64_t waited_allocations = 0;   ///< allocations during which the pool made a device wait
  std::uint64_t data_checks = 0;          ///< read-backs compared with the oracle's contents
  std::uint64_t out_of_memory = 0;
};

/// Generates and runs one sequence. Never throws: failures are in the result.
run_result run_sequence(chooser& c, const run_options& o);

/// The failure report: the first failure, the configuration and the numbered operation list.
std::string format_report(const run_result& r);

}  // namespace streampool::model
