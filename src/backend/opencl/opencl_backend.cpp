// streampool: the OpenCL backend (see include/streampool/opencl.hpp and backend.hpp).
//
// Glossary
//   context   one cl_context per backend, holding its one device; every queue, allocation and
//             the program belong to it (events of one context may be waited on by any of its
//             queues, which is what device-side waits need).
//   segment   what allocate() returns: coarse-grain SVM aligned to caps().granularity. OpenCL
//             promises clSVMAlloc alignments only up to its largest data type (128 bytes; PoCL
//             refuses more, and leaks a little each time it refuses), so each allocation is
//             over-allocated by one granule and the aligned pointer is mapped to the real base
//             for deallocate.
//   marker    a cl_event of clEnqueueMarkerWithWaitList, flushed at once: a marker that another
//             queue waits on must have been submitted to the device, or the wait could deadlock
//             behind commands that were never flushed.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/common/aligned_bases.hpp"
#include "backend/common/check.hpp"
#include "backend/opencl_c/kernel_plan.hpp"
#include "kernel_program.hpp"
#include "opencl_api.hpp"
#include "opencl_queue.hpp"
#include "streampool/opencl.hpp"

namespace streampool {
namespace {

namespace ocl = detail::ocl;
using detail::check;
using detail::report_teardown_error;

/// caps().granularity: the smallest the pool accepts. OpenCL has no large pages to align to, and
/// with the segment path (no virtual memory) a coarser granule would only round small pools up.
constexpr std::size_t granularity = min_pool_granularity;

/// "opencl: not available: <why>" / "opencl: no device ...": errors before a backend exists.
[[noreturn]] void fail(backend_error_kind kind, const std::string& message, long code) {
  detail::raise_backend_error(kind, "opencl", code, message);
}

/// Every device of every platform, in the order of the ordinal (opencl.hpp).
std::vector<cl_device_id> all_devices(const ocl::api& a) {
  cl_uint platforms = 0;
  cl_int r = a.get_platform_ids(0, nullptr, &platforms);
  // The ICD loader reports "no platform" as CL_PLATFORM_NOT_FOUND_KHR (-1001): zero devices.
  if (r != CL_SUCCESS || platforms == 0) return {};
  std::vector<cl_platform_id> ids(platforms);
  check(a, a.get_platform_ids(platforms, ids.data(), nullptr), "clGetPlatformIDs(%u platforms)",
        platforms);
  std::vector<cl_device_id> devices;
  for (cl_uint p = 0; p < platforms; ++p) {
    cl_uint n = 0;
    // A platform that cannot list its devices (a broken ICD, CL_DEVICE_NOT_FOUND) has none to
    // offer; it must not hide the devices of the others.
    r = a.get_device_ids(ids[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
    if (r != CL_SUCCESS || n == 0) continue;
    const std::size_t first = devices.size();
    devices.resize(first + n);
    if (a.get_device_ids(ids[p], CL_DEVICE_TYPE_ALL, n, devices.data() + first, nullptr) !=
        CL_SUCCESS) {
      devices.resize(first);
    }
  }
  return devices;
}

template <class T>
T device_info(const ocl::api& a, cl_device_id dev, cl_device_info what, const char* name) {
  T value{};
  check(a, a.get_device_info(dev, what, sizeof value, &value, nullptr), "clGetDeviceInfo(%s)",
        name);
  return value;
}

std::string device_string(const ocl::api& a, cl_device_id dev, cl_device_info what,
                          const char* name) {
  std::size_t size = 0;
  check(a, a.get_device_info(dev, what, 0, nullptr, &size), "clGetDeviceInfo(%s)", name);
  std::string s(size, '\0');
  check(a, a.get_device_info(dev, what, size, s.data(), nullptr), "clGetDeviceInfo(%s)", name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

/// Owns a cl_context: released when the holder goes (the backend's last member to go, after the
/// program and every allocation).
class context_holder {
 public:
  context_holder(const ocl::api& a, cl_context ctx) noexcept : a_(a), ctx_(ctx) {}
  context_holder(const context_holder&) = delete;
  context_holder& operator=(const context_holder&) = delete;
  ~context_holder() { report_teardown_error(a_, a_.release_context(ctx_), "clReleaseContext"); }
  [[nodiscard]] cl_context get() const noexcept { return ctx_; }

 private:
  const ocl::api& a_;
  const cl_context ctx_;
};

class opencl_backend final : public backend {
 public:
  opencl_backend(const ocl::api& a, int ordinal, std::unique_ptr<context_holder> ctx,
                 ocl::device_traits dev, std::size_t total)
      : backend("opencl", backend_caps{/*device_wait=*/true, /*host_accessible=*/false, granularity,
                                       total, /*virtual_memory=*/false, 0, backend_kind::opencl}),
        a_(a),
        ordinal_(ordinal),
        holder_(std::move(ctx)),
        ctx_(holder_->get()),
        device_name_(dev.name),
        fp64_(dev.fp64),
        program_(a, ctx_, std::move(dev)) {}

  ~opencl_backend() override {
    // Every queue is gone (each stream holds the backend), and with them their work. What the
    // pool did not give back is freed here; the program and then the context follow (members).
    bases_.release_all([&](void* base) { a_.svm_free(ctx_, base); });  // leaked by the caller
  }

  opencl_backend(const opencl_backend&) = delete;
  opencl_backend& operator=(const opencl_backend&) = delete;

  [[nodiscard]] std::size_t allocated() const noexcept {
    return allocated_.load(std::memory_order_relaxed);
  }

 private:
  // ---- memory: coarse-grain SVM --------------------------------------------------------------

  void* do_allocate(std::size_t bytes) override {
    if (bytes > SIZE_MAX - granularity) return nullptr;
    // Alignment 0: the implementation's default. clSVMAlloc reports no reason for a null, so null
    // is out of memory (the contract's nullptr).
    void* base = a_.svm_alloc(ctx_, CL_MEM_READ_WRITE, bytes + granularity, 0);
    if (base == nullptr) return nullptr;
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    void* aligned = static_cast<char*>(base) + (detail::align_up(b, granularity) - b);
    try {
      bases_.remember(aligned, base);
    } catch (...) {
      a_.svm_free(ctx_, base);
      throw;
    }
    allocated_.fetch_add(bytes, std::memory_order_relaxed);
    return aligned;
  }

  void do_deallocate(void* p, std::size_t bytes) noexcept override {
    void* base = bases_.take(p);
    if (base == nullptr) {
      std::fprintf(stderr,
                   "streampool: opencl: deallocate(%p, %zu bytes): not an allocation of this "
                   "backend\n",
                   p, bytes);
      return;
    }
    allocated_.fetch_sub(bytes, std::memory_order_relaxed);
    // The contract: no queued work still uses p, so the unordered clSVMFree is safe.
    a_.svm_free(ctx_, base);
  }

  // ---- queues and markers ----------------------------------------------------------------------

  native_queue do_create_queue() override {
    cl_int r = CL_SUCCESS;
    // No properties: an in-order queue, without profiling.
    cl_command_queue q =
        a_.create_command_queue_with_properties(ctx_, program_.device().id, nullptr, &r);
    check(a_, r, "clCreateCommandQueueWithProperties on device %d ('%s')", ordinal_,
          device_name_.c_str());
    try {
      return new ocl::opencl_queue(a_, q);
    } catch (...) {
      report_teardown_error(a_, a_.release_command_queue(q), "clReleaseCommandQueue");
      throw;
    }
  }

  void do_destroy_queue(native_queue nq) noexcept override {
    auto* q = static_cast<ocl::opencl_queue*>(nq);
    {
      std::lock_guard<std::mutex> lk(q->mu);
      // The caller waited for the queue's last marker; clFinish also covers what was enqueued
      // without a marker after it (an old scratch buffer's clEnqueueSVMFree), so that nothing
      // below is freed while a command could still use it.
      report_teardown_error(a_, a_.finish(q->q), "clFinish (destroy_queue)");
      for (cl_kernel k : q->kernels)
        if (k != nullptr) report_teardown_error(a_, a_.release_kernel(k), "clReleaseKernel");
      if (q->scratch != nullptr) a_.svm_free(ctx_, q->scratch);
      q->staged.release_all();
    }
    report_teardown_error(a_, a_.release_command_queue(q->q), "clReleaseCommandQueue");
    delete q;
  }

  native_marker do_record(native_queue nq) override {
    auto* q = static_cast<ocl::opencl_queue*>(nq);
    std::lock_guard<std::mutex> lk(q->mu);
    q->staged.reap();
    cl_event e = nullptr;
    check(a_, a_.enqueue_marker_with_wait_list(q->q, 0, nullptr, &e),
          "clEnqueueMarkerWithWaitList on device %d", ordinal_);
    const cl_int r = a_.flush(q->q);
    if (r != CL_SUCCESS) {
      report_teardown_error(a_, a_.release_event(e), "clReleaseEvent");
      check(a_, r, "clFlush (after a marker) on device %d", ordinal_);
    }
    return e;
  }

  /// The marker's status; negative values are errors of the commands before it.
  cl_int status_of(cl_event e, const char* what) {
    cl_int status = CL_QUEUED;
    check(a_,
          a_.get_event_info(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
          "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS) in %s on device %d", what, ordinal_);
    if (status < 0) {
      detail::raise_backend_error(
          backend_error_kind::runtime, "opencl", status,
          detail::format("%s: marker %p on device %d failed: %s", what, static_cast<void*>(e),
                         ordinal_, ocl::describe(status).c_str()));
    }
    return status;
  }

  bool do_query(native_marker m) override {
    return status_of(static_cast<cl_event>(m), "query") == CL_COMPLETE;
  }

  void do_wait_host(native_marker m) override {
    auto e = static_cast<cl_event>(m);
    const cl_int r = a_.wait_for_events(1, &e);
    if (r == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) (void)status_of(e, "wait_host");
    check(a_, r, "clWaitForEvents(marker %p) on device %d", m, ordinal_);
  }

  void do_wait_device(native_queue nq, native_marker m) override {
    auto* q = static_cast<ocl::opencl_queue*>(nq);
    auto e = static_cast<cl_event>(m);
    std::lock_guard<std::mutex> lk(q->mu);
    check(a_, a_.enqueue_barrier_with_wait_list(q->q, 1, &e, nullptr),
          "clEnqueueBarrierWithWaitList(marker %p) on device %d", m, ordinal_);
  }

  void do_release_marker(native_marker m) noexcept override {
    report_teardown_error(a_, a_.release_event(static_cast<cl_event>(m)), "clReleaseEvent");
  }

  // ---- commands
  // ----------------------------------------------------------------------------------

  void do_submit(native_queue nq, const command& c) override {
    auto* q = static_cast<ocl::opencl_queue*>(nq);
    switch (c.kind) {
      case command_kind::copy:
        return submit_copy(*q, c.copy);
      case command_kind::fill:
        return submit_fill(*q, c.fill);
      case command_kind::kernel:
        return submit_kernel(*q, c.kernel);
    }
  }

  void submit_copy(ocl::opencl_queue& q, const copy_command& c) {
    if (c.bytes == 0) return;
    std::lock_guard<std::mutex> lk(q.mu);
    if (c.src_is_host && c.dst_is_host) {
      // Host to host is ordered after the queue's earlier work (which may still be writing dst or
      // src) by draining the queue first; it is never on a fast path.
      check(a_, a_.finish(q.q), "clFinish (host-to-host copy of %zu bytes) on device %d", c.bytes,
            ordinal_);
      std::memmove(c.dst, c.src, c.bytes);
      return;
    }
    if (c.src_is_host) return q.staged.upload(q.q, c.dst, c.src, c.bytes);
    // Device to device, or a download: the caller waits on a later marker before reading dst.
    check(a_, a_.enqueue_svm_memcpy(q.q, CL_FALSE, c.dst, c.src, c.bytes, 0, nullptr, nullptr),
          "clEnqueueSVMMemcpy(dst=%p, src=%p, %zu bytes%s) on device %d", c.dst, c.src, c.bytes,
          c.dst_is_host ? ", to host memory" : "", ordinal_);
  }

  void submit_fill(ocl::opencl_queue& q, const fill_command& f) {
    if (f.count == 0) return;
    const std::size_t bytes = f.count * f.element_size;  // backend::submit checked the overflow
    const std::size_t size = f.element_size;
    unsigned char pattern[8];
    std::memcpy(pattern, &f.pattern, sizeof pattern);  // little-endian: the element's bytes first
    // Byte i of the fill is pattern[i % size]. clEnqueueSVMMemFill needs dst aligned to the
    // pattern size, so a misaligned fill is split: the bytes before the first aligned address
    // and after the last whole pattern (each shorter than one element) go as staged uploads, and
    // the aligned body as a fill of the pattern rotated to start there. A pattern of one repeated
    // byte is simply a byte fill.
    const std::size_t misalign = reinterpret_cast<std::uintptr_t>(f.dst) % size;
    const bool one_byte =
        std::all_of(pattern, pattern + size, [&](unsigned char b) { return b == pattern[0]; });
    std::lock_guard<std::mutex> lk(q.mu);
    if (misalign == 0 || one_byte) {
      enqueue_fill(q, f.dst, pattern, misalign == 0 ? size : 1, bytes, f.pattern);
      return;
    }
    auto byte_at = [&](std::size_t i) { return pattern[i % size]; };
    const std::size_t head = size - misalign;  // bytes before the first aligned address
    const std::size_t body = bytes > head ? (bytes - head) / size * size : 0;
    unsigned char edge[8];
    auto stage = [&](std::size_t from, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) edge[i] = byte_at(from + i);
      q.staged.upload(q.q, static_cast<unsigned char*>(f.dst) + from, edge, n);
    };
    if (body == 0) {  // shorter than head + one element: at most 15 bytes, all staged
      for (std::size_t from = 0; from < bytes; from += sizeof edge)
        stage(from, std::min(sizeof edge, bytes - from));
      return;
    }
    stage(0, head);
    unsigned char rotated[8];
    for (std::size_t i = 0; i < size; ++i) rotated[i] = byte_at(head + i);
    enqueue_fill(q, static_cast<unsigned char*>(f.dst) + head, rotated, size, body, f.pattern);
    if (const std::size_t tail = bytes - head - body; tail != 0) stage(head + body, tail);
  }

  /// clEnqueueSVMMemFill of `bytes` at dst (aligned to `size`). Caller holds q.mu.
  void enqueue_fill(ocl::opencl_queue& q, void* dst, const unsigned char* pattern, std::size_t size,
                    std::size_t bytes, std::uint64_t as_given) {
    check(a_, a_.enqueue_svm_mem_fill(q.q, dst, pattern, size, bytes, 0, nullptr, nullptr),
          "clEnqueueSVMMemFill(dst=%p, pattern 0x%llx of %zu bytes, %zu bytes) on device %d", dst,
          static_cast<unsigned long long>(as_given), size, bytes, ordinal_);
  }

  /// `k` passed backend::submit's checks: a combination kernel.hpp defines, with its operands.
  void submit_kernel(ocl::opencl_queue& q, const kernel_command& k) {
    // Nothing to do for an empty map or scan; a reduction of nothing still writes the identity.
    if (k.n == 0 && k.kind != kernel_kind::reduce) return;
    if (k.type == dtype::f64 && !fp64_) {
      detail::raise_backend_error(
          backend_error_kind::runtime, "opencl", CL_INVALID_KERNEL_NAME,
          detail::format("%s kernel (op %s, dtype f64, n=%zu): device %d ('%s') has no cl_khr_fp64",
                         kind_name(k.kind), op_name(k.fn), k.n, ordinal_, device_name_.c_str()));
    }
    const cl_program program = program_.get();  // builds it on the first kernel
    const detail::kernel_shape shape = program_.shape();
    std::lock_guard<std::mutex> lk(q.mu);
    ensure_scratch(q, detail::kernel_scratch_bytes(k, shape));
    const detail::kernel_plan plan = detail::make_kernel_plan(k, shape, q.scratch, q.scratch_bytes);
    for (const detail::kernel_launch& l : plan.launches) launch(q, program, l, k);
  }

  /// Grows q's scratch to at least `need` bytes (q.mu held).
  void ensure_scratch(ocl::opencl_queue& q, std::size_t need) {
    if (need <= q.scratch_bytes) return;
    const std::size_t bytes = std::max(need, 2 * q.scratch_bytes);
    void* p = a_.svm_alloc(ctx_, CL_MEM_READ_WRITE, bytes, 0);
    if (p == nullptr) {
      detail::raise_backend_error(backend_error_kind::runtime, "opencl", CL_OUT_OF_RESOURCES,
                                  detail::format("clSVMAlloc(%zu bytes of kernel scratch) on "
                                                 "device %d returned null (out of memory)",
                                                 bytes, ordinal_));
    }
    if (q.scratch != nullptr) {
      // In queue order: launches enqueued before still use the old buffer.
      const cl_int r =
          a_.enqueue_svm_free(q.q, 1, &q.scratch, nullptr, nullptr, 0, nullptr, nullptr);
      if (r != CL_SUCCESS) {
        a_.svm_free(ctx_, p);
        check(a_, r, "clEnqueueSVMFree(old kernel scratch %p) on device %d", q.scratch, ordinal_);
      }
    }
    q.scratch = p;
    q.scratch_bytes = bytes;
  }

  /// This queue's kernel object for `l` (q.mu held).
  cl_kernel kernel_for(ocl::opencl_queue& q, cl_program program, const detail::kernel_launch& l) {
    cl_kernel& k = q.kernels[static_cast<std::size_t>(l.entry) * detail::kernel_dtype_count +
                             static_cast<std::size_t>(l.type)];
    if (k == nullptr) {
      cl_int r = CL_SUCCESS;
      k = a_.create_kernel(program, l.name(), &r);
      check(a_, r, "clCreateKernel(%s) on device %d", l.name(), ordinal_);
    }
    return k;
  }

  void launch(ocl::opencl_queue& q, cl_program program, const detail::kernel_launch& l,
              const kernel_command& k) {
    const cl_kernel kernel = kernel_for(q, program, l);
    for (std::size_t i = 0; i < l.arg_count; ++i) {
      const detail::kernel_arg& arg = l.args[i];
      const auto index = static_cast<cl_uint>(i);
      cl_int r = CL_SUCCESS;
      switch (arg.what) {
        case detail::kernel_arg::kind::pointer:
          if (arg.pointer != nullptr) {
            r = a_.set_kernel_arg_svm_pointer(kernel, index, arg.pointer);
          } else {  // an operand the kernel never reads (n == 0): a null buffer argument
            const cl_mem none = nullptr;
            r = a_.set_kernel_arg(kernel, index, sizeof(cl_mem), &none);
          }
          break;
        case detail::kernel_arg::kind::scalar:
          r = a_.set_kernel_arg(kernel, index, arg.size, arg.value_ptr());
          break;
        case detail::kernel_arg::kind::local:
          r = a_.set_kernel_arg(kernel, index, arg.size, nullptr);
          break;
      }
      check(a_, r, "clSetKernelArg(%s, argument %zu) for a %s kernel (op %s, n=%zu) on device %d",
            l.name(), i, kind_name(k.kind), op_name(k.fn), k.n, ordinal_);
    }
    const std::size_t global = l.groups * l.group_size;
    const std::size_t local = l.group_size;
    check(a_,
          a_.enqueue_nd_range_kernel(q.q, kernel, 1, nullptr, &global, &local, 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel(%s, %zu groups of %zu) for a %s kernel (op %s, n=%zu) on "
          "device %d",
          l.name(), l.groups, l.group_size, kind_name(k.kind), op_name(k.fn), k.n, ordinal_);
  }

  const ocl::api& a_;
  const int ordinal_;
  const std::unique_ptr<context_holder> holder_;  // first member: destroyed last
  const cl_context ctx_;
  const std::string device_name_;
  const bool fp64_;
  ocl::kernel_program program_;  // built on the first kernel submitted

  std::atomic<std::size_t> allocated_{0};  // bytes between allocate and deallocate
  detail::aligned_bases bases_;            // every segment: aligned -> clSVMAlloc's base
};

const ocl::api& api_or_throw() {
  std::string why;
  const ocl::api* a = ocl::load(&why);
  if (a == nullptr) fail(backend_error_kind::unavailable, "not available: " + why, 0);
  return *a;
}

}  // namespace

bool opencl_available() noexcept {
  try {
    const ocl::api* a = ocl::load();
    return a != nullptr && !all_devices(*a).empty();
  } catch (...) {
    return false;
  }
}

int opencl_device_count() {
  const ocl::api* a = ocl::load();
  if (a == nullptr) return 0;
  return static_cast<int>(all_devices(*a).size());
}

std::shared_ptr<backend> make_opencl_backend(int ordinal) {
  const ocl::api& a = api_or_throw();
  const std::vector<cl_device_id> devices = all_devices(a);
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devices.size()) {
    fail(backend_error_kind::no_device,
         detail::format("no device %d (%zu devices)", ordinal, devices.size()), CL_INVALID_DEVICE);
  }
  const cl_device_id dev = devices[static_cast<std::size_t>(ordinal)];
  ocl::device_traits traits;
  traits.id = dev;
  traits.name = device_string(a, dev, CL_DEVICE_NAME, "CL_DEVICE_NAME");
  // SVM is OpenCL 2.0; a 1.x device does not know the query (CL_INVALID_VALUE).
  cl_device_svm_capabilities svm = 0;
  const cl_int r = a.get_device_info(dev, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, nullptr);
  if (r != CL_SUCCESS || (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) == 0) {
    fail(backend_error_kind::unavailable,
         detail::format("not available: device %d ('%s', %s) has no coarse-grain buffer SVM "
                        "(clGetDeviceInfo(CL_DEVICE_SVM_CAPABILITIES): %s, capabilities 0x%llx)",
                        ordinal, traits.name.c_str(),
                        device_string(a, dev, CL_DEVICE_VERSION, "CL_DEVICE_VERSION").c_str(),
                        ocl::describe(r).c_str(), static_cast<unsigned long long>(svm)),
         r);
  }
  traits.fp64 =
      device_string(a, dev, CL_DEVICE_EXTENSIONS, "CL_DEVICE_EXTENSIONS").find("cl_khr_fp64") !=
      std::string::npos;
  const auto fp32 = device_info<cl_device_fp_config>(a, dev, CL_DEVICE_SINGLE_FP_CONFIG,
                                                     "CL_DEVICE_SINGLE_FP_CONFIG");
  traits.correctly_rounded_sqrt = (fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  traits.max_work_group_size = device_info<std::size_t>(a, dev, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                                                        "CL_DEVICE_MAX_WORK_GROUP_SIZE");
  const auto total =
      device_info<cl_ulong>(a, dev, CL_DEVICE_GLOBAL_MEM_SIZE, "CL_DEVICE_GLOBAL_MEM_SIZE");
  cl_int cr = CL_SUCCESS;
  cl_context ctx = a.create_context(nullptr, 1, &dev, nullptr, nullptr, &cr);
  check(a, cr, "clCreateContext(device %d '%s')", ordinal, traits.name.c_str());
  std::unique_ptr<context_holder> holder;
  try {
    holder = std::make_unique<context_holder>(a, ctx);
  } catch (...) {
    report_teardown_error(a, a.release_context(ctx), "clReleaseContext");
    throw;
  }
  return std::make_shared<opencl_backend>(a, ordinal, std::move(holder), std::move(traits),
                                          static_cast<std::size_t>(total));
}

std::size_t opencl_allocated_bytes(backend& b) {
  auto* o = dynamic_cast<opencl_backend*>(&b);
  STREAMPOOL_EXPECTS(o != nullptr,
                     "opencl_allocated_bytes: backend '" + b.name() + "' is not an OpenCL backend");
  return o->allocated();
}

}  // namespace streampool
