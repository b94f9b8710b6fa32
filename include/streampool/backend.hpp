// streampool: the backend contract.
//
// A backend is one kind of device (the CPU as a device, CUDA, OpenCL, Level Zero) seen through
// ten operations, plus six optional virtual-memory operations. Everything above it (timelines, the
// pool, arrays) is written once, against this header only.
//
// Glossary
//   queue    an in-order queue of device work (a CUDA stream, a host worker thread, an OpenCL
//            in-order queue, a Level Zero immediate command list). Created and destroyed only by
//            a `stream` (see stream.hpp); nothing else ever holds one.
//   marker   a point recorded in a queue (a CUDA event, an OpenCL/Level Zero event). It is
//            complete once all work submitted to its queue before it has finished. A marker is
//            independent of its queue: it may be queried, waited on and destroyed after its queue
//            was destroyed. This is what lets tokens outlive streams (see timeline.hpp).
//   command  a unit of device work: copy, fill, or one of the fixed kernels in kernel.hpp.
//   range    (virtual memory) an address range reserved without memory behind it.
//   physical (virtual memory) device memory without an address; it becomes usable once mapped
//            into a range. Its contents after a map are unspecified (the pool never relies on
//            them: it maps only memory that is free).
//
// Pre- and postconditions, for every implementation:
//   allocate(bytes)            bytes > 0 and a multiple of caps().granularity. Returns memory
//                              aligned to caps().granularity, or nullptr when the device is out of
//                              memory (never throws for OOM; throws backend_error for other
//                              failures).
//   deallocate(p, bytes)       p came from allocate(bytes) and no queued work still uses it.
//   create_queue()             returns a new queue; never nullptr.
//   destroy_queue(q)           all work submitted to q has completed (the caller host-waited on a
//                              marker recorded last). Afterwards q is never passed again.
//   submit(q, cmd)             enqueues cmd after everything already in q and returns without
//                              waiting for it. Host memory named by cmd (an upload's source) may be
//                              reused by the caller as soon as submit returns: the backend stages
//                              or synchronises. May be called concurrently for different queues and
//                              for the same queue. cmd is well formed:
//                                copy    dst and src non-null unless bytes == 0 (a no-op);
//                                fill    element_size 1, 2, 4 or 8; dst non-null unless count == 0;
//                                        count * element_size does not overflow;
//                                kernel  a known kind and dtype, an op valid for the kind
//                                        (valid_for in kernel.hpp); in0, out and (map_binary) in1
//                                        non-null unless n == 0, out non-null for reduce even
//                                        then; n * size_of(type) does not overflow.
//   record(q)                  returns a new marker after everything already in q; never nullptr.
//   query(m)                   true once m is complete. Never blocks. Thread-safe.
//   wait_host(m)               blocks the calling thread until m is complete.
//   wait_device(q, m)          makes work submitted to q after this call wait until m is complete,
//                              without blocking the host. m may belong to a queue that has since
//                              been destroyed. A backend without device-side waits sets
//                              caps().device_wait = false and implements this as wait_host(m).
//   release_marker(m)          m is never used again. Called at most once per marker.
// Queues and markers passed in are never nullptr.
//
// Virtual memory, only where caps().virtual_memory (the pool's large blocks use it; without it
// they live in whole upstream allocations). Sizes and addresses are multiples of
// caps().vm_granularity, the granule; one physical handle is exactly one granule.
//   reserve(bytes)             returns a range of `bytes` with no memory behind it, aligned to the
//                              granule; nullptr when the address space is refused.
//   unreserve(p, bytes)        p came from reserve(bytes) and nothing in it is mapped any more.
//   create_physical()          one granule of device memory; nullptr when the device is out of
//                              memory (never throws for OOM).
//   release_physical(h)        h is not mapped anywhere.
//   map(p, handles)            maps handles[i] at p + i * granule, read-write for the device;
//                              [p, p + n * granule) lies in a reserved range and is unmapped;
//                              n > 0 and no handle is nullptr. false when the device is out of
//                              memory (nothing stays mapped).
//   unmap(p, bytes)            [p, p + bytes) is mapped, and no queued work still uses it. The
//                              handles stay valid and may be mapped again elsewhere.
//
// Who checks: the public functions below are the only way in (the virtuals are private). Before a
// backend sees a call they check what the arguments show of the preconditions above: sizes,
// alignment, null queues, markers and handles, the virtual-memory capability, and that a command
// is well formed (src/core/stream/backend.cpp). A backend therefore implements only well-formed
// calls. What the arguments cannot show (p came from allocate, no queued work still uses it) stays
// the caller's promise. A refused call throws logic_error naming the backend and the values.
// Postconditions that are cheap to see (create_queue and record never return nullptr) are checked
// on the way out, also as logic_error: a backend that breaks them is broken, and the caller must
// not get a null handle.
//
// deallocate, destroy_queue, release_marker, unreserve, release_physical and unmap are noexcept:
// they run in destructors and finalisers, where a throw would terminate anyway. Their checks are
// assertions at the level of STREAMPOOL_ASSERT (error.hpp): a broken precondition aborts with a
// message naming the backend and the values, instead of handing a null or misaligned handle to
// the driver; with STREAMPOOL_DEBUG_LEVEL=0 they are compiled out. Backends do not throw from
// these six either.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "streampool/error.hpp"
#include "streampool/export.hpp"
#include "streampool/kernel.hpp"

namespace streampool {

/// Opaque native handles. A backend decides what they point to.
using native_queue = void*;
using native_marker = void*;
using native_physical = void*;

/// The smallest caps().granularity that a pool accepts; the granularity must also be a power of
/// two. (The pool finds a pointer's segment in a page map of pages of this size, so a segment
/// must cover whole pages.)
inline constexpr std::size_t min_pool_granularity = std::size_t{64} << 10;

/// Which runtime a backend drives. Code that must know (a native stream's type, a handle's
/// format) asks this, never the name, which is for people.
enum class backend_kind : std::uint8_t { other, host, cuda, opencl, level_zero };

/// What a backend can do; read by the pool and the array layer instead of #ifdefs.
struct backend_caps {
  bool device_wait = true;             ///< wait_device enqueues a device-side wait (no host block)
  bool host_accessible = false;        ///< device memory may be dereferenced by the host
  std::size_t granularity = 2u << 20;  ///< allocate() sizes and alignment (2 MiB on CUDA)
  std::size_t total_memory = 0;        ///< device memory in bytes (0 when unknown)
  bool virtual_memory = false;         ///< reserve/map/unmap and physical granules are available
  /// Virtual memory: the granule, the unit of physical memory and of mapping (a multiple of
  /// granularity). Coarser granules cost memory at the edges of what is mapped; finer ones cost
  /// driver calls (docs/large-blocks.md).
  std::size_t vm_granularity = 0;
  backend_kind kind = backend_kind::other;  ///< the runtime (a test's own backend: other)
};

/// A copy between two places, either of which may be host memory.
struct copy_command {
  void* dst;
  const void* src;
  std::size_t bytes;
  bool src_is_host;  ///< src is ordinary (pageable) host memory: stage it before submit returns
  bool dst_is_host;  ///< dst is ordinary host memory: the caller will wait before reading it
};

/// Fills `count` elements of `element_size` bytes (1, 2, 4 or 8) with `pattern`.
struct fill_command {
  void* dst;
  std::uint64_t pattern;
  std::size_t element_size;
  std::size_t count;
};

enum class command_kind : std::uint8_t { copy, fill, kernel };

/// One unit of device work.
struct command {
  command_kind kind;
  union {
    copy_command copy;
    fill_command fill;
    kernel_command kernel;
  };
  static command make(const copy_command& c) {
    command r{command_kind::copy, {}};
    r.copy = c;
    return r;
  }
  static command make(const fill_command& f) {
    command r{command_kind::copy, {}};
    r.kind = command_kind::fill;
    r.fill = f;
    return r;
  }
  static command make(const kernel_command& k) {
    command r{command_kind::copy, {}};
    r.kind = command_kind::kernel;
    r.kernel = k;
    return r;
  }
};

/// The backend contract. Public non-virtual functions check their arguments, then call the
/// private virtuals (NVI), so every backend gets the same checks and messages (see "Who checks"
/// above; the bodies are in src/core/stream/backend.cpp).
class STREAMPOOL_EXPORT backend {
 public:
  /// @throws logic_error when caps().granularity is not a power of two, or (with virtual
  ///         memory) caps().vm_granularity is not a power of two multiple of it.
  backend(std::string name, backend_caps caps);
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;
  virtual ~backend() = default;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const backend_caps& caps() const noexcept { return caps_; }
  [[nodiscard]] backend_kind kind() const noexcept { return caps_.kind; }
  /// False in a child process that fork() made after this backend: its queues, workers and
  /// driver state belong to the parent (CUDA's own rule: a child must not use a context made
  /// before the fork). There, every operation that would reach the device throws logic_error
  /// saying so, and the noexcept ones (deallocate, destroy_queue, release_marker, unreserve,
  /// release_physical, unmap) do nothing: what the parent made is left to the parent, so that
  /// destroying inherited objects in the child neither hangs nor crashes.
  [[nodiscard]] bool usable_in_this_process() const noexcept;

  /// @name Stream capture (CUDA graphs)
  /// While a capture is under way on the device (begin_capture() more often than end_capture()),
  /// the driver must not be asked whether work is complete nor made to wait, and memory must not
  /// go back to it: CUDA's global capture mode fails the capture when any thread does so. Then
  /// query() answers false without asking (what completed is learnt after the capture), and
  /// record, wait_host, wait_device, deallocate, unreserve, release_physical and unmap are
  /// refused (logic_error; an assertion for the noexcept ones): the pool grows instead of
  /// waiting, and gives nothing back until the capture ends (docs/torch.md, "CUDA graphs").
  /// Growth (allocate, reserve, create_physical, map) stays allowed. Counted: captures on several
  /// streams nest.
  ///
  /// Another thread may begin a capture at any moment, so "not capturing, therefore ask the
  /// driver" is decided under an outside_capture scope: while one is held, begin_capture() waits
  /// for it to end, so the decision and the calls it leads to cannot straddle the start of a
  /// capture. query, record and the waits take one themselves; the pool takes one around each
  /// decision to wait, record or give memory back.
  /// @{

  /// outside_capture()'s scope (see there). Move-only; ends where it is destroyed.
  class [[nodiscard]] outside_capture_scope {
   public:
    outside_capture_scope() noexcept = default;  ///< holds nothing (false)
    outside_capture_scope(outside_capture_scope&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)),
          stripe_(other.stripe_),
          nested_(other.nested_) {}
    outside_capture_scope& operator=(outside_capture_scope&& other) noexcept {
      if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        stripe_ = other.stripe_;
        nested_ = other.nested_;
      }
      return *this;
    }
    outside_capture_scope(const outside_capture_scope&) = delete;
    outside_capture_scope& operator=(const outside_capture_scope&) = delete;
    ~outside_capture_scope() { release(); }
    explicit operator bool() const noexcept { return owner_ != nullptr; }

   private:
    friend class backend;
    outside_capture_scope(const backend* owner, std::size_t stripe, bool nested) noexcept
        : owner_(owner), stripe_(stripe), nested_(nested) {}
    void release() noexcept;

    const backend* owner_ = nullptr;
    std::size_t stripe_ = 0;
    bool nested_ = false;  // inside another scope of this thread on owner_: counted there
  };
  /// Waits until no outside_capture scope of another thread is held, then counts the capture.
  /// A thread that holds one itself must not call this (it would wait for itself: an assertion).
  void begin_capture() noexcept;
  /// @throws logic_error when no capture is under way
  void end_capture();
  [[nodiscard]] bool capturing() const noexcept {
    return captures_.load(std::memory_order_acquire) != 0;
  }
  /// A scope that holds (true) when no capture is under way, and keeps one from beginning until
  /// it ends; empty (false) during a capture. Nested scopes of one thread on one backend hold
  /// without looking again. Cheap: two atomic operations on a line of the calling thread's.
  [[nodiscard]] outside_capture_scope outside_capture() const noexcept;
  /// Runs `work` under an outside_capture scope: now when no capture is under way, else when the
  /// last capture ends, on the thread that ends it. For what must record or wait and may be
  /// neither refused nor failed: a stream destroyed during a capture retires after it
  /// (stream::~stream). What `work` throws reaches the caller that runs it (the first of
  /// several, after all ran).
  void run_outside_capture(std::function<void()> work);
  /// @}

  [[nodiscard]] void* allocate(std::size_t bytes);
  void deallocate(void* p, std::size_t bytes) noexcept;
  [[nodiscard]] native_queue create_queue();
  void destroy_queue(native_queue q) noexcept;
  void submit(native_queue q, const command& c);
  [[nodiscard]] native_marker record(native_queue q);
  [[nodiscard]] bool query(native_marker m);
  void wait_host(native_marker m);
  void wait_device(native_queue q, native_marker m);
  void release_marker(native_marker m) noexcept;

  // Virtual memory (caps().virtual_memory only).
  [[nodiscard]] void* reserve(std::size_t bytes);
  void unreserve(void* p, std::size_t bytes) noexcept;
  [[nodiscard]] native_physical create_physical();
  void release_physical(native_physical h) noexcept;
  [[nodiscard]] bool map(void* p, std::span<const native_physical> handles);
  void unmap(void* p, std::size_t bytes) noexcept;

 private:
  virtual void* do_allocate(std::size_t bytes) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes) noexcept = 0;
  virtual native_queue do_create_queue() = 0;
  virtual void do_destroy_queue(native_queue q) noexcept = 0;
  virtual void do_submit(native_queue q, const command& c) = 0;
  virtual native_marker do_record(native_queue q) = 0;
  virtual bool do_query(native_marker m) = 0;
  virtual void do_wait_host(native_marker m) = 0;
  virtual void do_wait_device(native_queue q, native_marker m) = 0;
  virtual void do_release_marker(native_marker m) noexcept = 0;
  // Virtual memory: the defaults are never reached (the wrappers check caps() first).
  virtual void* do_reserve(std::size_t bytes);
  virtual void do_unreserve(void* p, std::size_t bytes) noexcept;
  virtual native_physical do_create_physical();
  virtual void do_release_physical(native_physical h) noexcept;
  virtual bool do_map(void* p, std::span<const native_physical> handles);
  virtual void do_unmap(void* p, std::size_t bytes) noexcept;

  /// Throws logic_error naming `what` when !usable_in_this_process().
  void check_process(const char* what) const;
  /// An outside_capture scope for the call `what`; throws logic_error naming it while a stream
  /// capture is under way (begin_capture).
  [[nodiscard]] outside_capture_scope check_not_capturing(const char* what) const;

  std::string name_;
  backend_caps caps_;
  std::uint64_t fork_generation_;  // the process's fork count when this backend was made
  std::atomic<int> captures_{0};   // stream captures under way (begin_capture)
  std::atomic<int> entering_{0};   // begin_capture calls waiting for the scopes to end
  // outside_capture scopes held now, in stripes by thread so that threads share no written line.
  // Invariant: a scope counts in its stripe from before it reads entering_ == 0 and captures_ == 0
  // until it ends, and begin_capture counts entering_ before it reads the stripes (all
  // sequentially consistent): one of the two sees the other. captures_ grows only once the
  // stripes are clear, so capturing() stays false while any scope is held.
  static constexpr std::size_t capture_stripes = 16;
  struct alignas(64) capture_stripe {
    std::atomic<int> held{0};
  };
  mutable std::array<capture_stripe, capture_stripes> outside_{};
  // Work that waits for the last capture to end (run_outside_capture). captures_ reaches 0 only
  // under this lock, and work is put here only while captures_ > 0 or entering_ > 0 (a capture
  // that will count) is read under it: none is left behind by an end_capture that ran meanwhile.
  std::mutex deferred_mu_;
  std::vector<std::function<void()>> deferred_;
};

}  // namespace streampool
