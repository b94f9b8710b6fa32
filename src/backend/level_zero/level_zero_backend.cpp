// streampool: the Level Zero backend (see include/streampool/level_zero.hpp and backend.hpp).
//
// Glossary
//   context     one ze_context per backend, on the device's driver; memory, events, command lists
//               and the module belong to it.
//   queue       an immediate command list (ze_queue below) on the first compute queue group.
//   in order    the 1.4 specification does not promise that two commands of a command list run one
//               after the other (only that a barrier runs after everything before it and before
//               everything after it); the in-order command-list flag came with a later
//               specification than the headers we build against. So every command that follows
//               another command is preceded by a barrier (needs_barrier); a marker's barrier and a
//               wait need none of their own. One barrier per command costs little next to a
//               kernel, and it is correct on every driver.
//   batch       the waits and the host/device memory appended to a queue since its previous batch,
//               closed by a proof event signalled by a barrier after them (a marker the caller
//               recorded, or an internal event after a staged upload). When the proof is
//               signalled, the queue has passed those waits and finished with that memory:
//               the waits are handed back to the event registry (its reuse rule, condition 2) and
//               the memory is freed. Batches complete in order, so only the oldest is queried.
//   staging     host memory of the context (zeMemAllocHost) that an upload from pageable memory
//               is copied into before submit returns, or that a download to pageable memory
//               lands in on a device without shared system allocation support (submit then
//               waits for it and copies it to dst); freed with its batch, after the copy.
//   scratch     a queue's device buffer for the kernel plan's partials (reduce, scans); safe to
//               share between the queue's kernels because they run in order. When it grows, the
//               old one is freed with the current batch.
//
// Locks: a queue's mu guards its command list (appends are not thread-safe in Level Zero) and its
// fields; queues_mu_ guards the set of queues; module_mu_ the module. Order: a queue's mu, then
// queues_mu_ (take_event, with the queue's mu held, polls the other queues), then other queues'
// mu, only ever with try_lock; the event registry's own lock is innermost. Deadlock-free because
// a thread never blocks on a queue's mu while holding queues_mu_ or another queue's mu (see
// do_destroy_queue).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/opencl_c/kernel_plan.hpp"
#include "check.hpp"
#include "device_query.hpp"
#include "driver.hpp"
#include "event_registry.hpp"
#include "kernel_module.hpp"
#include "spirv.hpp"
#include "streampool/level_zero.hpp"

namespace streampool {
namespace {

namespace ze = detail::ze;
using ze::allocation_granularity;
using ze::device_facts;
using ze::device_location;
using ze::event_slot;

/// The most groups of one map launch (the kernels loop over the rest: grid-stride).
constexpr std::size_t max_map_groups = 4096;

/// Waits and fill patterns a queue's open batch may hold before the backend closes it itself
/// (bound_open_batch).
constexpr std::size_t max_open_batch = 256;

/// Bytes of memory (old scratch buffers, staging) a queue's open batch may keep alive before the
/// backend closes it itself (bound_open_batch): 64 MiB.
constexpr std::size_t max_open_batch_bytes = std::size_t{64} << 20;

/// One queue (native_queue points to it).
struct ze_queue {
  struct batch {
    event_slot* proof = nullptr;
    std::vector<event_slot*> waits;
    std::vector<void*> memory;           // zeMemAlloc* memory, zeMemFree'd
    std::size_t memory_bytes = 0;        // the size of `memory`, in bytes
    std::deque<std::uint64_t> patterns;  // fill patterns (their addresses were appended)
  };

  std::mutex mu;  // guards everything below, and appends to cl
  ze_command_list_handle_t cl = nullptr;
  bool needs_barrier = false;  ///< a command was appended since the last barrier
  batch open;                  ///< what the next proof will cover (open.proof unused)
  std::deque<batch> closed;    ///< oldest first
  /// Kernels by entry and dtype, created on first use: each queue sets arguments on its own
  /// kernel objects, under mu, so concurrent queues never share argument state.
  std::array<std::array<ze_kernel_handle_t, detail::kernel_dtype_count>, detail::kernel_entry_count>
      kernels{};
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;

  [[nodiscard]] bool open_is_empty() const noexcept {
    return open.waits.empty() && open.memory.empty() && open.patterns.empty();
  }
};

ze_queue* as_queue(native_queue q) noexcept { return static_cast<ze_queue*>(q); }
event_slot* as_slot(native_marker m) noexcept { return static_cast<event_slot*>(m); }

class level_zero_backend final : public backend {
 public:
  level_zero_backend(const ze::driver& d, int ordinal, device_location loc, ze_context_handle_t ctx,
                     const device_facts& facts)
      : backend("level_zero",
                backend_caps{/*device_wait=*/true, /*host_accessible=*/false,
                             allocation_granularity, facts.total_memory, facts.vm_granule != 0,
                             facts.vm_granule, backend_kind::level_zero}),
        d_(d),
        ordinal_(ordinal),
        drv_(loc.drv),
        dev_(loc.dev),
        ctx_(ctx),
        facts_(facts),
        events_(std::make_unique<ze::event_registry>(d, ctx, loc.drv)) {}

  ~level_zero_backend() override {
    // Every stream is gone (each holds the backend), so no command list is left and no work is
    // in flight; markers were released by their tokens.
    events_.reset();
    if (module_ != nullptr) report_teardown(d_.module_destroy(module_), "zeModuleDestroy");
    report_teardown(d_.context_destroy(ctx_), "zeContextDestroy");
  }

 private:
  void report_teardown(ze_result_t r, const char* what) const noexcept {
    ze::report_teardown_error(d_, r, what);
  }

  // ---- memory ------------------------------------------------------------------------------

  void* do_allocate(std::size_t bytes) override {
    const ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    const ze_result_t r = d_.mem_alloc_device(ctx_, &desc, bytes, allocation_granularity, dev_, &p);
    // The contract's out of memory is the device's; a driver that keeps device memory in host
    // memory (the test driver) may say host, which is the same condition for the pool.
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
      return nullptr;
    ze::check(d_, drv_, r, "zeMemAllocDevice(%zu bytes, alignment %zu) on device %d", bytes,
              allocation_granularity, ordinal_);
    if (reinterpret_cast<std::uintptr_t>(p) % allocation_granularity != 0) {
      report_teardown(d_.mem_free(ctx_, p), "zeMemFree");
      throw backend_error(
          backend_error_kind::runtime,
          detail::format("level_zero: zeMemAllocDevice(%zu bytes) on device %d "
                         "returned %s, not aligned to %zu as asked",
                         bytes, ordinal_, detail::format_ptr(p).c_str(), allocation_granularity),
          "level_zero", 0);
    }
    return p;
  }

  void do_deallocate(void* p, std::size_t) noexcept override {
    report_teardown(d_.mem_free(ctx_, p), "zeMemFree");
  }

  // ---- virtual memory ----------------------------------------------------------------------

  void* do_reserve(std::size_t bytes) override {
    const std::size_t g = facts_.vm_granule;
    void* p = nullptr;
    ze_result_t r = d_.virtual_mem_reserve(ctx_, reserve_hint(), bytes, &p);
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
      return nullptr;
    ze::check(d_, drv_, r, "zeVirtualMemReserve(%zu bytes) on device %d", bytes, ordinal_);
    if (reinterpret_cast<std::uintptr_t>(p) % g == 0) {
      note_reserved(p, bytes);
      return p;
    }
    // The driver aligns ranges to its page size, which may be finer than our granule: reserve
    // one granule more and use the aligned part, remembering the real range for unreserve.
    report_teardown(d_.virtual_mem_free(ctx_, p, bytes), "zeVirtualMemFree");
    r = d_.virtual_mem_reserve(ctx_, reserve_hint(), bytes + g, &p);
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
      return nullptr;
    ze::check(d_, drv_, r, "zeVirtualMemReserve(%zu bytes) on device %d", bytes + g, ordinal_);
    const auto base = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t aligned = (base + g - 1) / g * g;
    try {
      std::lock_guard<std::mutex> lk(unaligned_mu_);
      unaligned_.emplace(aligned, p);
    } catch (...) {
      report_teardown(d_.virtual_mem_free(ctx_, p, bytes + g), "zeVirtualMemFree");
      throw;
    }
    note_reserved(p, bytes + g);
    return reinterpret_cast<void*>(aligned);  // NOLINT(performance-no-int-to-ptr)
  }

  /// The start address zeVirtualMemReserve is asked for: just past the previous range, rounded up
  /// to the granule (ranges then tend to come aligned and next to each other), else a high,
  /// granule-aligned address. Only a hint: the driver picks another address when it is taken. Not
  /// nullptr, although the 1.4 text allows it: the 1.4 validation layer refuses a null pStart.
  const void* reserve_hint() const noexcept {
    const std::size_t g = facts_.vm_granule;
    std::uintptr_t next = next_reserve_.load(std::memory_order_relaxed);
    if (next == 0) next = std::uintptr_t{1} << 44;  // 16 TiB: a multiple of every granule we use
    const std::uintptr_t aligned = (next + g - 1) / g * g;
    return reinterpret_cast<const void*>(aligned);  // NOLINT(performance-no-int-to-ptr)
  }
  void note_reserved(void* p, std::size_t bytes) noexcept {
    next_reserve_.store(reinterpret_cast<std::uintptr_t>(p) + bytes, std::memory_order_relaxed);
  }

  void do_unreserve(void* p, std::size_t bytes) noexcept override {
    void* base = p;
    std::size_t total = bytes;
    {
      std::lock_guard<std::mutex> lk(unaligned_mu_);
      if (auto it = unaligned_.find(reinterpret_cast<std::uintptr_t>(p)); it != unaligned_.end()) {
        base = it->second;
        total = bytes + facts_.vm_granule;
        unaligned_.erase(it);
      }
    }
    report_teardown(d_.virtual_mem_free(ctx_, base, total), "zeVirtualMemFree");
  }

  native_physical do_create_physical() override {
    ze_physical_mem_desc_t desc{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, facts_.vm_granule};
    ze_physical_mem_handle_t h = nullptr;
    const ze_result_t r = d_.physical_mem_create(ctx_, dev_, &desc, &h);
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
      return nullptr;
    ze::check(d_, drv_, r, "zePhysicalMemCreate(%zu bytes) on device %d", facts_.vm_granule,
              ordinal_);
    return h;
  }

  void do_release_physical(native_physical h) noexcept override {
    report_teardown(d_.physical_mem_destroy(ctx_, static_cast<ze_physical_mem_handle_t>(h)),
                    "zePhysicalMemDestroy");
  }

  bool do_map(void* p, std::span<const native_physical> handles) override {
    const std::size_t g = facts_.vm_granule;
    auto* base = static_cast<unsigned char*>(p);
    std::size_t mapped = 0;
    ze_result_t r = ZE_RESULT_SUCCESS;
    for (; mapped < handles.size(); ++mapped) {
      r = d_.virtual_mem_map(ctx_, base + mapped * g, g,
                             static_cast<ze_physical_mem_handle_t>(handles[mapped]), 0,
                             ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE);
      if (r != ZE_RESULT_SUCCESS) break;
    }
    if (r == ZE_RESULT_SUCCESS) return true;
    // Nothing stays mapped after a failure (the contract), out of memory or not.
    for (std::size_t i = 0; i < mapped; ++i)
      report_teardown(d_.virtual_mem_unmap(ctx_, base + i * g, g), "zeVirtualMemUnmap");
    if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
      return false;
    ze::check(d_, drv_, r, "zeVirtualMemMap(%p + %zu granules of %zu, of %zu) on device %d", p,
              mapped, g, handles.size(), ordinal_);
    return true;  // not reached: check threw
  }

  void do_unmap(void* p, std::size_t bytes) noexcept override {
    // One call per granule: each granule was mapped on its own.
    auto* base = static_cast<unsigned char*>(p);
    for (std::size_t off = 0; off < bytes; off += facts_.vm_granule)
      report_teardown(d_.virtual_mem_unmap(ctx_, base + off, facts_.vm_granule),
                      "zeVirtualMemUnmap");
  }

  // ---- queues ------------------------------------------------------------------------------

  native_queue do_create_queue() override {
    auto q = std::make_unique<ze_queue>();
    const ze_command_queue_desc_t desc{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                       nullptr,
                                       facts_.compute_group,
                                       0,
                                       0,
                                       ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                       ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze::check(d_, drv_, d_.command_list_create_immediate(ctx_, dev_, &desc, &q->cl),
              "zeCommandListCreateImmediate(queue group %u) on device %d", facts_.compute_group,
              ordinal_);
    try {
      std::lock_guard<std::mutex> lk(queues_mu_);
      queues_.push_back(q.get());
    } catch (...) {
      report_teardown(d_.command_list_destroy(q->cl), "zeCommandListDestroy");
      throw;
    }
    return q.release();
  }

  void do_destroy_queue(native_queue nq) noexcept override {
    ze_queue* q = as_queue(nq);
    // Lock order (top of file): a queue's mu, then queues_mu_, then other queues' mu by try_lock
    // only. Here queues_mu_ is taken while holding no queue's mu and released before q->mu is
    // taken, so it never waits in the reverse order. Once q is out of queues_ (under queues_mu_,
    // which a polling take_event holds for as long as it may hold q->mu by try_lock), no other
    // thread can reach q, and deleting it below is safe.
    {
      std::lock_guard<std::mutex> lk(queues_mu_);
      queues_.erase(std::find(queues_.begin(), queues_.end(), q));
    }
    {
      std::lock_guard<std::mutex> lk(q->mu);
      // The contract: all work submitted to q has completed, so q has passed every wait it
      // appended and finished with all of its memory (the reuse rule's "destroyed queue").
      while (!q->closed.empty()) {
        finish(q->closed.front());
        q->closed.pop_front();
      }
      finish(q->open);
      for (auto& by_type : q->kernels)
        for (ze_kernel_handle_t k : by_type)
          if (k != nullptr) report_teardown(d_.kernel_destroy(k), "zeKernelDestroy");
      if (q->scratch != nullptr) report_teardown(d_.mem_free(ctx_, q->scratch), "zeMemFree");
      report_teardown(d_.command_list_destroy(q->cl), "zeCommandListDestroy");
    }
    delete q;  // NOLINT(cppcoreguidelines-owning-memory): made by create_queue's release()
  }

  /// Hands a completed batch's waits and proof back to the registry and frees its memory.
  void finish(ze_queue::batch& b) noexcept {
    for (event_slot* w : b.waits) events_->remove_waiter(w);
    b.waits.clear();
    for (void* m : b.memory) report_teardown(d_.mem_free(ctx_, m), "zeMemFree");
    b.memory.clear();
    b.memory_bytes = 0;
    b.patterns.clear();
    if (b.proof != nullptr) events_->remove_ref(b.proof);
    b.proof = nullptr;
  }

  /// Finishes q's batches whose proof has been signalled, oldest first. Caller holds q->mu.
  void collect(ze_queue* q) noexcept {
    while (!q->closed.empty()) {
      const ze_result_t r = d_.event_query_status(q->closed.front().proof->event);
      if (r == ZE_RESULT_NOT_READY) return;
      if (r != ZE_RESULT_SUCCESS) {
        report_teardown(r, "zeEventQueryStatus (batch proof)");
        return;  // keep everything: never free what might still be in use
      }
      finish(q->closed.front());
      q->closed.pop_front();
    }
  }

  /// An event for `self` (whose mu the caller holds): a reusable one, else one freed by polling
  /// every queue's batches (other queues only if their lock is free), else a new one.
  event_slot* take_event(ze_queue* self) {
    if (event_slot* s = events_->try_reuse()) return s;
    {
      std::lock_guard<std::mutex> lk(queues_mu_);
      for (ze_queue* q : queues_) {
        if (q == self) continue;
        std::unique_lock<std::mutex> other(q->mu, std::try_to_lock);
        if (other.owns_lock()) collect(q);
      }
    }
    collect(self);
    return events_->acquire();
  }

  /// Appends a barrier between commands where one is due. Caller holds q->mu.
  void order_next_command(ze_queue* q) {
    if (!q->needs_barrier) return;
    ze::check(d_, drv_, d_.command_list_append_barrier(q->cl, nullptr, 0, nullptr),
              "zeCommandListAppendBarrier on device %d", ordinal_);
    q->needs_barrier = false;
  }

  /// Appends a barrier that signals a new event after everything in q, closing q's open batch
  /// with it when the batch holds anything. `internal`: the event is only the batch's proof (it
  /// counts as released at once). Caller holds q->mu.
  event_slot* signal_locked(ze_queue* q, bool internal) {
    event_slot* s = take_event(q);
    const ze_result_t r = close_batch(q, s, internal);
    ze::check(d_, drv_, r, "zeCommandListAppendBarrier (signal) on device %d", ordinal_);
    return s;
  }

  /// Appends a barrier that signals `s` (taken with take_event before anything was appended)
  /// after everything in q, closing q's open batch with it when the batch holds anything. Never
  /// throws, so that a submit whose command is already appended does not fail: on an error, `s`
  /// is released and the open batch stays open (its waits and memory go with the next proof, or
  /// with the queue), and the error is returned. `internal`: as for signal_locked. Caller holds
  /// q->mu.
  ze_result_t close_batch(ze_queue* q, event_slot* s, bool internal) noexcept {
    const bool close = !q->open_is_empty();
    if (close) {
      try {
        q->closed.emplace_back();
      } catch (...) {
        events_->release(s);
        return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
      }
    }
    const ze_result_t r = d_.command_list_append_barrier(q->cl, s->event, 0, nullptr);
    if (r != ZE_RESULT_SUCCESS) {
      if (close) q->closed.pop_back();
      events_->release(s);
      return r;
    }
    q->needs_barrier = false;
    if (close) {
      // Reference first, release second: the slot must never look free in between.
      events_->add_ref(s);
      ze_queue::batch& b = q->closed.back();
      b.proof = s;
      b.waits.swap(q->open.waits);
      b.memory.swap(q->open.memory);
      std::swap(b.memory_bytes, q->open.memory_bytes);
      b.patterns.swap(q->open.patterns);
    }
    if (internal) events_->release(s);
    return ZE_RESULT_SUCCESS;
  }

  /// Closes q's open batch with an internal proof after a command that was already appended:
  /// never throws. On failure the batch stays open, to be closed by a later proof.
  void close_batch_after_append(ze_queue* q, event_slot* s) noexcept {
    const ze_result_t r = close_batch(q, s, /*internal=*/true);
    if (r != ZE_RESULT_SUCCESS) report_teardown(r, "zeCommandListAppendBarrier (batch proof)");
  }

  /// Closes q's open batch with an internal proof once it holds `max_open_batch` entries or
  /// `max_open_batch_bytes` of memory: a queue that nobody records markers on (the pool records
  /// them lazily) must still hand back the events it waited on, the fill patterns and the old
  /// scratch buffers it keeps. Called after a command was appended, so it never throws: when no
  /// event can be had, the batch stays open and the next command tries again. Caller holds q->mu.
  void bound_open_batch(ze_queue* q) noexcept {
    if (q->open.waits.size() + q->open.patterns.size() < max_open_batch &&
        q->open.memory_bytes < max_open_batch_bytes)
      return;
    event_slot* s = nullptr;
    try {
      s = take_event(q);
    } catch (...) {
      report_teardown(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, "an event for a batch proof");
      return;
    }
    close_batch_after_append(q, s);
  }

  native_marker do_record(native_queue nq) override {
    ze_queue* q = as_queue(nq);
    std::lock_guard<std::mutex> lk(q->mu);
    collect(q);
    return signal_locked(q, /*internal=*/false);
  }

  bool do_query(native_marker m) override {
    const ze_result_t r = d_.event_query_status(as_slot(m)->event);
    if (r == ZE_RESULT_NOT_READY) return false;
    ze::check(d_, drv_, r, "zeEventQueryStatus on device %d", ordinal_);
    return true;
  }

  void do_wait_host(native_marker m) override {
    const ze_result_t r =
        d_.event_host_synchronize(as_slot(m)->event, std::numeric_limits<std::uint64_t>::max());
    ze::check(d_, drv_, r, "zeEventHostSynchronize on device %d", ordinal_);
  }

  void do_wait_device(native_queue nq, native_marker m) override {
    ze_queue* q = as_queue(nq);
    event_slot* s = as_slot(m);
    std::lock_guard<std::mutex> lk(q->mu);
    collect(q);
    q->open.waits.reserve(q->open.waits.size() + 1);  // the push below cannot fail then
    events_->add_waiter(s);
    const ze_result_t r = d_.command_list_append_wait_on_events(q->cl, 1, &s->event);
    if (r != ZE_RESULT_SUCCESS) {
      events_->remove_waiter(s);
      ze::check(d_, drv_, r, "zeCommandListAppendWaitOnEvents on device %d", ordinal_);
    }
    q->open.waits.push_back(s);
    bound_open_batch(q);
  }

  void do_release_marker(native_marker m) noexcept override { events_->release(as_slot(m)); }

  // ---- commands ----------------------------------------------------------------------------

  void do_submit(native_queue nq, const command& c) override {
    ze_queue* q = as_queue(nq);
    std::lock_guard<std::mutex> lk(q->mu);
    collect(q);
    switch (c.kind) {
      case command_kind::copy:
        return submit_copy(q, c.copy);
      case command_kind::fill:
        return submit_fill(q, c.fill);
      case command_kind::kernel:
        return submit_kernel(q, c.kernel);
    }
  }

  /// Host memory of the context holding a copy of [src, src + bytes), owned by q's open batch.
  void* stage(ze_queue* q, const void* src, std::size_t bytes) {
    const ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
    void* buf = nullptr;
    q->open.memory.reserve(q->open.memory.size() + 1);
    ze::check(d_, drv_, d_.mem_alloc_host(ctx_, &desc, bytes, 64, &buf),
              "zeMemAllocHost(%zu bytes of staging) on device %d", bytes, ordinal_);
    if (src != nullptr) std::memcpy(buf, src, bytes);
    q->open.memory.push_back(buf);
    q->open.memory_bytes += bytes;
    return buf;
  }

  void append_copy(ze_queue* q, void* dst, const void* src, std::size_t bytes) {
    order_next_command(q);
    ze::check(d_, drv_,
              d_.command_list_append_memory_copy(q->cl, dst, src, bytes, nullptr, 0, nullptr),
              "zeCommandListAppendMemoryCopy(dst=%p, src=%p, %zu bytes) on device %d", dst, src,
              bytes, ordinal_);
    q->needs_barrier = true;
  }

  void submit_copy(ze_queue* q, const copy_command& c) {
    if (c.bytes == 0) return;
    if (c.src_is_host && c.dst_is_host) {
      // Host to host is ordered after the queue's earlier work (which may still write dst or
      // read src) by draining the queue first; it is never on a fast path.
      event_slot* s = signal_locked(q, /*internal=*/false);
      const ze_result_t r =
          d_.event_host_synchronize(s->event, std::numeric_limits<std::uint64_t>::max());
      events_->release(s);
      ze::check(d_, drv_, r, "zeEventHostSynchronize (host-to-host copy) on device %d", ordinal_);
      std::memmove(c.dst, c.src, c.bytes);
      collect(q);
      return;
    }
    if (c.src_is_host) {
      // Pageable source: the contract lets the caller reuse it when submit returns, so it is
      // copied into staging now and the device copies from there. The batch closed right after
      // frees the staging once the copy has run, and bounds what uploads keep alive.
      // The proof is taken first: nothing that can fail comes after the copy is appended.
      event_slot* proof = take_event(q);
      try {
        void* buf = stage(q, c.src, c.bytes);
        append_copy(q, c.dst, buf, c.bytes);
      } catch (...) {
        events_->release(proof);
        throw;
      }
      close_batch_after_append(q, proof);
      return;
    }
    if (c.dst_is_host && !facts_.shared_system_memory) {
      submit_download_staged(q, c);
      return;
    }
    // Device to device, or to pageable host memory on a device that reports shared system
    // allocation support (it may access system memory, so a copy may write it; the caller waits
    // on a later marker before reading it).
    append_copy(q, c.dst, c.src, c.bytes);
  }

  /// A download to pageable memory on a device without shared system allocation support: the
  /// device may not write pageable memory, so it copies into staging (zeMemAllocHost), and the
  /// bytes reach dst on the host. Level Zero has no host callback in a command list, so this
  /// waits on the host until the copy has run (it drains the queue) and then copies: such a
  /// download blocks submit. The contract ("the caller waits before reading dst") would allow
  /// deferring the host copy to that wait; this is the simplest correct form.
  void submit_download_staged(ze_queue* q, const copy_command& c) {
    event_slot* s = take_event(q);  // first, as for an upload
    void* buf = nullptr;
    try {
      buf = stage(q, nullptr, c.bytes);
      append_copy(q, buf, c.src, c.bytes);
    } catch (...) {
      events_->release(s);
      throw;
    }
    // Should the proof fail, the copy into staging still runs, but dst is untouched and the
    // staging stays with the open batch: the failed submit leaves nothing the caller can see.
    ze::check(d_, drv_, close_batch(q, s, /*internal=*/false),
              "zeCommandListAppendBarrier (staged download) on device %d", ordinal_);
    const ze_result_t r =
        d_.event_host_synchronize(s->event, std::numeric_limits<std::uint64_t>::max());
    events_->release(s);
    ze::check(d_, drv_, r, "zeEventHostSynchronize (staged download) on device %d", ordinal_);
    // The batch that owns buf is closed and signalled, but only collect frees it, and only this
    // thread (holding q->mu) collects q.
    std::memcpy(c.dst, buf, c.bytes);
    collect(q);
  }

  void submit_fill(ze_queue* q, const fill_command& f) {
    // f passed backend::submit's checks: element size 1, 2, 4 or 8, dst non-null.
    if (f.count == 0) return;
    const std::size_t bytes = f.count * f.element_size;
    if (f.element_size > facts_.max_fill_pattern) {
      // The queue group cannot fill with a pattern this wide: expand it in staging and copy.
      event_slot* proof = take_event(q);  // first, as for an upload
      try {
        auto* buf = static_cast<unsigned char*>(stage(q, nullptr, bytes));
        for (std::size_t i = 0; i < f.count; ++i)
          std::memcpy(buf + i * f.element_size, &f.pattern, f.element_size);
        append_copy(q, f.dst, buf, bytes);
      } catch (...) {
        events_->release(proof);
        throw;
      }
      close_batch_after_append(q, proof);
      return;
    }
    // The pattern lives in the open batch until the fill has run: the 1.4 specification does
    // not say that the driver copies it when the fill is appended.
    q->open.patterns.push_back(f.pattern);  // little-endian: the low element_size bytes
    order_next_command(q);
    ze::check(d_, drv_,
              d_.command_list_append_memory_fill(q->cl, f.dst, &q->open.patterns.back(),
                                                 f.element_size, bytes, nullptr, 0, nullptr),
              "zeCommandListAppendMemoryFill(dst=%p, %zu elements of %zu bytes) on device %d",
              f.dst, f.count, f.element_size, ordinal_);
    q->needs_barrier = true;
    bound_open_batch(q);
  }

  /// `k` passed backend::submit's checks: a combination kernel.hpp defines, with its operands.
  void submit_kernel(ze_queue* q, const kernel_command& k) {
    // Nothing to do for an empty map or scan; a reduction of nothing still writes the identity.
    if (k.n == 0 && k.kind != kernel_kind::reduce) return;
    const ze_module_handle_t module = get_module(k.type);
    const detail::kernel_shape shape{facts_.group_size, max_map_groups};
    const std::size_t need = detail::kernel_scratch_bytes(k, shape);
    if (need > q->scratch_bytes) grow_scratch(q, need);
    const detail::kernel_plan plan =
        detail::make_kernel_plan(k, shape, q->scratch, q->scratch_bytes);
    for (const detail::kernel_launch& l : plan.launches) append_launch(q, module, l, k);
    bound_open_batch(q);  // old scratch buffers
  }

  /// Replaces q's scratch with one of at least `need` bytes; the old one is freed with the open
  /// batch (kernels appended before may still use it). It grows to at least twice its size, as
  /// the OpenCL backend's does, so that a queue whose kernels grow step by step replaces it
  /// O(log n) times, and the old buffers the open batch keeps add up to less than the current one.
  void grow_scratch(ze_queue* q, std::size_t need) {
    const std::size_t want = std::max(need, 2 * q->scratch_bytes);
    const std::size_t bytes =
        (want + allocation_granularity - 1) / allocation_granularity * allocation_granularity;
    q->open.memory.reserve(q->open.memory.size() + 1);
    const ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    ze::check(d_, drv_, d_.mem_alloc_device(ctx_, &desc, bytes, 128, dev_, &p),
              "zeMemAllocDevice(%zu bytes of kernel scratch) on device %d", bytes, ordinal_);
    if (q->scratch != nullptr) {
      q->open.memory.push_back(q->scratch);
      q->open.memory_bytes += q->scratch_bytes;
    }
    q->scratch = p;
    q->scratch_bytes = bytes;
  }

  void append_launch(ze_queue* q, ze_module_handle_t module, const detail::kernel_launch& l,
                     const kernel_command& k) {
    ze_kernel_handle_t& slot =
        q->kernels.at(static_cast<std::size_t>(l.entry)).at(static_cast<std::size_t>(l.type));
    if (slot == nullptr) {
      const ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, l.name()};
      ze::check(d_, drv_, d_.kernel_create(module, &desc, &slot), "zeKernelCreate(%s) on device %d",
                l.name(), ordinal_);
    }
    ze_kernel_handle_t kernel = slot;
    ze::check(d_, drv_,
              d_.kernel_set_group_size(kernel, static_cast<std::uint32_t>(l.group_size), 1, 1),
              "zeKernelSetGroupSize(%s, %zu) on device %d", l.name(), l.group_size, ordinal_);
    for (std::size_t i = 0; i < l.arg_count; ++i) {
      const detail::kernel_arg& a = l.args.at(i);
      const auto index = static_cast<std::uint32_t>(i);
      ze_result_t r = ZE_RESULT_SUCCESS;
      switch (a.what) {
        case detail::kernel_arg::kind::pointer:
          r = d_.kernel_set_argument_value(kernel, index, sizeof(void*), &a.pointer);
          break;
        case detail::kernel_arg::kind::scalar:
          r = d_.kernel_set_argument_value(kernel, index, a.size, a.value_ptr());
          break;
        case detail::kernel_arg::kind::local:
          r = d_.kernel_set_argument_value(kernel, index, a.size, nullptr);
          break;
      }
      ze::check(d_, drv_, r, "zeKernelSetArgumentValue(%s, argument %u, %zu bytes) on device %d",
                l.name(), index, a.size, ordinal_);
    }
    order_next_command(q);
    const ze_group_count_t groups{static_cast<std::uint32_t>(l.groups), 1, 1};
    ze::check(d_, drv_,
              d_.command_list_append_launch_kernel(q->cl, kernel, &groups, nullptr, 0, nullptr),
              "zeCommandListAppendLaunchKernel(%s, %zu groups of %zu; %s kernel, op %s, n=%zu) on "
              "device %d",
              l.name(), l.groups, l.group_size, kind_name(k.kind), op_name(k.fn), k.n, ordinal_);
    q->needs_barrier = true;
  }

  /// The module for kernels of `t`, built on first use. Devices with fp64 get the module with the
  /// f64 kernels; the others get the one without (an f64 kernel there is an error).
  ze_module_handle_t get_module(dtype t) {
    const ze::spirv_module& spirv = facts_.fp64 ? ze::spirv_fp64 : ze::spirv_fp32;
    if (spirv.size == 0) {
      throw backend_error(backend_error_kind::runtime,
                          "level_zero: built without SPIR-V kernels (clang-15 or llvm-spirv-15 "
                          "missing at build time, or STREAMPOOL_LEVEL_ZERO_KERNELS=OFF)",
                          "level_zero", 0);
    }
    if (t == dtype::f64 && !facts_.fp64) {
      throw backend_error(backend_error_kind::runtime,
                          "level_zero: device " + std::to_string(ordinal_) + " (" + facts_.name +
                              ") has no fp64 support: no f64 kernels",
                          "level_zero", 0);
    }
    std::lock_guard<std::mutex> lk(module_mu_);
    if (module_ != nullptr) return module_;
    const ze_module_handle_t m =
        ze::create_kernel_module(d_, drv_, ctx_, dev_, spirv, facts_.fp64, ordinal_);
    module_ = m;
    return module_;
  }

  const ze::driver& d_;
  const int ordinal_;
  const ze_driver_handle_t drv_;
  const ze_device_handle_t dev_;
  const ze_context_handle_t ctx_;
  const device_facts facts_;

  std::unique_ptr<ze::event_registry> events_;  // reset before the context is destroyed

  std::mutex queues_mu_;           // guards queues_
  std::vector<ze_queue*> queues_;  // live queues, for take_event's polling

  std::mutex module_mu_;                 // guards module_
  ze_module_handle_t module_ = nullptr;  // built on the first kernel

  std::atomic<std::uintptr_t> next_reserve_{0};  // reserve_hint(): the end of the last range
  std::mutex unaligned_mu_;                      // guards unaligned_
  std::unordered_map<std::uintptr_t, void*> unaligned_;  // aligned range -> zeVirtualMemReserve's
};

const ze::driver* driver_or_throw() {
  std::string why;
  ze_result_t code = ZE_RESULT_SUCCESS;
  const ze::driver* d = ze::load(&why, &code);
  if (d == nullptr) {
    throw backend_error(backend_error_kind::unavailable, "level_zero: not available: " + why,
                        "level_zero", static_cast<long>(code));
  }
  return d;
}

}  // namespace

bool level_zero_available() noexcept {
  try {
    return level_zero_device_count() > 0;
  } catch (...) {
    return false;
  }
}

int level_zero_device_count() {
  const ze::driver* d = ze::load();
  if (d == nullptr) return 0;
  try {
    return static_cast<int>(ze::enumerate(*d).size());
  } catch (const backend_error&) {
    return 0;
  }
}

std::shared_ptr<backend> make_level_zero_backend(int ordinal) {
  const ze::driver& d = *driver_or_throw();
  const std::vector<device_location> devices = ze::enumerate(d);
  const int count = static_cast<int>(devices.size());
  if (ordinal < 0 || ordinal >= count) {
    throw backend_error(
        backend_error_kind::no_device,
        detail::format("level_zero: no device %d (%d devices over all drivers)", ordinal, count),
        "level_zero", static_cast<long>(ZE_RESULT_ERROR_INVALID_ARGUMENT));
  }
  const device_location loc = devices[static_cast<std::size_t>(ordinal)];
  const ze_context_desc_t desc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t ctx = nullptr;
  ze::check(d, loc.drv, d.context_create(loc.drv, &desc, &ctx), "zeContextCreate(device %d)",
            ordinal);
  try {
    return std::make_shared<level_zero_backend>(d, ordinal, loc, ctx,
                                                ze::query_facts(d, loc, ctx, ordinal));
  } catch (...) {
    ze::report_teardown_error(d, d.context_destroy(ctx), "zeContextDestroy");
    throw;
  }
}

}  // namespace streampool
