#include "command_list.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "settings.hpp"

namespace streampool::ze_test_driver {
namespace {

std::atomic<std::uint64_t> next_list_id{1};

}  // namespace

command_list::command_list()
    : id_(next_list_id.fetch_add(1)),
      rng_(config().seed.load() * 0x9e3779b97f4a7c15ull + id_),
      worker_([this] { run(); }) {}

command_list::~command_list() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

ze_result_t command_list::append(ze_event_handle_t signal, std::uint32_t num_waits,
                                 ze_event_handle_t* waits, std::function<void()> body,
                                 ze_event_handle_t reset) {
  if (num_waits > 0 && waits == nullptr) {
    return ZE_RESULT_ERROR_INVALID_SIZE;
  }
  command c{};
  c.body = std::move(body);
  if (signal != nullptr && (c.signal = shared_event(signal)) == nullptr) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  if (reset != nullptr && (c.reset = shared_event(reset)) == nullptr) {
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  std::vector<std::shared_ptr<event>> wait_events;
  for (std::uint32_t i = 0; i < num_waits; ++i) {
    auto e = shared_event(waits[i]);
    if (e == nullptr) {
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    }
    wait_events.push_back(std::move(e));
  }
  {
    // The waits are registered under the list's lock, so that their command numbers follow the
    // append order even when several threads append to one list.
    std::lock_guard lock(mu_);
    c.number = next_number_++;
    for (auto& e : wait_events) {
      const std::uint64_t ticket = e->add_wait(id_, c.number);
      c.waits.emplace_back(std::move(e), ticket);
    }
    queue_.push_back(std::move(c));
  }
  cv_.notify_all();
  return ZE_RESULT_SUCCESS;
}

void command_list::delay() {
  const unsigned max_us = config().delay_us.load();
  if (max_us == 0) {
    return;
  }
  std::uniform_int_distribution<unsigned> pick(0, max_us);
  std::this_thread::sleep_for(std::chrono::microseconds(pick(rng_)));
}

void command_list::run() {
  std::vector<command> taken;
  for (;;) {
    taken.clear();
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        return;  // stopping, and drained
      }
      taken.push_back(std::move(queue_.front()));
      queue_.pop_front();
      if (config().reorder.load() && unordered(taken.front())) {
        while (!queue_.empty() && unordered(queue_.front())) {
          taken.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        std::reverse(taken.begin(), taken.end());
      }
    }
    for (command& c : taken) {
      execute(c);
    }
  }
}

void command_list::execute(command& c) {
  for (auto& [e, ticket] : c.waits) {
    e->pass_wait(ticket);
  }
  delay();
  if (c.reset != nullptr) {
    c.reset->reset({"zeCommandListAppendEventReset", id_, c.number});
  }
  if (c.body) {
    c.body();
  }
  if (c.signal != nullptr) {
    c.signal->signal({"a command's signal event", id_, c.number});
  }
}

}  // namespace streampool::ze_test_driver
