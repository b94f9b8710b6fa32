// streampool: the Level Zero backend: making one, and its kernel module (level_zero_backend.hpp).
#include "level_zero_backend.hpp"

#include <string>
#include <vector>

#include "kernel_module.hpp"
#include "spirv.hpp"
#include "streampool/level_zero.hpp"

namespace streampool {
namespace detail::ze {

level_zero_backend::level_zero_backend(const driver& d, int ordinal, device_location loc,
                                       ze_context_handle_t ctx, const device_facts& facts)
    : backend("level_zero",
              backend_caps{/*device_wait=*/true, /*host_accessible=*/false, allocation_granularity,
                           facts.total_memory, facts.vm_granule != 0, facts.vm_granule,
                           backend_kind::level_zero}),
      d_(d),
      errors_(d, loc.drv),
      ordinal_(ordinal),
      drv_(loc.drv),
      dev_(loc.dev),
      ctx_(ctx),
      facts_(facts),
      events_(std::make_unique<event_registry>(d, ctx, loc.drv)) {}

level_zero_backend::~level_zero_backend() {
  // Every stream is gone (each holds the backend), so no command list is left and no work is
  // in flight; markers were released by their tokens.
  events_.reset();
  if (module_ != nullptr) report_teardown(d_.module_destroy(module_), "zeModuleDestroy");
  report_teardown(d_.context_destroy(ctx_), "zeContextDestroy");
}

ze_module_handle_t level_zero_backend::get_module(dtype t) {
  const spirv_module& spirv = facts_.fp64 ? spirv_fp64 : spirv_fp32;
  if (spirv.size == 0) {
    raise_backend_error(backend_error_kind::runtime, "level_zero", 0,
                        "built without SPIR-V kernels (clang-15 or llvm-spirv-15 missing at build "
                        "time, or STREAMPOOL_LEVEL_ZERO_KERNELS=OFF)");
  }
  if (t == dtype::f64 && !facts_.fp64) {
    raise_backend_error(backend_error_kind::runtime, "level_zero", 0,
                        "device " + std::to_string(ordinal_) + " (" + facts_.name +
                            ") has no fp64 support: no f64 kernels");
  }
  std::lock_guard<std::mutex> lk(module_mu_);
  if (module_ != nullptr) return module_;
  const ze_module_handle_t m =
      create_kernel_module(d_, drv_, ctx_, dev_, spirv, facts_.fp64, ordinal_);
  module_ = m;
  return module_;
}

namespace {

const driver& driver_or_throw() {
  std::string why;
  ze_result_t code = ZE_RESULT_SUCCESS;
  const driver* d = load(&why, &code);
  if (d == nullptr) {
    raise_backend_error(backend_error_kind::unavailable, "level_zero", static_cast<long>(code),
                        "not available: " + why);
  }
  return *d;
}

}  // namespace
}  // namespace detail::ze

bool level_zero_available() noexcept {
  try {
    return level_zero_device_count() > 0;
  } catch (...) {
    return false;
  }
}

int level_zero_device_count() {
  const detail::ze::driver* d = detail::ze::load();
  if (d == nullptr) return 0;
  try {
    return static_cast<int>(detail::ze::enumerate(*d).size());
  } catch (const backend_error&) {
    return 0;
  }
}

std::shared_ptr<backend> make_level_zero_backend(int ordinal) {
  namespace ze = detail::ze;
  const ze::driver& d = ze::driver_or_throw();
  const std::vector<ze::device_location> devices = ze::enumerate(d);
  const int count = static_cast<int>(devices.size());
  if (ordinal < 0 || ordinal >= count) {
    detail::raise_backend_error(
        backend_error_kind::no_device, "level_zero",
        static_cast<long>(ZE_RESULT_ERROR_INVALID_ARGUMENT),
        detail::format("no device %d (%d devices over all drivers)", ordinal, count));
  }
  const ze::device_location loc = devices[static_cast<std::size_t>(ordinal)];
  const ze_context_desc_t desc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ze_context_handle_t ctx = nullptr;
  detail::check(ze::driver_errors(d, loc.drv), d.context_create(loc.drv, &desc, &ctx),
                "zeContextCreate(device %d)", ordinal);
  try {
    return std::make_shared<ze::level_zero_backend>(d, ordinal, loc, ctx,
                                                    ze::query_facts(d, loc, ctx, ordinal));
  } catch (...) {
    detail::report_teardown_error(d, d.context_destroy(ctx), "zeContextDestroy");
    throw;
  }
}

}  // namespace streampool
