// streampool: what the Level Zero backend asks of the loader and the device (see device_query.hpp).
#include "device_query.hpp"

#include <algorithm>

#include "check.hpp"
#include "core/support/environment.hpp"

namespace streampool::detail::ze {

/// Every device of every driver, in the loader's order.
std::vector<device_location> enumerate(const driver& d) {
  const driver_errors loader(d, nullptr);
  std::uint32_t drivers = 0;
  check(loader, d.driver_get(&drivers, nullptr), "zeDriverGet(count)");
  std::vector<ze_driver_handle_t> drvs(drivers);
  check(loader, d.driver_get(&drivers, drvs.data()), "zeDriverGet(%u drivers)", drivers);
  drvs.resize(drivers);
  std::vector<device_location> out;
  for (ze_driver_handle_t drv : drvs) {
    const driver_errors errors(d, drv);
    std::uint32_t n = 0;
    check(errors, d.device_get(drv, &n, nullptr), "zeDeviceGet(count)");
    std::vector<ze_device_handle_t> devs(n);
    check(errors, d.device_get(drv, &n, devs.data()), "zeDeviceGet(%u devices)", n);
    for (std::uint32_t i = 0; i < n; ++i) out.push_back({drv, devs[i]});
  }
  return out;
}

/// What the backend needs to know of the device, asked once.
device_facts query_facts(const driver& d, device_location loc, ze_context_handle_t ctx,
                         int ordinal) {
  const driver_errors errors(d, loc.drv);
  device_facts f;
  ze_device_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  check(errors, d.device_get_properties(loc.dev, &props), "zeDeviceGetProperties(device %d)",
        ordinal);
  f.name = props.name;

  std::uint32_t n = 0;
  check(errors, d.device_get_memory_properties(loc.dev, &n, nullptr),
        "zeDeviceGetMemoryProperties(device %d, count)", ordinal);
  std::vector<ze_device_memory_properties_t> mem(n);
  for (auto& m : mem) m.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
  check(errors, d.device_get_memory_properties(loc.dev, &n, mem.data()),
        "zeDeviceGetMemoryProperties(device %d)", ordinal);
  for (std::uint32_t i = 0; i < n; ++i) f.total_memory += mem[i].totalSize;

  n = 0;
  check(errors, d.device_get_command_queue_group_properties(loc.dev, &n, nullptr),
        "zeDeviceGetCommandQueueGroupProperties(device %d, count)", ordinal);
  std::vector<ze_command_queue_group_properties_t> groups(n);
  for (auto& g : groups) g.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  check(errors, d.device_get_command_queue_group_properties(loc.dev, &n, groups.data()),
        "zeDeviceGetCommandQueueGroupProperties(device %d)", ordinal);
  bool found = false;
  for (std::uint32_t i = 0; i < n && !found; ++i) {
    if ((groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) != 0) {
      f.compute_group = i;
      f.max_fill_pattern = groups[i].maxMemoryFillPatternSize;
      found = true;
    }
  }
  if (!found) {
    raise_backend_error(backend_error_kind::runtime, "level_zero", 0,
                        format("device %d (%s) has no compute queue group (%u groups)", ordinal,
                               f.name.c_str(), n));
  }

  ze_device_module_properties_t mod{};
  mod.stype = ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES;
  check(errors, d.device_get_module_properties(loc.dev, &mod),
        "zeDeviceGetModuleProperties(device %d)", ordinal);
  f.fp64 = (mod.flags & ZE_DEVICE_MODULE_FLAG_FP64) != 0;

  ze_device_memory_access_properties_t access{};
  access.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES;
  check(errors, d.device_get_memory_access_properties(loc.dev, &access),
        "zeDeviceGetMemoryAccessProperties(device %d)", ordinal);
  f.shared_system_memory = access.sharedSystemAllocCapabilities != 0;

  ze_device_compute_properties_t compute{};
  compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
  check(errors, d.device_get_compute_properties(loc.dev, &compute),
        "zeDeviceGetComputeProperties(device %d)", ordinal);
  const std::size_t limit = std::min<std::size_t>(compute.maxTotalGroupSize, compute.maxGroupSizeX);
  while (f.group_size > 2 && f.group_size > limit) f.group_size /= 2;

  // Virtual memory: on unless STREAMPOOL_LEVEL_ZERO_VIRTUAL_MEMORY=0 or the driver cannot say
  // its page size; the granule must be a power of two multiple of the driver's page.
  const std::size_t granule =
      environment::power_of_two_bytes(environment::variable::level_zero_vm_granularity,
                                      default_vm_granularity, allocation_granularity);
  std::size_t page = 0;
  if (environment::flag(environment::variable::level_zero_virtual_memory, true) &&
      d.virtual_mem_query_page_size(ctx, loc.dev, granule, &page) == ZE_RESULT_SUCCESS &&
      page != 0 && (page & (page - 1)) == 0) {
    f.vm_granule = std::max(granule, page);
  }
  return f;
}

}  // namespace streampool::detail::ze
