// streampool C ABI: pins, which let one thread take an object out of reach (a destroyed handle, a
// released native stream's wrapper) while other threads may be inside a call that uses it.
//
// Glossary
//   pin       a thread's announcement "a call of mine is using object X": X's address in one of the
//             thread's slots, published before the call checks that X is still reachable (its
//             handle's generation, the native-stream registry's generation) and cleared when the
//             call is done with it. A call pins every handle it takes (at most a few).
//   retire    taking X out of reach first (no new call can find it), then waiting until no other
//             thread pins X (wait_unpinned); only then is X torn down and freed. So a call either
//             finishes on X or never reaches it: it cannot read X after it was freed.
//   deferred  a teardown asked for by a thread that itself holds pins (a reclaim hook runs inside
//             an allocation, which pins its pool and stream): it runs when that thread holds none,
//             so that a thread holding pins never waits for pins (two such threads could wait for
//             each other). The object is out of reach at once; only its teardown waits.
//
// Cost of a pin: a store to a slot on the thread's own cache line and a compiler barrier; the
// unpin, another store. No atomic read-modify-write, no shared line written: this is what lets
// every C entry point pin its handles (docs/c-api.md, "Handles"). The store-then-load order a pin
// needs (the slot visible to a retiring thread before the pinning thread reads the generation)
// is bought by the retiring side, which runs a process-wide memory barrier (membarrier(2),
// MEMBARRIER_CMD_PRIVATE_EXPEDITED) between taking X out of reach and scanning the slots: every
// running thread then passes a full barrier, so either the slot is seen or the generation read
// after it is the new one. Where the kernel lacks membarrier, a pin is published with an atomic
// exchange (a full barrier) instead.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <vector>

namespace streampool {
class stream;
}

namespace streampool::c_api {

/// One entry of a thread's cache of native stream wrappers (native_streams.hpp).
struct native_cache_entry {
  std::uint64_t device_id = 0;
  void* handle = nullptr;
  std::uint64_t generation = 0;     // of the wrapper registry when the wrapper was found
  const stream* wrapper = nullptr;  // nullptr: an unused entry
};

namespace pins_detail {

// A call pins at most its handles (two or three); reclaim hooks may nest calls inside it.
inline constexpr int slots_per_thread = 16;

// One thread's slots. Never freed: a retiring thread may be scanning it while its thread exits;
// the record of an exited thread goes back (`vacant`) for the next thread that starts. Aligned to
// two cache lines (the adjacent-line prefetcher's pair), so that no other thread's pins share a
// line with these.
struct alignas(128) pin_record {
  std::array<std::atomic<const void*>, slots_per_thread> slots{};
  std::atomic<bool> vacant{false};
  pin_record* next = nullptr;  // in the list of all records; written once, before publishing
};

// What only the thread itself touches: its pins and (in the same thread_local, so that a call
// reaches all of the C layer's per-thread state through one thread-local lookup, which in a
// shared library is a call into the dynamic linker) the native-stream cache. Trivially
// destructible and constant-initialised on purpose: a C call made during thread exit, after the
// destructors of thread_local objects ran, still finds it, with no initialisation check.
struct thread_state {
  pin_record* record = nullptr;
  std::uint32_t used = 0;  // bit i: slot i holds a pin
  bool exited = false;     // the record went back; a later call takes one for good
  bool running_deferred = false;
  std::vector<std::function<void()>>* deferred = nullptr;  // teardowns waiting for used == 0
  std::array<native_cache_entry, 8> native_cache{};        // native_streams.cpp's
  unsigned native_cache_next = 0;
};
extern thread_local constinit thread_state here;

// Decided once, when the library is loaded, before any call can pin (pins.cpp).
extern const bool have_membarrier;

void attach(thread_state& h);
[[noreturn]] void too_deep();
void run_deferred(thread_state& h) noexcept;

}  // namespace pins_detail

using thread_state = pins_detail::thread_state;

/// The calling thread's state. An entry point takes it once and hands it to what it calls.
inline thread_state& this_thread() noexcept {
  thread_state* h = &pins_detail::here;
  // Opaque from here on: otherwise the compiler computes the thread-local address again (a call
  // into the dynamic linker) wherever it finds that cheaper than keeping it in a register.
  asm("" : "+r"(h));  // NOLINT(hicpp-no-assembler)
  return *h;
}

/// One pinned object, unpinned when destroyed. Movable (the slot travels with it); an empty pin
/// holds nothing. Inline: every entry point pins its handles, so this is the C layer's fast path.
class pin {
 public:
  pin() noexcept = default;
  /// Publishes `object` in a slot of the calling thread. Validate reachability *after* this.
  /// @throws error{INTERNAL} when the thread already holds every slot (calls nested that deep
  ///         through reclaim hooks)
  explicit pin(const void* object) { set(this_thread(), object); }
  pin(thread_state& h, const void* object) { set(h, object); }
  pin(pin&& other) noexcept : state_(other.state_), slot_(other.slot_), object_(other.object_) {
    other.slot_ = -1;
  }
  pin& operator=(pin&& other) noexcept {
    if (this != &other) {
      reset();
      state_ = other.state_;
      slot_ = other.slot_;
      object_ = other.object_;
      other.slot_ = -1;
    }
    return *this;
  }
  pin(const pin&) = delete;
  pin& operator=(const pin&) = delete;
  ~pin() { reset(); }

  /// Unpins now (a no-op on an empty pin).
  void reset() noexcept {
    if (slot_ < 0) return;
    thread_state& h = *state_;  // the pinning thread's: a pin never changes threads
    // Release: whoever sees the slot empty also sees every read this thread made through the pin.
    h.record->slots[static_cast<std::size_t>(slot_)].store(nullptr, std::memory_order_release);
    h.used &= ~(std::uint32_t{1} << slot_);
    slot_ = -1;
    if (h.used == 0 && h.deferred != nullptr) [[unlikely]]
      pins_detail::run_deferred(h);
  }
  /// Pins `object` with this (empty) pin, for the calling thread, whose state `h` is.
  void set(thread_state& h, const void* object) {
    using namespace pins_detail;
    if (h.record == nullptr) [[unlikely]]
      attach(h);
    const std::uint32_t free_slots = ~h.used & ((std::uint32_t{1} << slots_per_thread) - 1);
    if (free_slots == 0) [[unlikely]]
      too_deep();
    const int i = std::countr_zero(free_slots);
    h.used |= std::uint32_t{1} << i;
    std::atomic<const void*>& s = h.record->slots[static_cast<std::size_t>(i)];
    if (have_membarrier) [[likely]] {
      s.store(object, std::memory_order_relaxed);
      // Keeps the compiler from moving the caller's validating load above this store; the CPU's
      // store buffer is drained by the retiring side's membarrier.
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      (void)s.exchange(object, std::memory_order_seq_cst);
    }
    state_ = &h;
    slot_ = i;
    object_ = object;
  }
  /// What is pinned (nullptr for an empty pin).
  [[nodiscard]] const void* object() const noexcept { return slot_ >= 0 ? object_ : nullptr; }

 private:
  thread_state* state_ = nullptr;  // the pinning thread's
  int slot_ = -1;                  // index in the pinning thread's slots; -1 when empty
  const void* object_ = nullptr;
};

/// Waits until no thread other than the caller pins `object`. Call it after taking `object` out
/// of reach. Polls (yields, then sleeps of up to a millisecond): it meets a pin only when a
/// handle is destroyed while another thread is inside a call on it, and calls are short.
void wait_unpinned(const void* object);

/// How many pins of the calling thread hold `object` (calls in flight on this thread using it).
[[nodiscard]] int pins_here(const void* object) noexcept;
/// True when the calling thread holds any pin (it is inside a call: a reclaim hook).
[[nodiscard]] bool inside_a_call() noexcept;

/// Runs `teardown` now when the calling thread holds no pin (its exception propagates), else when
/// it holds none any more (see "deferred"; an exception is then ignored: the teardown runs in a
/// destructor's place, with no caller left to tell).
void run_or_defer(std::function<void()> teardown);

}  // namespace streampool::c_api
