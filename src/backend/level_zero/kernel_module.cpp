// streampool: the Level Zero backend's kernel module (see kernel_module.hpp).
#include "kernel_module.hpp"

#include <string>

#include "check.hpp"

namespace streampool::detail::ze {

ze_module_handle_t create_kernel_module(const driver& d, ze_driver_handle_t drv,
                                        ze_context_handle_t ctx, ze_device_handle_t dev,
                                        const spirv_module& spirv, bool fp64, int ordinal) {
  // No build flags: the two modules differ in their SPIR-V (compiled with and without SP_FP64),
  // and a driver may ignore or reject a -D for SPIR-V input.
  const ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                              nullptr,
                              ZE_MODULE_FORMAT_IL_SPIRV,
                              spirv.size,
                              spirv.data,
                              "",
                              nullptr};
  ze_module_handle_t m = nullptr;
  ze_module_build_log_handle_t log = nullptr;
  const ze_result_t r = d.module_create(ctx, dev, &desc, &m, &log);
  std::string text;
  if (log != nullptr) {
    std::size_t size = 0;
    if (d.module_build_log_get_string(log, &size, nullptr) == ZE_RESULT_SUCCESS && size > 0) {
      text.resize(size);
      if (d.module_build_log_get_string(log, &size, text.data()) != ZE_RESULT_SUCCESS) text.clear();
      while (!text.empty() && text.back() == '\0') text.pop_back();
    }
    report_teardown_error(d, d.module_build_log_destroy(log), "zeModuleBuildLogDestroy");
  }
  if (r != ZE_RESULT_SUCCESS) {
    if (m != nullptr) report_teardown_error(d, d.module_destroy(m), "zeModuleDestroy");
    check(driver_errors(d, drv), r, "zeModuleCreate(%zu bytes of SPIR-V%s) on device %d%s%s",
          spirv.size, fp64 ? ", with fp64" : "", ordinal, text.empty() ? "" : "; build log:\n",
          text.c_str());
  }
  return m;
}

}  // namespace streampool::detail::ze
