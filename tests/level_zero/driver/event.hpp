// Events and event pools: host completion flags, and the event-reuse detector.
//
// An event is a flag (signalled or not). All events share one mutex and one condition variable:
// the driver is for correctness tests, and one lock makes every transition (signal, reset, a
// waiter passing) totally ordered, which is what the detector needs to be exact.
//
// The detector. A wait appended to a command list on event E registers a *pending wait* on E at
// append time (naming the list and the command's number); the list's worker removes it once it has
// passed the wait. A violation is recorded when, while E has a pending wait:
//   - E is reset (zeEventHostReset, or a command of zeCommandListAppendEventReset executing): the
//     waiter, appended for the old use, may now miss the signal or take the next use's;
//   - E is signalled again without a reset in between (a second use of a signalled event);
//   - E is destroyed (zeEventDestroy): the waiter reads freed memory on a real device. Here its
//     waiters are released so that the test does not hang.
// A wait appended on E that is then reset before being signalled is the first case. A command
// does not trip over waits appended to its own list after it (the list reaches them later: this
// driver executes each list in order). Passing means
// the worker saw E signalled and moved on; waiting on the host (zeEventHostSynchronize) registers
// nothing, because the host sees the flag itself and the caller orders its own reset after it.
#pragma once

#include <level_zero/ze_api.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace streampool::ze_test_driver {

class event_pool;

/// A wait appended on an event and not yet passed.
struct pending_wait {
  std::uint64_t ticket;   ///< unique, to remove exactly this wait
  std::uint64_t list_id;  ///< the waiting command list
  std::uint64_t command;  ///< the command's number in that list
};

class event {
 public:
  event(event_pool* pool, std::uint32_t index, std::uint64_t pool_id)
      : pool_(pool), index_(index), pool_id_(pool_id) {}

  [[nodiscard]] event_pool* pool() const noexcept { return pool_; }
  [[nodiscard]] std::uint32_t index() const noexcept { return index_; }
  /// "event 0x... (pool #2, index 5)", for messages.
  [[nodiscard]] std::string describe() const;

  /// Who signals or resets: the host, or command `command` of list `list_id`.
  struct actor {
    const char* name;           ///< for messages: "zeEventHostReset", ...
    std::uint64_t list_id = 0;  ///< 0: the host
    std::uint64_t command = 0;
  };

  /// Sets the flag.
  void signal(const actor& who);
  /// Clears the flag.
  void reset(const actor& who);
  [[nodiscard]] bool is_signalled();
  /// Waits until signalled, or up to timeout_ns (UINT64_MAX = forever). True once signalled.
  [[nodiscard]] bool host_wait(std::uint64_t timeout_ns);
  /// Called at destruction by zeEventDestroy: records pending waits, releases their waiters.
  void retire();

  /// Append time: registers a wait of list `list_id`'s command `command`; returns its ticket.
  [[nodiscard]] std::uint64_t add_wait(std::uint64_t list_id, std::uint64_t command);
  /// Worker: blocks until signalled (or retired), then removes the wait `ticket`.
  void pass_wait(std::uint64_t ticket);

 private:
  void report_pending_locked(const char* what, const actor& who);

  event_pool* const pool_;
  const std::uint32_t index_;
  const std::uint64_t pool_id_;
  // Guarded by event_mutex():
  bool signalled_ = false;
  bool retired_ = false;
  std::vector<pending_wait> waits_;
};

/// A pool of `count` event slots. Only host-visible pools without timestamps or IPC exist here.
class event_pool {
 public:
  event_pool(std::uint32_t count, std::uint64_t id) : slots_(count), id_(id) {}

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  /// Creates the event at `index`; nullptr when the index is out of range or in use.
  [[nodiscard]] std::shared_ptr<event> create(std::uint32_t index);
  /// Retires the event and frees its slot; the last shared_ptr (a queued command's) frees it.
  void destroy(event* e);
  [[nodiscard]] bool empty();

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<event>> slots_;  // guarded by mu_
  const std::uint64_t id_;
};

/// Finds the shared owner of an event handle (queued commands keep their events alive).
[[nodiscard]] std::shared_ptr<event> shared_event(ze_event_handle_t h);

[[nodiscard]] inline event* from_handle(ze_event_handle_t h) noexcept {
  return reinterpret_cast<event*>(h);
}
[[nodiscard]] inline ze_event_handle_t to_handle(event* e) noexcept {
  return reinterpret_cast<ze_event_handle_t>(e);
}
[[nodiscard]] inline event_pool* from_handle(ze_event_pool_handle_t h) noexcept {
  return reinterpret_cast<event_pool*>(h);
}
[[nodiscard]] inline ze_event_pool_handle_t to_handle(event_pool* p) noexcept {
  return reinterpret_cast<ze_event_pool_handle_t>(p);
}

}  // namespace streampool::ze_test_driver
