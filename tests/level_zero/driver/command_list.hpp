// An immediate command list: one worker thread that executes appended commands asynchronously, in
// append order unless reorder mode is on.
//
// A real device may overlap or reorder commands of one immediate list unless they are ordered by
// events or barriers. In reorder mode (SP_ZE_TEST_DRIVER_REORDER=1 or the set_reorder hook) the
// worker, each time it takes work, takes every queued command up to the next one that orders
// (a barrier, a wait, a command with a signal event or an event reset) and runs that run in
// reverse order; delay injection (SP_ZE_TEST_DRIVER_DELAY_US) lets such runs accumulate. So a
// program that relies on append order without barriers fails there. Ordering *between* lists is
// tested always, and delay injection makes lists really overlap.
//
// A command is: its wait list (each wait registered with its event at append time, see
// event.hpp), a body (copy, fill, kernel, or nothing), and an optional signal event. The worker
// passes every wait, runs the body, then signals.
#pragma once

#include <level_zero/ze_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "event.hpp"

namespace streampool::ze_test_driver {

class command_list {
 public:
  command_list();
  command_list(const command_list&) = delete;
  command_list& operator=(const command_list&) = delete;
  /// Drains every queued command, then joins the worker.
  ~command_list();

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

  /// Appends a command. Checks the handles first (ZE_RESULT_ERROR_INVALID_ARGUMENT for a
  /// destroyed event, ..._INVALID_SIZE for a wait list without events). `reset` (may be null) is
  /// an event the command resets instead of running a body.
  ze_result_t append(ze_event_handle_t signal, std::uint32_t num_waits, ze_event_handle_t* waits,
                     std::function<void()> body, ze_event_handle_t reset = nullptr);

 private:
  struct command {
    std::uint64_t number;
    std::vector<std::pair<std::shared_ptr<event>, std::uint64_t>> waits;  // event, ticket
    std::shared_ptr<event> signal;
    std::shared_ptr<event> reset;
    std::function<void()> body;
  };

  void run();
  void execute(command& c);
  void delay();
  /// Reorder mode may move c: a body with no waits, signal or reset (a copy, fill or launch that
  /// nothing in the list orders against its neighbours).
  [[nodiscard]] static bool unordered(const command& c) noexcept {
    return c.body && c.waits.empty() && c.signal == nullptr && c.reset == nullptr;
  }

  const std::uint64_t id_;
  std::mt19937_64 rng_;  // worker only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<command> queue_;      // guarded by mu_
  std::uint64_t next_number_ = 1;  // guarded by mu_
  bool stopping_ = false;          // guarded by mu_
  std::thread worker_;             // last: started once everything above exists
};

[[nodiscard]] inline command_list* from_handle(ze_command_list_handle_t h) noexcept {
  return reinterpret_cast<command_list*>(h);
}
[[nodiscard]] inline ze_command_list_handle_t to_handle(command_list* l) noexcept {
  return reinterpret_cast<ze_command_list_handle_t>(l);
}

}  // namespace streampool::ze_test_driver
