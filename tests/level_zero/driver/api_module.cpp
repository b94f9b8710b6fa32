// Modules, build logs and kernels. The SPIR-V is checked for its magic number, and the module has
// the emulated kernels (kernel_emulator.hpp) whose names it holds as string literals; build flags
// are ignored (a real driver may ignore or reject a -D for SPIR-V input).
#include <algorithm>
#include <cstring>
#include <string>

#include "api.hpp"
#include "module.hpp"

namespace streampool::ze_test_driver::api {
namespace {

constexpr uint32_t spirv_magic = 0x07230203;

struct build_log {
  std::string text;
};

// Copies `text` out by the Level Zero string protocol: *size == 0 (or no buffer) asks for the
// size including the terminating NUL.
ze_result_t copy_string(const std::string& text, size_t* size, char* out) {
  if (*size == 0 || out == nullptr) {
    *size = text.size() + 1;
    return ZE_RESULT_SUCCESS;
  }
  const size_t n = std::min(*size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
  return ZE_RESULT_SUCCESS;
}

}  // namespace

ze_result_t ZE_APICALL module_create(ze_context_handle_t, ze_device_handle_t,
                                     const ze_module_desc_t* desc, ze_module_handle_t* m,
                                     ze_module_build_log_handle_t* log) {
  if (log != nullptr) {
    *log = reinterpret_cast<ze_module_build_log_handle_t>(new build_log);
  }
  if (desc->format != ZE_MODULE_FORMAT_IL_SPIRV) {
    return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // no native binaries here
  }
  uint32_t magic = 0;
  if (desc->pInputModule == nullptr || desc->inputSize < sizeof magic) {
    return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
  }
  std::memcpy(&magic, desc->pInputModule, sizeof magic);
  if (magic != spirv_magic) {
    if (log != nullptr) {
      reinterpret_cast<build_log*>(*log)->text = "not SPIR-V: wrong magic number";
    }
    return ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
  }
  auto* created = new module;
  created->kernels =
      module_kernels(static_cast<const unsigned char*>(desc->pInputModule), desc->inputSize);
  *m = to_handle(created);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL module_destroy(ze_module_handle_t m) {
  delete from_handle(m);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL module_build_log_destroy(ze_module_build_log_handle_t log) {
  delete reinterpret_cast<build_log*>(log);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL module_build_log_get_string(ze_module_build_log_handle_t log, size_t* size,
                                                   char* text) {
  return copy_string(reinterpret_cast<build_log*>(log)->text, size, text);
}

ze_result_t ZE_APICALL kernel_create(ze_module_handle_t m, const ze_kernel_desc_t* desc,
                                     ze_kernel_handle_t* k) {
  const kernel_def* def = desc->pKernelName == nullptr ? nullptr : find_kernel(desc->pKernelName);
  const module* mod = from_handle(m);
  if (def == nullptr || !mod->has(def)) {
    return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;  // not in the module's SPIR-V
  }
  *k = to_handle(new kernel(def, mod->defines_fp64()));
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL kernel_destroy(ze_kernel_handle_t k) {
  delete from_handle(k);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL kernel_set_argument_value(ze_kernel_handle_t k, uint32_t index, size_t size,
                                                 const void* value) {
  return from_handle(k)->set_arg(index, size, value);
}

ze_result_t ZE_APICALL kernel_set_group_size(ze_kernel_handle_t k, uint32_t x, uint32_t y,
                                             uint32_t z) {
  return from_handle(k)->set_group_size(x, y, z);
}

ze_result_t ZE_APICALL kernel_suggest_group_size(ze_kernel_handle_t, uint32_t global_x,
                                                 uint32_t global_y, uint32_t global_z, uint32_t* x,
                                                 uint32_t* y, uint32_t* z) {
  // The largest power of two up to 256 that divides the global size, per dimension (Level Zero
  // has no partial groups, so the suggestion must divide).
  auto pick = [](uint32_t global, uint32_t limit) {
    uint32_t g = 1;
    while (g * 2 <= limit && global % (g * 2) == 0) {
      g *= 2;
    }
    return g;
  };
  *x = pick(global_x, 256);
  *y = pick(global_y, 256 / *x);
  *z = pick(global_z, 256 / (*x * *y));
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL kernel_get_properties(ze_kernel_handle_t k, ze_kernel_properties_t* p) {
  p->numKernelArgs = from_handle(k)->def().num_args;
  p->requiredGroupSizeX = 0;
  p->requiredGroupSizeY = 0;
  p->requiredGroupSizeZ = 0;
  p->requiredNumSubGroups = 0;
  p->requiredSubgroupSize = 0;
  p->maxSubgroupSize = 16;
  p->maxNumSubgroups = 64;
  p->localMemSize = 0;
  p->privateMemSize = 0;
  p->spillMemSize = 0;
  std::memset(&p->uuid, 0, sizeof p->uuid);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL kernel_get_name(ze_kernel_handle_t k, size_t* size, char* name) {
  return copy_string(from_handle(k)->def().name, size, name);
}

}  // namespace streampool::ze_test_driver::api
