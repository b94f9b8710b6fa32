#include "event.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_map>

#include "violations.hpp"

namespace streampool::ze_test_driver {
namespace {

struct event_globals {
  std::mutex mu;  // every event's state
  std::condition_variable cv;
  std::uint64_t next_ticket = 1;
  std::mutex registry_mu;
  std::unordered_map<event*, std::shared_ptr<event>> registry;
};

// Never destroyed: worker threads of lists the program never destroyed may still touch events
// while static destructors run.
event_globals& globals() {
  static auto* const instance = new event_globals;
  return *instance;
}

}  // namespace

std::string event::describe() const {
  char text[96];
  std::snprintf(text, sizeof text, "event %p (pool #%llu, index %u)",
                static_cast<const void*>(this), static_cast<unsigned long long>(pool_id_), index_);
  return text;
}

void event::report_pending_locked(const char* what, const actor& who) {
  for (const pending_wait& w : waits_) {
    if (w.list_id == who.list_id && w.command > who.command) {
      continue;  // appended after `who` on its own list: reached after it
    }
    // Whether the flag was set says which mistake it is: set, the waiter simply had not got there
    // yet (the program took "signalled" for "every waiter has passed"); clear, the waiter was
    // appended for a signal that had not happened.
    char text[320];
    std::snprintf(text, sizeof text,
                  "%s %s by %s while command list #%llu still waits on it (its command #%llu, "
                  "a wait appended and not yet passed; the event was %s)",
                  describe().c_str(), what, who.name, static_cast<unsigned long long>(w.list_id),
                  static_cast<unsigned long long>(w.command),
                  signalled_ ? "signalled" : "not signalled");
    report_violation(text);
  }
}

void event::signal(const actor& who) {
  std::lock_guard lock(globals().mu);
  if (signalled_) {
    report_pending_locked("signalled again without a reset", who);
  }
  signalled_ = true;
  globals().cv.notify_all();
}

void event::reset(const actor& who) {
  std::lock_guard lock(globals().mu);
  report_pending_locked("reset", who);
  signalled_ = false;
}

bool event::is_signalled() {
  std::lock_guard lock(globals().mu);
  return signalled_;
}

bool event::host_wait(std::uint64_t timeout_ns) {
  std::unique_lock lock(globals().mu);
  auto done = [this] { return signalled_; };
  // Beyond a day counts as forever: steady_clock arithmetic on larger values overflows.
  constexpr std::uint64_t a_day_ns = std::uint64_t{86400} * 1000000000;
  if (timeout_ns > a_day_ns) {
    globals().cv.wait(lock, done);
    return true;
  }
  return globals().cv.wait_for(lock, std::chrono::nanoseconds(timeout_ns), done);
}

void event::retire() {
  std::lock_guard lock(globals().mu);
  report_pending_locked("destroyed", actor{"zeEventDestroy"});
  retired_ = true;
  globals().cv.notify_all();
}

std::uint64_t event::add_wait(std::uint64_t list_id, std::uint64_t command) {
  std::lock_guard lock(globals().mu);
  const std::uint64_t ticket = globals().next_ticket++;
  waits_.push_back({ticket, list_id, command});
  return ticket;
}

void event::pass_wait(std::uint64_t ticket) {
  std::unique_lock lock(globals().mu);
  globals().cv.wait(lock, [this] { return signalled_ || retired_; });
  auto it = std::find_if(waits_.begin(), waits_.end(),
                         [ticket](const pending_wait& w) { return w.ticket == ticket; });
  if (it != waits_.end()) {
    waits_.erase(it);
  }
}

std::shared_ptr<event> event_pool::create(std::uint32_t index) {
  std::lock_guard lock(mu_);
  if (index >= slots_.size() || slots_[index] != nullptr) {
    return nullptr;
  }
  auto e = std::make_shared<event>(this, index, id_);
  slots_[index] = e;
  std::lock_guard registry_lock(globals().registry_mu);
  globals().registry.emplace(e.get(), e);
  return e;
}

void event_pool::destroy(event* e) {
  e->retire();
  std::lock_guard lock(mu_);
  slots_[e->index()].reset();
  std::lock_guard registry_lock(globals().registry_mu);
  globals().registry.erase(e);
}

bool event_pool::empty() {
  std::lock_guard lock(mu_);
  return std::all_of(slots_.begin(), slots_.end(), [](const auto& s) { return s == nullptr; });
}

std::shared_ptr<event> shared_event(ze_event_handle_t h) {
  std::lock_guard lock(globals().registry_mu);
  auto it = globals().registry.find(from_handle(h));
  return it == globals().registry.end() ? nullptr : it->second;
}

}  // namespace streampool::ze_test_driver
