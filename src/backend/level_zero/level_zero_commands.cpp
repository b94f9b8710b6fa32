// streampool: the Level Zero backend's copies, fills and kernels (level_zero_backend.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>

#include "level_zero_backend.hpp"

namespace streampool::detail::ze {
namespace {

/// The most groups of one map launch (the kernels loop over the rest: grid-stride).
constexpr std::size_t max_map_groups = 4096;

}  // namespace

void level_zero_backend::do_submit(native_queue nq, const command& c) {
  queue* q = as_queue(nq);
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

void* level_zero_backend::stage(queue* q, const void* src, std::size_t bytes) {
  const ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
  void* buf = nullptr;
  q->open.memory.reserve(q->open.memory.size() + 1);
  check(errors_, d_.mem_alloc_host(ctx_, &desc, bytes, 64, &buf),
        "zeMemAllocHost(%zu bytes of staging) on device %d", bytes, ordinal_);
  if (src != nullptr) std::memcpy(buf, src, bytes);
  q->open.memory.push_back(buf);
  q->open.memory_bytes += bytes;
  return buf;
}

void level_zero_backend::append_copy(queue* q, void* dst, const void* src, std::size_t bytes) {
  order_next_command(q);
  check(errors_, d_.command_list_append_memory_copy(q->cl, dst, src, bytes, nullptr, 0, nullptr),
        "zeCommandListAppendMemoryCopy(dst=%p, src=%p, %zu bytes) on device %d", dst, src, bytes,
        ordinal_);
  q->needs_barrier = true;
}

void level_zero_backend::submit_copy(queue* q, const copy_command& c) {
  if (c.bytes == 0) return;
  if (c.src_is_host && c.dst_is_host) {
    // Host to host is ordered after the queue's earlier work (which may still write dst or
    // read src) by draining the queue first; it is never on a fast path.
    event_slot* s = signal_locked(q, /*internal=*/false);
    const ze_result_t r =
        d_.event_host_synchronize(s->event, std::numeric_limits<std::uint64_t>::max());
    events_->release(s);
    check(errors_, r, "zeEventHostSynchronize (host-to-host copy) on device %d", ordinal_);
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

void level_zero_backend::submit_download_staged(queue* q, const copy_command& c) {
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
  check(errors_, close_batch(q, s, /*internal=*/false),
        "zeCommandListAppendBarrier (staged download) on device %d", ordinal_);
  const ze_result_t r =
      d_.event_host_synchronize(s->event, std::numeric_limits<std::uint64_t>::max());
  events_->release(s);
  check(errors_, r, "zeEventHostSynchronize (staged download) on device %d", ordinal_);
  // The batch that owns buf is closed and signalled, but only collect frees it, and only this
  // thread (holding q->mu) collects q.
  std::memcpy(c.dst, buf, c.bytes);
  collect(q);
}

void level_zero_backend::submit_fill(queue* q, const fill_command& f) {
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
  check(errors_,
        d_.command_list_append_memory_fill(q->cl, f.dst, &q->open.patterns.back(), f.element_size,
                                           bytes, nullptr, 0, nullptr),
        "zeCommandListAppendMemoryFill(dst=%p, %zu elements of %zu bytes) on device %d", f.dst,
        f.count, f.element_size, ordinal_);
  q->needs_barrier = true;
  bound_open_batch(q);
}

void level_zero_backend::submit_kernel(queue* q, const kernel_command& k) {
  // Nothing to do for an empty map or scan; a reduction of nothing still writes the identity.
  if (k.n == 0 && k.kind != kernel_kind::reduce) return;
  const ze_module_handle_t module = get_module(k.type);
  const kernel_shape shape{facts_.group_size, max_map_groups};
  const std::size_t need = kernel_scratch_bytes(k, shape);
  if (need > q->scratch_bytes) grow_scratch(q, need);
  const kernel_plan plan = make_kernel_plan(k, shape, q->scratch, q->scratch_bytes);
  for (const kernel_launch& l : plan.launches) append_launch(q, module, l, k);
  bound_open_batch(q);  // old scratch buffers
}

void level_zero_backend::grow_scratch(queue* q, std::size_t need) {
  const std::size_t want = std::max(need, 2 * q->scratch_bytes);
  const std::size_t bytes = align_up(want, allocation_granularity);
  q->open.memory.reserve(q->open.memory.size() + 1);
  const ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* p = nullptr;
  check(errors_, d_.mem_alloc_device(ctx_, &desc, bytes, 128, dev_, &p),
        "zeMemAllocDevice(%zu bytes of kernel scratch) on device %d", bytes, ordinal_);
  if (q->scratch != nullptr) {
    q->open.memory.push_back(q->scratch);
    q->open.memory_bytes += q->scratch_bytes;
  }
  q->scratch = p;
  q->scratch_bytes = bytes;
}

void level_zero_backend::append_launch(queue* q, ze_module_handle_t module, const kernel_launch& l,
                                       const kernel_command& k) {
  ze_kernel_handle_t& slot =
      q->kernels.at(static_cast<std::size_t>(l.entry)).at(static_cast<std::size_t>(l.type));
  if (slot == nullptr) {
    const ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, l.name()};
    check(errors_, d_.kernel_create(module, &desc, &slot), "zeKernelCreate(%s) on device %d",
          l.name(), ordinal_);
  }
  ze_kernel_handle_t kernel = slot;
  check(errors_, d_.kernel_set_group_size(kernel, static_cast<std::uint32_t>(l.group_size), 1, 1),
        "zeKernelSetGroupSize(%s, %zu) on device %d", l.name(), l.group_size, ordinal_);
  for (std::size_t i = 0; i < l.arg_count; ++i) {
    const kernel_arg& a = l.args.at(i);
    const auto index = static_cast<std::uint32_t>(i);
    ze_result_t r = ZE_RESULT_SUCCESS;
    switch (a.what) {
      case kernel_arg::kind::pointer:
        r = d_.kernel_set_argument_value(kernel, index, sizeof(void*), &a.pointer);
        break;
      case kernel_arg::kind::scalar:
        r = d_.kernel_set_argument_value(kernel, index, a.size, a.value_ptr());
        break;
      case kernel_arg::kind::local:
        r = d_.kernel_set_argument_value(kernel, index, a.size, nullptr);
        break;
    }
    check(errors_, r, "zeKernelSetArgumentValue(%s, argument %u, %zu bytes) on device %d", l.name(),
          index, a.size, ordinal_);
  }
  order_next_command(q);
  const ze_group_count_t groups{static_cast<std::uint32_t>(l.groups), 1, 1};
  check(errors_, d_.command_list_append_launch_kernel(q->cl, kernel, &groups, nullptr, 0, nullptr),
        "zeCommandListAppendLaunchKernel(%s, %zu groups of %zu; %s kernel, op %s, n=%zu) on "
        "device %d",
        l.name(), l.groups, l.group_size, kind_name(k.kind), op_name(k.fn), k.n, ordinal_);
  q->needs_barrier = true;
}

}  // namespace streampool::detail::ze
