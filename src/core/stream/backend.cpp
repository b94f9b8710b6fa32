// streampool: the backend contract's checks (include/streampool/backend.hpp). Every backend gets
// the same argument checks and messages here, once, before its virtual is called; backends
// implement only well-formed calls.
#include "streampool/backend.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <thread>

#include "core/support/page_map.hpp"

// The noexcept wrappers cannot throw, so their checks abort instead, at the level of
// STREAMPOOL_ASSERT, but with a message naming the backend and the values (`message` is only
// evaluated when `cond` fails).
#if STREAMPOOL_DEBUG_LEVEL >= 1
#define STREAMPOOL_BACKEND_ASSERT(cond, message) \
  ((cond) ? (void)0 : ::streampool::detail::assert_fail((message).c_str(), __FILE__, __LINE__))
#else
#define STREAMPOOL_BACKEND_ASSERT(cond, message) ((void)0)
#endif

namespace streampool {
namespace {

static_assert(min_pool_granularity == detail::page_map::page_size,
              "backend.hpp's min_pool_granularity is the pool's page size");

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }
bool power_of_two(std::size_t n) { return n != 0 && (n & (n - 1)) == 0; }
bool positive_multiple(std::size_t n, std::size_t unit) { return n > 0 && n % unit == 0; }
/// unreserve and unmap (noexcept): [p, p + bytes) is whole granules on a backend with virtual
/// memory.
void assert_granule_range([[maybe_unused]] const std::string& name,
                          [[maybe_unused]] const backend_caps& caps,
                          [[maybe_unused]] const char* op, [[maybe_unused]] const void* p,
                          [[maybe_unused]] std::size_t bytes) noexcept {
  STREAMPOOL_BACKEND_ASSERT(
      caps.virtual_memory && p != nullptr && aligned(p, caps.vm_granularity) &&
          positive_multiple(bytes, caps.vm_granularity),
      detail::format("%s: %s of %zu bytes at %s: needs virtual memory (%s), a non-null address "
                     "and a size that are multiples of the granule %zu",
                     name.c_str(), op, bytes, detail::format_ptr(p).c_str(),
                     caps.virtual_memory ? "yes" : "no", caps.vm_granularity));
}
/// n elements of `size` bytes fit in a size_t.
bool fits(std::size_t n, std::size_t size) {
  return n <= std::numeric_limits<std::size_t>::max() / size;
}

bool known(command_kind k) { return static_cast<unsigned>(k) <= unsigned(command_kind::kernel); }
bool known(kernel_kind k) {
  return static_cast<unsigned>(k) <= unsigned(kernel_kind::exclusive_scan);
}
bool known(dtype t) { return static_cast<unsigned>(t) <= unsigned(dtype::u64); }

void check_copy(const std::string& name, const copy_command& c) {
  STREAMPOOL_EXPECTS(c.bytes == 0 || (c.dst != nullptr && c.src != nullptr),
                     detail::format("%s: submit: copy of %zu bytes from %s to %s: a null address",
                                    name.c_str(), c.bytes, detail::format_ptr(c.src).c_str(),
                                    detail::format_ptr(c.dst).c_str()));
}

void check_fill(const std::string& name, const fill_command& f) {
  const std::size_t e = f.element_size;
  STREAMPOOL_EXPECTS(
      e == 1 || e == 2 || e == 4 || e == 8,
      detail::format("%s: submit: fill element size %zu is not 1, 2, 4 or 8", name.c_str(), e));
  STREAMPOOL_EXPECTS(fits(f.count, e),  // e is not 0 here
                     detail::format("%s: submit: fill of %zu elements of %zu bytes overflows",
                                    name.c_str(), f.count, e));
  STREAMPOOL_EXPECTS(f.count == 0 || f.dst != nullptr,
                     detail::format("%s: submit: fill of %zu elements of %zu bytes at a null "
                                    "address",
                                    name.c_str(), f.count, e));
}

void check_kernel(const std::string& name, const kernel_command& k) {
  STREAMPOOL_EXPECTS(known(k.kind), detail::format("%s: submit: kernel kind %u is not one of "
                                                   "kernel.hpp's",
                                                   name.c_str(), unsigned(k.kind)));
  STREAMPOOL_EXPECTS(known(k.type),
                     detail::format("%s: submit: %s kernel: dtype %u is not one of kernel.hpp's",
                                    name.c_str(), kind_name(k.kind), unsigned(k.type)));
  // has_scalar matters only to map_unary (kernel.hpp): say which form was refused.
  const char* form = k.kind != kernel_kind::map_unary ? ""
                     : k.has_scalar                   ? " with a scalar operand"
                                                      : " without a scalar operand";
  STREAMPOOL_EXPECTS(
      valid_for(k.kind, k.fn, k.has_scalar),
      detail::format("%s: submit: %s kernel does not define op %s (%u)%s", name.c_str(),
                     kind_name(k.kind), op_name(k.fn), unsigned(k.fn), form));
  STREAMPOOL_EXPECTS(fits(k.n, size_of(k.type)),
                     detail::format("%s: submit: %s kernel of %zu %s elements overflows",
                                    name.c_str(), kind_name(k.kind), k.n, dtype_name(k.type)));
  // An empty input has no memory (null in an empty array); a reduction of it still writes out.
  const bool binary = k.kind == kernel_kind::map_binary;
  const bool writes = k.n > 0 || k.kind == kernel_kind::reduce;
  STREAMPOOL_EXPECTS(
      (k.n == 0 || (k.in0 != nullptr && (!binary || k.in1 != nullptr))) &&
          (!writes || k.out != nullptr),
      detail::format("%s: submit: %s kernel (op %s) of %zu elements with a null "
                     "operand: in0 %s, in1 %s, out %s",
                     name.c_str(), kind_name(k.kind), op_name(k.fn), k.n,
                     detail::format_ptr(k.in0).c_str(), detail::format_ptr(k.in1).c_str(),
                     detail::format_ptr(k.out).c_str()));
}

// How many fork()s made this process from the one that loaded the library: a child's handler
// adds one, so a backend made before the fork sees another number than its own.
std::atomic<std::uint64_t> fork_count{0};

std::uint64_t fork_generation() noexcept {
  static const bool registered = [] {
    return pthread_atfork(nullptr, nullptr,
                          [] { fork_count.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  (void)registered;
  return fork_count.load(std::memory_order_relaxed);
}

}  // namespace

bool backend::usable_in_this_process() const noexcept {
  return fork_count.load(std::memory_order_relaxed) == fork_generation_;
}

void backend::check_process(const char* what) const {
  if (usable_in_this_process()) [[likely]]
    return;
  STREAMPOOL_FAIL(detail::format(
      "%s: %s: this backend was made before fork() (pid %ld is the child); its queues and "
      "device state belong to the parent. A child must make its own device (as CUDA requires "
      "of its contexts)",
      name_.c_str(), what, static_cast<long>(getpid())));
}

backend::backend(std::string name, backend_caps caps)
    : name_(std::move(name)), caps_(caps), fork_generation_(fork_generation()) {
  STREAMPOOL_EXPECTS(power_of_two(caps_.granularity),
                     detail::format("backend '%s': granularity %zu is not a power of two",
                                    name_.c_str(), caps_.granularity));
  STREAMPOOL_EXPECTS(!caps_.virtual_memory || (power_of_two(caps_.vm_granularity) &&
                                               caps_.vm_granularity % caps_.granularity == 0),
                     detail::format("backend '%s': virtual memory granule %zu is not a power of "
                                    "two multiple of the granularity %zu",
                                    name_.c_str(), caps_.vm_granularity, caps_.granularity));
}

namespace {

/// The outside_capture scope this thread holds (the outermost), and how many are nested in it.
struct held_scope {
  const backend* on = nullptr;
  int depth = 0;
};
thread_local held_scope held;

/// This thread's stripe of a backend's scope counts.
std::size_t my_stripe(std::size_t stripes) {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % stripes;
}

}  // namespace

backend::outside_capture_scope backend::outside_capture() const noexcept {
  if (held.on == this) {
    ++held.depth;
    return {this, 0, /*nested=*/true};
  }
  const std::size_t stripe = my_stripe(capture_stripes);
  std::atomic<int>& count = outside_[stripe].held;
  count.fetch_add(1, std::memory_order_seq_cst);
  if (entering_.load(std::memory_order_seq_cst) != 0 ||
      captures_.load(std::memory_order_seq_cst) != 0) {
    count.fetch_sub(1, std::memory_order_release);
    return {};
  }
  if (held.on == nullptr) held = {this, 1};
  return {this, stripe, /*nested=*/false};
}

void backend::outside_capture_scope::release() noexcept {
  if (owner_ == nullptr) return;
  if (nested_) {
    --held.depth;
  } else {
    if (held.on == owner_) held = {};
    owner_->outside_[stripe_].held.fetch_sub(1, std::memory_order_release);
  }
  owner_ = nullptr;
}

void backend::begin_capture() noexcept {
  STREAMPOOL_BACKEND_ASSERT(
      held.on != this,
      detail::format("%s: begin_capture while this thread holds an outside_capture scope (it "
                     "would wait for itself)",
                     name_.c_str()));
  entering_.fetch_add(1, std::memory_order_seq_cst);
  // Every scope taken before the count above ends; any taken after it sees the count and holds
  // nothing. A scope lasts one decision and its driver calls.
  for (const capture_stripe& s : outside_) {
    while (s.held.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  captures_.fetch_add(1, std::memory_order_seq_cst);
  entering_.fetch_sub(1, std::memory_order_seq_cst);
}

void backend::end_capture() {
  std::vector<std::function<void()>> deferred;
  {
    const std::lock_guard lock(deferred_mu_);
    int n = captures_.load(std::memory_order_acquire);
    do {
      STREAMPOOL_EXPECTS(
          n > 0, detail::format("%s: end_capture with no stream capture under way", name_.c_str()));
    } while (!captures_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel));
    if (n == 1) deferred.swap(deferred_);
  }
  // Each again through run_outside_capture: another capture may begin meanwhile.
  std::exception_ptr first;
  for (auto& work : deferred) {
    try {
      run_outside_capture(std::move(work));
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void backend::run_outside_capture(std::function<void()> work) {
  for (;;) {
    if (const outside_capture_scope scope = outside_capture()) {
      work();
      return;
    }
    // No scope: a capture is under way or beginning. A beginning one counts in captures_ before
    // it ends, and the end_capture that brings captures_ to 0 (under this lock) runs what waits
    // here, so the work waits for it instead of spinning until it has begun. When neither is
    // seen under the lock, the capture has begun and ended meanwhile: try the scope again.
    const std::lock_guard lock(deferred_mu_);
    if (captures_.load(std::memory_order_seq_cst) > 0 ||
        entering_.load(std::memory_order_seq_cst) > 0) {
      deferred_.push_back(std::move(work));
      return;
    }
  }
}

backend::outside_capture_scope backend::check_not_capturing(const char* what) const {
  outside_capture_scope scope = outside_capture();
  STREAMPOOL_EXPECTS(scope,
                     detail::format("%s: %s while a stream capture is under way on the device "
                                    "(the capture would fail: begin_capture in backend.hpp)",
                                    name_.c_str(), what));
  return scope;
}

void* backend::allocate(std::size_t bytes) {
  check_process("allocate");
  STREAMPOOL_EXPECTS(positive_multiple(bytes, caps_.granularity),
                     detail::format("%s: upstream allocation of %zu bytes is not a positive "
                                    "multiple of the granularity %zu",
                                    name_.c_str(), bytes, caps_.granularity));
  return do_allocate(bytes);
}

void backend::deallocate(void* p, std::size_t bytes) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(
      !capturing(),
      detail::format("%s: deallocate while a stream capture is under way", name_.c_str()));
  STREAMPOOL_BACKEND_ASSERT(
      p != nullptr && aligned(p, caps_.granularity) && positive_multiple(bytes, caps_.granularity),
      detail::format("%s: deallocate of %zu bytes at %s: needs a non-null address and a size "
                     "that are multiples of the granularity %zu",
                     name_.c_str(), bytes, detail::format_ptr(p).c_str(), caps_.granularity));
  do_deallocate(p, bytes);
}

native_queue backend::create_queue() {
  check_process("create_queue");
  native_queue q = do_create_queue();
  STREAMPOOL_EXPECTS(q != nullptr,
                     detail::format("%s: create_queue returned a null queue", name_.c_str()));
  return q;
}

void backend::destroy_queue(native_queue q) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(q != nullptr,
                            detail::format("%s: destroy_queue of a null queue", name_.c_str()));
  do_destroy_queue(q);
}

void backend::submit(native_queue q, const command& c) {
  check_process("submit");
  STREAMPOOL_EXPECTS(q != nullptr, detail::format("%s: submit to a null queue", name_.c_str()));
  STREAMPOOL_EXPECTS(known(c.kind),
                     detail::format("%s: submit: command kind %u is not copy, fill or kernel",
                                    name_.c_str(), unsigned(c.kind)));
  switch (c.kind) {
    case command_kind::copy:
      check_copy(name_, c.copy);
      break;
    case command_kind::fill:
      check_fill(name_, c.fill);
      break;
    case command_kind::kernel:
      check_kernel(name_, c.kernel);
      break;
  }
  do_submit(q, c);
}

native_marker backend::record(native_queue q) {
  check_process("record");
  const outside_capture_scope scope = check_not_capturing("record");
  STREAMPOOL_EXPECTS(q != nullptr, detail::format("%s: record on a null queue", name_.c_str()));
  native_marker m = do_record(q);
  STREAMPOOL_EXPECTS(m != nullptr,
                     detail::format("%s: record returned a null marker", name_.c_str()));
  return m;
}

bool backend::query(native_marker m) {
  check_process("query");
  STREAMPOOL_EXPECTS(m != nullptr, detail::format("%s: query of a null marker", name_.c_str()));
  // A capture under way: not asked, so not complete (what completed is learnt after it).
  const outside_capture_scope scope = outside_capture();
  if (!scope) return false;
  return do_query(m);
}

void backend::wait_host(native_marker m) {
  check_process("wait_host");
  const outside_capture_scope scope = check_not_capturing("wait_host");
  STREAMPOOL_EXPECTS(m != nullptr, detail::format("%s: wait_host on a null marker", name_.c_str()));
  do_wait_host(m);
}

void backend::wait_device(native_queue q, native_marker m) {
  check_process("wait_device");
  const outside_capture_scope scope = check_not_capturing("wait_device");
  STREAMPOOL_EXPECTS(
      q != nullptr && m != nullptr,
      detail::format("%s: wait_device of queue %s on marker %s: both must be "
                     "non-null",
                     name_.c_str(), detail::format_ptr(q).c_str(), detail::format_ptr(m).c_str()));
  do_wait_device(q, m);
}

void backend::release_marker(native_marker m) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(m != nullptr,
                            detail::format("%s: release_marker of a null marker", name_.c_str()));
  do_release_marker(m);
}

void* backend::reserve(std::size_t bytes) {
  check_process("reserve");
  STREAMPOOL_EXPECTS(
      caps_.virtual_memory,
      detail::format("%s: reserve: this backend has no virtual memory", name_.c_str()));
  STREAMPOOL_EXPECTS(positive_multiple(bytes, caps_.vm_granularity),
                     detail::format("%s: reserve of %zu bytes is not a positive multiple of the "
                                    "granule %zu",
                                    name_.c_str(), bytes, caps_.vm_granularity));
  return do_reserve(bytes);
}

void backend::unreserve(void* p, std::size_t bytes) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(
      !capturing(),
      detail::format("%s: unreserve while a stream capture is under way", name_.c_str()));
  assert_granule_range(name_, caps_, "unreserve", p, bytes);
  do_unreserve(p, bytes);
}

native_physical backend::create_physical() {
  check_process("create_physical");
  STREAMPOOL_EXPECTS(
      caps_.virtual_memory,
      detail::format("%s: create_physical: this backend has no virtual memory", name_.c_str()));
  return do_create_physical();
}

void backend::release_physical(native_physical h) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(
      !capturing(),
      detail::format("%s: release_physical while a stream capture is under way", name_.c_str()));
  STREAMPOOL_BACKEND_ASSERT(
      caps_.virtual_memory && h != nullptr,
      detail::format("%s: release_physical of handle %s: needs virtual memory (%s) and a "
                     "non-null handle",
                     name_.c_str(), detail::format_ptr(h).c_str(),
                     caps_.virtual_memory ? "yes" : "no"));
  do_release_physical(h);
}

bool backend::map(void* p, std::span<const native_physical> handles) {
  check_process("map");
  STREAMPOOL_EXPECTS(caps_.virtual_memory,
                     detail::format("%s: map: this backend has no virtual memory", name_.c_str()));
  STREAMPOOL_EXPECTS(p != nullptr && aligned(p, caps_.vm_granularity) && !handles.empty(),
                     detail::format("%s: map of %zu granules at %s: the address must be non-null "
                                    "and aligned to the granule %zu, and the granules more than 0",
                                    name_.c_str(), handles.size(), detail::format_ptr(p).c_str(),
                                    caps_.vm_granularity));
  for (std::size_t i = 0; i < handles.size(); ++i) {
    STREAMPOOL_EXPECTS(
        handles[i] != nullptr,
        detail::format("%s: map of %zu granules at %s: handle %zu is null", name_.c_str(),
                       handles.size(), detail::format_ptr(p).c_str(), i));
  }
  return do_map(p, handles);
}

void backend::unmap(void* p, std::size_t bytes) noexcept {
  if (!usable_in_this_process()) [[unlikely]]
    return;  // the parent's: left to it
  STREAMPOOL_BACKEND_ASSERT(
      !capturing(), detail::format("%s: unmap while a stream capture is under way", name_.c_str()));
  assert_granule_range(name_, caps_, "unmap", p, bytes);
  do_unmap(p, bytes);
}

// Never called: the wrappers above refuse before reaching them on a backend without the
// capability, and a backend that sets it overrides all six.
void* backend::do_reserve(std::size_t) { return nullptr; }
void backend::do_unreserve(void*, std::size_t) noexcept {}
native_physical backend::do_create_physical() { return nullptr; }
void backend::do_release_physical(native_physical) noexcept {}
bool backend::do_map(void*, std::span<const native_physical>) { return false; }
void backend::do_unmap(void*, std::size_t) noexcept {}

}  // namespace streampool
