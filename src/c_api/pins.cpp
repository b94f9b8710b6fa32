// streampool C ABI: pins, and teardowns deferred while a call is in flight (pins.hpp).
#include "pins.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "handles.hpp"

namespace streampool::c_api {

namespace pins_detail {

thread_local constinit thread_state here{};

namespace {

// membarrier(2) with MEMBARRIER_CMD_PRIVATE_EXPEDITED: a full memory barrier on every running
// thread of the process (Linux 4.14 and later).
bool register_membarrier() noexcept {
  const long supported = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

}  // namespace

const bool have_membarrier = register_membarrier();

namespace {

// Every record ever made, newest first. Only pushed to.
std::atomic<pin_record*> all_records{nullptr};

// Gives the thread's record back when the thread exits.
struct record_return {
  record_return() = default;
  record_return(const record_return&) = delete;
  record_return& operator=(const record_return&) = delete;
  ~record_return() {
    if (here.record != nullptr && here.used == 0) {
      here.record->vacant.store(true, std::memory_order_release);
      here.record = nullptr;
    }
    here.exited = true;
  }
};

pin_record* take_record() {
  for (pin_record* r = all_records.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    bool vacant = true;
    if (r->vacant.load(std::memory_order_relaxed) &&
        r->vacant.compare_exchange_strong(vacant, false, std::memory_order_acquire)) {
      return r;
    }
  }
  auto* r = new pin_record;  // deliberately never freed (see pin_record)
  r->next = all_records.load(std::memory_order_relaxed);
  while (!all_records.compare_exchange_weak(r->next, r, std::memory_order_release,
                                            std::memory_order_relaxed)) {
  }
  return r;
}

void heavy_barrier() {
  // Without membarrier every pin is an atomic exchange and every load on both sides is
  // sequentially consistent: their single total order gives the same guarantee.
  if (have_membarrier) (void)syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}

void pause(int round) {
  // A call in flight on another thread holds the pin: most are over in microseconds, but a
  // synchronize waits for the device, so back off to sleeps rather than spin on the core.
  if (round < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 128 ? 50 : 1000));
  }
}

}  // namespace

void attach(thread_state& h) {
  if (!h.exited) {
    thread_local record_return give_back;  // constructed here, once per thread
    (void)give_back;
  }
  h.record = take_record();
}

void too_deep() {
  throw error{STREAMPOOL_STATUS_INTERNAL, "streampool: calls nested more than " +
                                              std::to_string(slots_per_thread) +
                                              " handles deep through reclaim hooks on one thread"};
}

void run_deferred(thread_state& h) noexcept {
  if (h.running_deferred) return;  // a teardown's own calls pin and unpin too
  h.running_deferred = true;
  while (h.deferred != nullptr && !h.deferred->empty()) {
    std::vector<std::function<void()>> now;
    now.swap(*h.deferred);
    for (auto& teardown : now) {
      try {
        teardown();
      } catch (...) {
        // A teardown stands in for a destructor: nothing is left to report the failure to.
      }
    }
  }
  delete h.deferred;
  h.deferred = nullptr;
  h.running_deferred = false;
}

}  // namespace pins_detail

using pins_detail::here;
using pins_detail::pin_record;
using pins_detail::slots_per_thread;

void wait_unpinned(const void* object) {
  pins_detail::heavy_barrier();
  const pin_record* mine = here.record;
  for (pin_record* r = pins_detail::all_records.load(std::memory_order_acquire); r != nullptr;
       r = r->next) {
    if (r == mine) continue;
    for (auto& s : r->slots) {
      for (int round = 0; s.load(std::memory_order_seq_cst) == object; ++round)
        pins_detail::pause(round);
    }
  }
}

int pins_here(const void* object) noexcept {
  const pins_detail::thread_state& h = here;
  int n = 0;
  for (int i = 0; i < slots_per_thread; ++i) {
    if ((h.used >> i & 1U) != 0 &&
        h.record->slots[static_cast<std::size_t>(i)].load(std::memory_order_relaxed) == object) {
      ++n;
    }
  }
  return n;
}

bool inside_a_call() noexcept { return here.used != 0; }

void run_or_defer(std::function<void()> teardown) {
  pins_detail::thread_state& h = here;
  if (h.used == 0) {
    teardown();
    return;
  }
  if (h.deferred == nullptr) h.deferred = new std::vector<std::function<void()>>;
  h.deferred->push_back(std::move(teardown));
}

}  // namespace streampool::c_api
