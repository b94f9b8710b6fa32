#include "violations.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "settings.hpp"

namespace streampool::ze_test_driver {
namespace {

struct violation_log {
  std::mutex mu;
  std::vector<std::string> messages;
};

violation_log& log() {
  static auto* const instance = new violation_log;  // outlives every worker thread
  return *instance;
}

}  // namespace

void report_violation(std::string message) {
  std::fprintf(stderr, "streampool Level Zero test driver: EVENT REUSE VIOLATION: %s\n",
               message.c_str());
  std::fflush(stderr);
  if (config().abort_on_violation) {
    std::abort();
  }
  std::lock_guard lock(log().mu);
  log().messages.push_back(std::move(message));
}

std::vector<std::string> violations() {
  std::lock_guard lock(log().mu);
  return log().messages;
}

void reset_violations() {
  std::lock_guard lock(log().mu);
  log().messages.clear();
}

}  // namespace streampool::ze_test_driver
