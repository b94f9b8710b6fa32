// The Level Zero test driver's own tests: the Level Zero API through the real loader (pointed at
// the driver by ZE_ENABLE_ALT_DRIVERS; CTest sets it, and runs this once more under the loader's
// validation layer). No streampool code is involved: this proves the driver that the Level Zero
// backend's tests stand on.
#include <gtest/gtest.h>
#include <level_zero/ze_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "level_zero/ze_test_driver_hooks.hpp"

namespace {

using streampool::test::ze_test_driver_hooks;

#define ZE_OK(call) ASSERT_EQ(ZE_RESULT_SUCCESS, (call))

// A zeroed Level Zero output structure with its type set.
template <class T>
T described(ze_structure_type_t type) {
  T v{};
  v.stype = type;
  return v;
}

// One zeInit, one driver, device and context for the whole program.
class ze_test_driver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeInit(0));
    uint32_t n = 1;
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeDriverGet(&n, &driver_));
    n = 1;
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeDeviceGet(driver_, &n, &device_));
    ze_context_desc_t desc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeContextCreate(driver_, &desc, &context_));
    hooks_ = ze_test_driver_hooks::find();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeContextDestroy(context_));
    context_ = nullptr;
  }

  void SetUp() override {
    hooks_.reset_violations();
    hooks_.set_capacity(0);
    held_at_start_ = hooks_.bytes_held();
  }
  void TearDown() override {
    hooks_.set_delay_us(0);
    hooks_.set_reorder(0);
    hooks_.set_capacity(0);
    if (expect_clean_) {
      EXPECT_EQ(0u, hooks_.violations(nullptr, 0)) << hooks_.violation_text();
    }
    hooks_.reset_violations();
    EXPECT_EQ(held_at_start_, hooks_.bytes_held()) << "memory leaked by the test";
  }

  static ze_command_list_handle_t make_list() {
    ze_command_queue_desc_t desc{
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 0, 0, 0, ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_command_list_handle_t list = nullptr;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeCommandListCreateImmediate(context_, device_, &desc, &list));
    return list;
  }

  static void* alloc_device(size_t bytes, size_t alignment = 64) {
    ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeMemAllocDevice(context_, &desc, bytes, alignment, device_, &p));
    return p;
  }
  static void* alloc_host(size_t bytes) {
    ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
    void* p = nullptr;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeMemAllocHost(context_, &desc, bytes, 64, &p));
    return p;
  }

  // A pool of `count` host-visible events, created and destroyed with the test.
  struct events {
    explicit events(uint32_t count) : handles(count) {
      ze_event_pool_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                                ZE_EVENT_POOL_FLAG_HOST_VISIBLE, count};
      EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventPoolCreate(context_, &desc, 1, &device_, &pool));
      for (uint32_t i = 0; i < count; ++i) {
        ze_event_desc_t e{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, ZE_EVENT_SCOPE_FLAG_HOST,
                          ZE_EVENT_SCOPE_FLAG_HOST};
        EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventCreate(pool, &e, &handles[i]));
      }
    }
    ~events() {
      for (auto h : handles) {
        if (h != nullptr) {
          EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventDestroy(h));
        }
      }
      EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventPoolDestroy(pool));
    }
    ze_event_handle_t operator[](size_t i) const { return handles[i]; }
    ze_event_pool_handle_t pool = nullptr;
    std::vector<ze_event_handle_t> handles;
  };

  static inline ze_driver_handle_t driver_ = nullptr;
  static inline ze_device_handle_t device_ = nullptr;
  static inline ze_context_handle_t context_ = nullptr;
  static inline ze_test_driver_hooks hooks_{};
  size_t held_at_start_ = 0;
  bool expect_clean_ = true;
};

TEST_F(ze_test_driver, enumerates_one_driver_and_one_device) {
  uint32_t n = 0;
  ZE_OK(zeDriverGet(&n, nullptr));
  EXPECT_EQ(1u, n);
  ze_api_version_t version{};
  ZE_OK(zeDriverGetApiVersion(driver_, &version));
  EXPECT_EQ(ZE_API_VERSION_1_4, version);
  n = 0;
  ZE_OK(zeDeviceGet(driver_, &n, nullptr));
  EXPECT_EQ(1u, n);

  auto props = described<ze_device_properties_t>(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES);
  ZE_OK(zeDeviceGetProperties(device_, &props));
  EXPECT_EQ(ZE_DEVICE_TYPE_GPU, props.type);
  EXPECT_STREQ("streampool host test device", props.name);

  auto module =
      described<ze_device_module_properties_t>(ZE_STRUCTURE_TYPE_DEVICE_MODULE_PROPERTIES);
  ZE_OK(zeDeviceGetModuleProperties(device_, &module));
  EXPECT_NE(0u, module.flags & ZE_DEVICE_MODULE_FLAG_FP64);

  auto compute =
      described<ze_device_compute_properties_t>(ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES);
  ZE_OK(zeDeviceGetComputeProperties(device_, &compute));
  EXPECT_GE(compute.maxTotalGroupSize, 256u);

  n = 0;
  ZE_OK(zeDeviceGetMemoryProperties(device_, &n, nullptr));
  ASSERT_EQ(1u, n);
  auto memory =
      described<ze_device_memory_properties_t>(ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES);
  ZE_OK(zeDeviceGetMemoryProperties(device_, &n, &memory));
  EXPECT_GT(memory.totalSize, 0u);
}

TEST_F(ze_test_driver, what_is_not_emulated_is_unsupported) {
  ze_command_list_desc_t desc{ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, nullptr, 0, 0};
  ze_command_list_handle_t list = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
            zeCommandListCreate(context_, device_, &desc, &list));
  ze_fence_desc_t fence_desc{ZE_STRUCTURE_TYPE_FENCE_DESC, nullptr, 0};
  ze_fence_handle_t fence = nullptr;
  auto queue = reinterpret_cast<ze_command_queue_handle_t>(&fence_desc);  // never dereferenced
  EXPECT_EQ(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, zeFenceCreate(queue, &fence_desc, &fence));
}

TEST_F(ze_test_driver, events_signal_reset_query_and_time_out) {
  events e(1);
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventQueryStatus(e[0]));
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventHostSynchronize(e[0], 0));
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventHostSynchronize(e[0], 1000000));  // 1 ms
  ZE_OK(zeEventHostSignal(e[0]));
  EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventQueryStatus(e[0]));
  EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventHostSynchronize(e[0], 0));
  EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventHostSynchronize(e[0], UINT64_MAX));
  ZE_OK(zeEventHostReset(e[0]));
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventQueryStatus(e[0]));

  // A host thread blocked forever is released by a signal from elsewhere, and not before: the
  // waiter has started, and a timed wait here sees the event unsignalled with the waiter still
  // in its wait, before the signal.
  std::atomic<bool> started{false};
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    started = true;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeEventHostSynchronize(e[0], UINT64_MAX));
    returned = true;
  });
  while (!started) std::this_thread::yield();
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventHostSynchronize(e[0], 1000000));  // 1 ms
  EXPECT_FALSE(returned);
  ZE_OK(zeEventHostSignal(e[0]));
  waiter.join();
  EXPECT_TRUE(returned);
}

TEST_F(ze_test_driver, allocations_are_aligned_typed_and_counted) {
  const size_t before = hooks_.bytes_held();
  void* dev = alloc_device(3 << 20, 64 << 10);
  void* big = alloc_device(1 << 20, 2 << 20);
  void* host = alloc_host(4096);
  ASSERT_NE(nullptr, dev);
  ASSERT_NE(nullptr, big);
  ASSERT_NE(nullptr, host);
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(dev) % (64 << 10));
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(big) % (2 << 20));
  EXPECT_EQ(before + (3 << 20) + (1 << 20) + 4096, hooks_.bytes_held());

  auto props =
      described<ze_memory_allocation_properties_t>(ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES);
  ZE_OK(zeMemGetAllocProperties(context_, static_cast<char*>(dev) + 100, &props, nullptr));
  EXPECT_EQ(ZE_MEMORY_TYPE_DEVICE, props.type);
  ZE_OK(zeMemGetAllocProperties(context_, host, &props, nullptr));
  EXPECT_EQ(ZE_MEMORY_TYPE_HOST, props.type);
  int on_stack = 0;
  ZE_OK(zeMemGetAllocProperties(context_, &on_stack, &props, nullptr));
  EXPECT_EQ(ZE_MEMORY_TYPE_UNKNOWN, props.type);

  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* bad = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT,
            zeMemAllocDevice(context_, &desc, 4096, 3000, device_, &bad));

  ZE_OK(zeMemFree(context_, dev));
  ZE_OK(zeMemFree(context_, big));
  ZE_OK(zeMemFree(context_, host));
  EXPECT_EQ(before, hooks_.bytes_held());
}

TEST_F(ze_test_driver, capacity_gives_out_of_device_memory) {
  hooks_.set_capacity(hooks_.bytes_held() + (4 << 20));
  void* a = alloc_device(3 << 20);
  ASSERT_NE(nullptr, a);
  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* b = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
            zeMemAllocDevice(context_, &desc, 2 << 20, 64, device_, &b));
  ze_physical_mem_desc_t pdesc{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, 2 << 20};
  ze_physical_mem_handle_t phys = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
            zePhysicalMemCreate(context_, device_, &pdesc, &phys));
  ZE_OK(zeMemFree(context_, a));
  ZE_OK(zeMemAllocDevice(context_, &desc, 2 << 20, 64, device_, &b));  // fits again
  ZE_OK(zeMemFree(context_, b));
}

TEST_F(ze_test_driver, copy_and_fill_across_two_lists_ordered_by_events) {
  hooks_.set_delay_us(300);  // lists really overlap unless the events order them
  constexpr size_t n = 1 << 16;
  auto* a = static_cast<uint32_t*>(alloc_device(n * 4));
  auto* b = static_cast<uint32_t*>(alloc_device(n * 4));
  auto* out = static_cast<uint8_t*>(alloc_host(8 * 16));
  std::vector<uint32_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint32_t>(i * 7);
  ze_command_list_handle_t one = make_list();
  ze_command_list_handle_t two = make_list();
  events e(8);

  for (int round = 0; round < 4; ++round) {
    // one: upload, then fill a's first quarter; two: wait, copy a -> b, then b -> host.
    ZE_OK(zeCommandListAppendMemoryCopy(one, a, host.data(), n * 4, nullptr, 0, nullptr));
    const uint32_t pattern = 0xabcd0000u + static_cast<uint32_t>(round);
    ZE_OK(zeCommandListAppendMemoryFill(one, a, &pattern, 4, n, e[0], 0, nullptr));
    ze_event_handle_t wait = e[0];
    ZE_OK(zeCommandListAppendMemoryCopy(two, b, a, n * 4, nullptr, 1, &wait));
    std::vector<uint32_t> back(n);
    ZE_OK(zeCommandListAppendMemoryCopy(two, back.data(), b, n * 4, e[1], 0, nullptr));
    ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(i < n / 4 ? pattern : host[i], back[i]) << "round " << round << " at " << i;
    }
    // Both lists are past their waits on e[0] (e[1] came after them): resetting is safe.
    ZE_OK(zeEventHostReset(e[0]));
    ZE_OK(zeEventHostReset(e[1]));
  }

  // Fill patterns of 1, 2, 4 and 8 bytes.
  const uint64_t pattern = 0x1122334455667788ull;
  for (size_t size : {1u, 2u, 4u, 8u}) {
    ZE_OK(zeCommandListAppendMemoryFill(one, out, &pattern, size, 16 * size, nullptr, 0, nullptr));
    ZE_OK(zeCommandListAppendBarrier(one, e[2], 0, nullptr));
    ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));
    ZE_OK(zeEventHostReset(e[2]));
    for (size_t i = 0; i < 16 * size; ++i) {
      ASSERT_EQ(reinterpret_cast<const uint8_t*>(&pattern)[i % size], out[i])
          << "pattern size " << size << " byte " << i;
    }
  }

  ZE_OK(zeCommandListDestroy(one));
  ZE_OK(zeCommandListDestroy(two));
  ZE_OK(zeMemFree(context_, a));
  ZE_OK(zeMemFree(context_, b));
  ZE_OK(zeMemFree(context_, out));
}

TEST_F(ze_test_driver, barrier_wait_on_events_signal_and_reset_commands) {
  events e(4);
  ze_command_list_handle_t one = make_list();
  ze_command_list_handle_t two = make_list();
  ze_command_list_handle_t three = make_list();
  auto* cell = static_cast<int*>(alloc_host(sizeof(int)));
  *cell = 0;
  const int seven = 7;

  // two waits (WaitOnEvents) for e0, then writes and signals e1; one's barrier waits for e1 and
  // signals e2; three signals e0 (SignalEvent) last, which releases them all.
  ze_event_handle_t e0 = e[0];
  ze_event_handle_t e1 = e[1];
  ZE_OK(zeCommandListAppendWaitOnEvents(two, 1, &e0));
  ZE_OK(zeCommandListAppendMemoryCopy(two, cell, &seven, sizeof seven, e[1], 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(one, e[2], 1, &e1));
  // Nothing signalled e0 yet: a timed wait for e2 (which returns as soon as e2 is signalled, so
  // a list that ran past its wait fails it at once) times out.
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventHostSynchronize(e[2], 2000000));  // 2 ms
  EXPECT_EQ(0, *cell);
  ZE_OK(zeCommandListAppendSignalEvent(three, e[0]));
  ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));
  EXPECT_EQ(7, *cell);

  // A reset command clears an event once everything before it on its list has run (one is past
  // its wait on e1: its barrier signalled e2).
  ZE_OK(zeCommandListAppendEventReset(one, e[1]));
  ZE_OK(zeCommandListAppendSignalEvent(one, e[3]));
  ZE_OK(zeEventHostSynchronize(e[3], UINT64_MAX));
  EXPECT_EQ(ZE_RESULT_NOT_READY, zeEventQueryStatus(e[1]));

  ZE_OK(zeCommandListDestroy(one));
  ZE_OK(zeCommandListDestroy(two));
  ZE_OK(zeCommandListDestroy(three));
  ZE_OK(zeMemFree(context_, cell));
}

// Reorder mode (SP_ZE_TEST_DRIVER_REORDER, the set_reorder hook): two commands of one list that
// nothing orders run in reverse; a barrier between them keeps their order; without the mode
// they run in append order. The worker is held at a wait on a gate event until both copies are
// queued, so it takes them together.
TEST_F(ze_test_driver, reorder_mode_reverses_commands_that_nothing_orders) {
  struct variant {
    bool reorder;
    bool barrier;
    int expected;  // the value of the copy that ran last
  };
  const int first = 1;
  const int second = 2;
  auto* cell = static_cast<int*>(alloc_host(sizeof(int)));
  for (const variant v :
       {variant{true, false, first}, variant{true, true, second}, variant{false, false, second}}) {
    hooks_.set_reorder(v.reorder ? 1 : 0);
    events e(2);
    ze_event_handle_t gate = e[0];
    *cell = 0;
    ze_command_list_handle_t list = make_list();
    ZE_OK(zeCommandListAppendWaitOnEvents(list, 1, &gate));
    ZE_OK(zeCommandListAppendMemoryCopy(list, cell, &first, sizeof first, nullptr, 0, nullptr));
    if (v.barrier) {
      ZE_OK(zeCommandListAppendBarrier(list, nullptr, 0, nullptr));
    }
    ZE_OK(zeCommandListAppendMemoryCopy(list, cell, &second, sizeof second, nullptr, 0, nullptr));
    ZE_OK(zeCommandListAppendBarrier(list, e[1], 0, nullptr));
    ZE_OK(zeEventHostSignal(gate));
    ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
    EXPECT_EQ(v.expected, *cell) << "reorder " << v.reorder << ", barrier " << v.barrier;
    ZE_OK(zeCommandListDestroy(list));
  }
  ZE_OK(zeMemFree(context_, cell));
}

TEST_F(ze_test_driver, virtual_memory_reserve_map_unmap) {
  size_t page = 0;
  ZE_OK(zeVirtualMemQueryPageSize(context_, device_, 2 << 20, &page));
  EXPECT_EQ(size_t{2} << 20, page);
  ZE_OK(zeVirtualMemQueryPageSize(context_, device_, 64 << 10, &page));
  EXPECT_EQ(size_t{64} << 10, page);

  constexpr size_t granule = 2 << 20;
  // A start hint: spec 1.4 (and the 1.8 validation layer) reject a null pStart, although the
  // text says null lets the implementation choose. The driver ignores hints.
  void* range = nullptr;
  const void* hint = reinterpret_cast<const void*>(uintptr_t{1} << 40);
  ZE_OK(zeVirtualMemReserve(context_, hint, 4 * granule, &range));
  ASSERT_NE(nullptr, range);
  EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(range) % granule);

  const size_t before = hooks_.bytes_held();
  ze_physical_mem_desc_t pdesc{ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, nullptr, 0, granule};
  std::array<ze_physical_mem_handle_t, 2> phys{};
  for (auto& h : phys) ZE_OK(zePhysicalMemCreate(context_, device_, &pdesc, &h));
  EXPECT_EQ(before + 2 * granule, hooks_.bytes_held());

  auto* base = static_cast<char*>(range);
  ZE_OK(zeVirtualMemMap(context_, base + granule, granule, phys[0], 0,
                        ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  ZE_OK(zeVirtualMemMap(context_, base + 2 * granule, granule, phys[1], 0,
                        ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_ARGUMENT,  // already mapped
            zeVirtualMemMap(context_, base + granule, granule, phys[1], 0,
                            ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  std::memset(base + granule, 0x5a, 2 * granule);  // both granules, contiguous
  EXPECT_EQ(0x5a, base[2 * granule + 123]);

  // A list copies within the mapped window.
  ze_command_list_handle_t list = make_list();
  events e(1);
  ZE_OK(zeCommandListAppendMemoryCopy(list, base + granule, base + 2 * granule + 1, 10, e[0], 0,
                                      nullptr));
  ZE_OK(zeEventHostSynchronize(e[0], UINT64_MAX));
  ZE_OK(zeCommandListDestroy(list));

  ZE_OK(zeVirtualMemUnmap(context_, base + granule, 2 * granule));  // two mappings at once
  ZE_OK(zeVirtualMemMap(context_, base, granule, phys[1], 0, ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE));
  base[5] = 1;  // remapped elsewhere, writable
  ZE_OK(zeVirtualMemUnmap(context_, base, granule));
  for (auto h : phys) ZE_OK(zePhysicalMemDestroy(context_, h));
  ZE_OK(zeVirtualMemFree(context_, range, 4 * granule));
  EXPECT_EQ(before, hooks_.bytes_held());
}

TEST_F(ze_test_driver, event_reuse_detector_reports_a_reset_under_a_pending_wait) {
  expect_clean_ = false;
  events e(2);
  ze_command_list_handle_t waiter = make_list();
  ze_event_handle_t e0 = e[0];

  // Wrong: the list still waits for e0 when the host resets it.
  ZE_OK(zeCommandListAppendBarrier(waiter, e[1], 1, &e0));
  ZE_OK(zeEventHostReset(e[0]));
  ASSERT_EQ(1u, hooks_.violations(nullptr, 0)) << hooks_.violation_text();
  const std::string text = hooks_.violation_text();
  EXPECT_NE(std::string::npos, text.find("reset by zeEventHostReset")) << text;
  EXPECT_NE(std::string::npos, text.find("index 0")) << text;
  EXPECT_NE(std::string::npos, text.find("command list #")) << text;
  ZE_OK(zeEventHostSignal(e[0]));  // let the list go
  ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
  hooks_.reset_violations();

  // Right: the same events, reset only once the waiter is past its wait (e1 follows the wait).
  ZE_OK(zeEventHostReset(e[0]));
  ZE_OK(zeEventHostReset(e[1]));
  ZE_OK(zeCommandListAppendBarrier(waiter, e[1], 1, &e0));
  ZE_OK(zeEventHostSignal(e[0]));
  ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
  ZE_OK(zeEventHostReset(e[0]));
  ZE_OK(zeEventHostReset(e[1]));
  EXPECT_EQ(0u, hooks_.violations(nullptr, 0)) << hooks_.violation_text();
  ZE_OK(zeCommandListDestroy(waiter));
}

TEST_F(ze_test_driver, event_reuse_detector_can_abort) {
  // What SP_ZE_TEST_DRIVER_ABORT_ON_VIOLATION=1 does, for programs that never ask the hooks.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        hooks_.set_abort_on_violation(1);
        events e(1);
        ze_command_list_handle_t waiter = make_list();
        ze_event_handle_t e0 = e[0];
        (void)zeCommandListAppendWaitOnEvents(waiter, 1, &e0);
        (void)zeEventHostReset(e[0]);
      },
      "EVENT REUSE VIOLATION: event .* reset by zeEventHostReset while command list");
}

TEST_F(ze_test_driver, event_reuse_detector_reports_command_reset_resignal_and_destroy) {
  expect_clean_ = false;
  events e(4);
  ze_command_list_handle_t waiter = make_list();
  ze_command_list_handle_t other = make_list();
  ze_event_handle_t e0 = e[0];

  // A reset command on another list while `waiter` waits for e0.
  ZE_OK(zeCommandListAppendBarrier(waiter, e[1], 1, &e0));
  ZE_OK(zeCommandListAppendEventReset(other, e[0]));
  ZE_OK(zeCommandListAppendSignalEvent(other, e[2]));
  ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));
  EXPECT_EQ(1u, hooks_.violations(nullptr, 0)) << hooks_.violation_text();
  EXPECT_NE(std::string::npos, hooks_.violation_text().find("zeCommandListAppendEventReset"));
  hooks_.reset_violations();
  ZE_OK(zeEventHostReset(e[2]));  // `other` is past it (it signalled e2 last)

  // Signalled twice without a reset while the wait is pending: the first signal may release it,
  // the second belongs to a new use. (Signal from the host twice before the list runs its wait.)
  ze_event_handle_t e3 = e[3];
  ZE_OK(zeCommandListAppendWaitOnEvents(other, 1, &e3));  // hold `other`
  ZE_OK(zeCommandListAppendSignalEvent(other, e[0]));
  ZE_OK(zeCommandListAppendSignalEvent(other, e[0]));
  ZE_OK(zeEventHostSignal(e[3]));
  ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
  ZE_OK(zeCommandListAppendSignalEvent(other, e[2]));
  ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));
  // Whether `waiter` passed before the second signal is a race; at most one report.
  EXPECT_LE(hooks_.violations(nullptr, 0), 1u) << hooks_.violation_text();
  hooks_.reset_violations();

  // Destroyed while waited on: reported, and the waiter is released instead of hanging.
  ZE_OK(zeEventHostReset(e[1]));
  ZE_OK(zeEventHostReset(e[2]));
  ze_event_handle_t e2 = e[2];
  ZE_OK(zeCommandListAppendBarrier(waiter, e[1], 1, &e2));
  ZE_OK(zeEventDestroy(e[2]));
  e.handles[2] = nullptr;
  ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
  EXPECT_EQ(1u, hooks_.violations(nullptr, 0)) << hooks_.violation_text();
  EXPECT_NE(std::string::npos, hooks_.violation_text().find("destroyed"));

  ZE_OK(zeCommandListDestroy(waiter));
  ZE_OK(zeCommandListDestroy(other));
}

TEST_F(ze_test_driver, lists_are_unordered_without_events_and_own_resets_do_not_count) {
  events e(4);
  ze_command_list_handle_t one = make_list();
  ze_command_list_handle_t two = make_list();
  auto* a = static_cast<uint32_t*>(alloc_device(1024 * 4));
  auto* b = static_cast<uint32_t*>(alloc_device(1024 * 4));
  std::memset(a, 0, 1024 * 4);
  std::memset(b, 0, 1024 * 4);

  // one is held by a gate; two copies a -> b without waiting for one's fill: it sees the old a.
  ze_event_handle_t gate = e[0];
  const uint32_t ones = 0x01010101u;
  ZE_OK(zeCommandListAppendMemoryFill(one, a, &ones, 4, 1024 * 4, e[1], 1, &gate));
  ZE_OK(zeCommandListAppendMemoryCopy(two, b, a, 1024 * 4, e[2], 0, nullptr));
  ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));
  EXPECT_EQ(0u, b[0]);
  ZE_OK(zeEventHostSignal(e[0]));
  ZE_OK(zeEventHostSynchronize(e[1], UINT64_MAX));
  EXPECT_EQ(ones, a[1023]);

  // A list resetting an event and then waiting on it (for another list's signal) is no reuse:
  // its own reset runs before it reaches the wait. (two resets e3, then lets one signal it.)
  ZE_OK(zeEventHostReset(e[0]));  // one is past the gate: e1 came after it
  ZE_OK(zeEventHostReset(e[2]));
  ze_event_handle_t e3 = e[3];
  ZE_OK(zeCommandListAppendEventReset(two, e[3]));
  ZE_OK(zeCommandListAppendSignalEvent(two, e[0]));
  ZE_OK(zeCommandListAppendWaitOnEvents(two, 1, &e3));
  ZE_OK(zeCommandListAppendSignalEvent(two, e[2]));
  ZE_OK(zeCommandListAppendWaitOnEvents(one, 1, &gate));
  ZE_OK(zeCommandListAppendSignalEvent(one, e[3]));
  ZE_OK(zeEventHostSynchronize(e[2], UINT64_MAX));

  ZE_OK(zeCommandListDestroy(one));
  ZE_OK(zeCommandListDestroy(two));
  ZE_OK(zeMemFree(context_, a));
  ZE_OK(zeMemFree(context_, b));
}

TEST_F(ze_test_driver, many_threads_append_to_shared_and_own_lists) {
  hooks_.set_delay_us(20);
  constexpr int threads = 4;
  constexpr int per_thread = 50;
  ze_command_list_handle_t shared = make_list();
  auto* cells = static_cast<uint32_t*>(alloc_device(threads * per_thread * 4));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ze_command_list_handle_t own = make_list();
      for (int i = 0; i < per_thread; ++i) {
        const uint32_t v = static_cast<uint32_t>(t * 1000 + i);
        const size_t slot = static_cast<size_t>(t * per_thread + i);
        EXPECT_EQ(ZE_RESULT_SUCCESS,
                  zeCommandListAppendMemoryFill(i % 2 ? own : shared, cells + slot, &v, 4, 4,
                                                nullptr, 0, nullptr));
      }
      EXPECT_EQ(ZE_RESULT_SUCCESS, zeCommandListDestroy(own));  // drains before it returns
    });
  }
  for (auto& th : pool) th.join();
  ZE_OK(zeCommandListDestroy(shared));
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i) {
      EXPECT_EQ(static_cast<uint32_t>(t * 1000 + i), cells[t * per_thread + i]);
    }
  }
  ZE_OK(zeMemFree(context_, cells));
}

// A stand-in SPIR-V module: the header, then each name as a word-aligned, NUL-padded string
// literal, as OpEntryPoint holds it. The driver checks the magic number and finds the kernels
// the module has by these names.
std::vector<unsigned char> fake_spirv(const std::vector<std::string>& names) {
  const std::array<uint32_t, 5> header = {0x07230203u, 0x00010200u, 0, 1, 0};
  std::vector<unsigned char> bytes(sizeof header);
  std::memcpy(bytes.data(), header.data(), sizeof header);
  for (const std::string& name : names) {
    bytes.insert(bytes.end(), name.begin(), name.end());
    bytes.resize((bytes.size() / 4 + 1) * 4, 0);  // the NUL, and padding to a word
  }
  return bytes;
}

// Every kernel of kernels.cl, with the f64 ones or without (as built with or without SP_FP64).
std::vector<std::string> kernel_names(bool fp64) {
  std::vector<std::string> names;
  for (const char* type : {"f32", "f64", "i32", "i64", "u32", "u64"}) {
    if (!fp64 && std::string(type) == "f64") continue;
    for (const char* k :
         {"sp_map_unary_", "sp_map_binary_", "sp_reduce_", "sp_scan_tiles_", "sp_scan_add_"})
      names.push_back(std::string(k) + type);
  }
  return names;
}

class ze_test_driver_kernels : public ze_test_driver {
 protected:
  void SetUp() override {
    ze_test_driver::SetUp();
    module_ = build(kernel_names(/*fp64=*/true));
    list_ = make_list();
  }
  void TearDown() override {
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeCommandListDestroy(list_));
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeModuleDestroy(module_));
    ze_test_driver::TearDown();
  }

  static ze_module_handle_t build(const std::vector<std::string>& names) {
    const std::vector<unsigned char> spirv = fake_spirv(names);
    ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                          nullptr,
                          ZE_MODULE_FORMAT_IL_SPIRV,
                          spirv.size(),
                          spirv.data(),
                          "",
                          nullptr};
    ze_module_handle_t m = nullptr;
    ze_module_build_log_handle_t log = nullptr;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeModuleCreate(context_, device_, &desc, &m, &log));
    size_t size = 0;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeModuleBuildLogGetString(log, &size, nullptr));
    EXPECT_GE(size, 1u);
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeModuleBuildLogDestroy(log));
    return m;
  }

  ze_kernel_handle_t kernel(const char* name) {
    ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
    ze_kernel_handle_t k = nullptr;
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeKernelCreate(module_, &desc, &k)) << name;
    return k;
  }

  template <class T>
  static void arg(ze_kernel_handle_t k, uint32_t i, const T& v) {
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeKernelSetArgumentValue(k, i, sizeof v, &v)) << "argument " << i;
  }
  static void local_arg(ze_kernel_handle_t k, uint32_t i, size_t bytes) {
    EXPECT_EQ(ZE_RESULT_SUCCESS, zeKernelSetArgumentValue(k, i, bytes, nullptr));
  }

  // Launches G groups of L and waits for them.
  void launch(ze_kernel_handle_t k, uint32_t groups, uint32_t group_size) {
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeKernelSetGroupSize(k, group_size, 1, 1));
    ze_group_count_t count{groups, 1, 1};
    events e(1);
    ASSERT_EQ(ZE_RESULT_SUCCESS,
              zeCommandListAppendLaunchKernel(list_, k, &count, e[0], 0, nullptr));
    ASSERT_EQ(ZE_RESULT_SUCCESS, zeEventHostSynchronize(e[0], UINT64_MAX));
  }

  template <class T>
  T* device_array(size_t n) {
    return static_cast<T*>(alloc_device(n * sizeof(T) + 8));
  }

  ze_module_handle_t module_ = nullptr;
  ze_command_list_handle_t list_ = nullptr;
};

// streampool::op values, as kernels.cl takes them.
constexpr uint32_t op_sqrt = 3;
constexpr uint32_t op_add = 5;
constexpr uint32_t op_mul = 7;
constexpr uint32_t op_max = 10;
constexpr uint32_t op_axpy = 11;

TEST_F(ze_test_driver_kernels, modules_check_the_magic_and_kernels_their_names) {
  const uint32_t not_spirv[2] = {0xdeadbeef, 0};
  ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                        nullptr,
                        ZE_MODULE_FORMAT_IL_SPIRV,
                        sizeof not_spirv,
                        reinterpret_cast<const uint8_t*>(not_spirv),
                        nullptr,
                        nullptr};
  ze_module_handle_t m = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY,
            zeModuleCreate(context_, device_, &desc, &m, nullptr));

  ze_kernel_desc_t unknown{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "sp_no_such_kernel"};
  ze_kernel_handle_t k = nullptr;
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, zeKernelCreate(module_, &unknown, &k));

  // A module has the kernels its SPIR-V names: built without SP_FP64, kernels.cl has no f64
  // kernels; a name must be a whole literal ("sp_map_unary_f3" is not "sp_map_unary_f32").
  ze_module_handle_t no_fp64 = build(kernel_names(/*fp64=*/false));
  ze_kernel_desc_t f64{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "sp_map_unary_f64"};
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, zeKernelCreate(no_fp64, &f64, &k));
  ze_kernel_desc_t f32{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "sp_map_unary_f32"};
  ASSERT_EQ(ZE_RESULT_SUCCESS, zeKernelCreate(no_fp64, &f32, &k));
  ZE_OK(zeKernelDestroy(k));
  ZE_OK(zeModuleDestroy(no_fp64));
  ze_module_handle_t one = build({"sp_reduce_i64"});
  ze_kernel_desc_t reduce_f32{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "sp_reduce_f32"};
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_KERNEL_NAME, zeKernelCreate(one, &reduce_f32, &k));
  ze_kernel_desc_t reduce_i64{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, "sp_reduce_i64"};
  ASSERT_EQ(ZE_RESULT_SUCCESS, zeKernelCreate(one, &reduce_i64, &k));
  ZE_OK(zeKernelDestroy(k));
  ZE_OK(zeModuleDestroy(one));

  k = kernel("sp_reduce_f32");
  auto props = described<ze_kernel_properties_t>(ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES);
  ZE_OK(zeKernelGetProperties(k, &props));
  EXPECT_EQ(5u, props.numKernelArgs);
  const uint32_t wrong_size = 1;  // n is a ulong
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE,
            zeKernelSetArgumentValue(k, 2, sizeof wrong_size, &wrong_size));
  EXPECT_EQ(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX,
            zeKernelSetArgumentValue(k, 5, sizeof wrong_size, &wrong_size));
  uint32_t x = 0, y = 0, z = 0;
  ZE_OK(zeKernelSuggestGroupSize(k, 1000, 1, 1, &x, &y, &z));
  EXPECT_EQ(0u, 1000 % x);
  ZE_OK(zeKernelDestroy(k));
}

TEST_F(ze_test_driver_kernels, map_kernels_compute_and_capture_arguments_at_append) {
  constexpr uint64_t n = 1000;
  auto* in0 = device_array<float>(n);
  auto* in1 = device_array<float>(n);
  auto* out = device_array<float>(n);
  for (uint64_t i = 0; i < n; ++i) {
    in0[i] = static_cast<float>(i);
    in1[i] = 0.5f * static_cast<float>(i);
  }
  ze_kernel_handle_t k = kernel("sp_map_binary_f32");
  arg(k, 0, out);
  arg(k, 1, in0);
  arg(k, 2, in1);
  arg(k, 3, n);
  arg(k, 4, op_axpy);
  arg(k, 5, 2.0f);
  launch(k, 3, 64);  // 192 items: the grid-stride loop covers all 1000
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(2.5f * static_cast<float>(i), out[i]) << i;

  // Arguments are captured at append: changing them afterwards does not change that launch.
  ZE_OK(zeKernelSetGroupSize(k, 64, 1, 1));
  events e(1);
  ze_group_count_t count{4, 1, 1};
  hooks_.set_delay_us(2000);
  arg(k, 4, op_add);
  ZE_OK(zeCommandListAppendLaunchKernel(list_, k, &count, e[0], 0, nullptr));
  arg(k, 4, op_mul);
  ZE_OK(zeEventHostSynchronize(e[0], UINT64_MAX));
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(1.5f * static_cast<float>(i), out[i]) << i;
  ZE_OK(zeKernelDestroy(k));

  // Unary with and without the scalar, in place, f64 and integer sqrt.
  auto* d = device_array<double>(n);
  for (uint64_t i = 0; i < n; ++i) d[i] = static_cast<double>(i * i);
  ze_kernel_handle_t u = kernel("sp_map_unary_f64");
  arg(u, 0, d);
  arg(u, 1, d);
  arg(u, 2, n);
  arg(u, 3, op_sqrt);
  arg(u, 4, uint32_t{0});
  arg(u, 5, 0.0);
  launch(u, 16, 64);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<double>(i), d[i]) << i;
  ZE_OK(zeKernelDestroy(u));

  auto* v = device_array<int64_t>(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i) - 500;
  ze_kernel_handle_t m = kernel("sp_map_unary_i64");
  arg(m, 0, v);
  arg(m, 1, v);
  arg(m, 2, n);
  arg(m, 3, op_max);
  arg(m, 4, uint32_t{1});
  arg(m, 5, int64_t{0});
  launch(m, 2, 256);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(std::max<int64_t>(0, int64_t(i) - 500), v[i]) << i;
  ZE_OK(zeKernelDestroy(m));

  for (void* p : {static_cast<void*>(in0), static_cast<void*>(in1), static_cast<void*>(out),
                  static_cast<void*>(d), static_cast<void*>(v)}) {
    ZE_OK(zeMemFree(context_, p));
  }
}

TEST_F(ze_test_driver_kernels, reduce_in_two_passes) {
  constexpr uint64_t n = 100000;
  constexpr uint32_t L = 64;
  constexpr uint32_t G = 16;
  auto* in = device_array<int64_t>(n);
  auto* partials = device_array<int64_t>(G);
  auto* out = device_array<int64_t>(1);
  for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<int64_t>(i % 1000) - 300;
  const int64_t expected = std::accumulate(in, in + n, int64_t{0});

  ze_kernel_handle_t k = kernel("sp_reduce_i64");
  arg(k, 0, partials);
  arg(k, 1, in);
  arg(k, 2, n);
  arg(k, 3, op_add);
  local_arg(k, 4, L * sizeof(int64_t));
  launch(k, G, L);
  arg(k, 0, out);
  arg(k, 1, partials);
  arg(k, 2, uint64_t{G});
  launch(k, 1, L);
  EXPECT_EQ(expected, out[0]);

  // Local memory smaller than a group's accumulators: reported, not run.
  expect_clean_ = false;
  out[0] = 42;
  local_arg(k, 4, 8);
  launch(k, 1, L);
  EXPECT_EQ(42, out[0]);
  EXPECT_EQ(1u, hooks_.violations(nullptr, 0));
  EXPECT_NE(std::string::npos, hooks_.violation_text().find("kernel launch error"))
      << hooks_.violation_text();

  ZE_OK(zeKernelDestroy(k));
  for (void* p : {static_cast<void*>(in), static_cast<void*>(partials), static_cast<void*>(out)}) {
    ZE_OK(zeMemFree(context_, p));
  }
}

TEST_F(ze_test_driver_kernels, scan_over_tiles_then_add) {
  constexpr uint64_t n = 1000;
  constexpr uint32_t L = 64;
  constexpr uint32_t G = (n + L - 1) / L;  // 16 tiles: their totals fit one tile
  auto* in = device_array<uint32_t>(n);
  auto* out = device_array<uint32_t>(n);
  auto* totals = device_array<uint32_t>(G);
  for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<uint32_t>(i % 7 + 1);

  // Exclusive scan with init 100: tiles, then the totals scanned exclusively (init 0) in place,
  // then added to every tile.
  ze_kernel_handle_t tiles = kernel("sp_scan_tiles_u32");
  arg(tiles, 0, out);
  arg(tiles, 1, in);
  arg(tiles, 2, totals);
  arg(tiles, 3, n);
  arg(tiles, 4, op_add);
  arg(tiles, 5, uint32_t{1});
  arg(tiles, 6, uint32_t{100});
  local_arg(tiles, 7, L * sizeof(uint32_t));
  launch(tiles, G, L);
  arg(tiles, 0, totals);
  arg(tiles, 1, totals);
  arg(tiles, 3, uint64_t{G});
  arg(tiles, 6, uint32_t{0});
  launch(tiles, 1, L);
  ze_kernel_handle_t add = kernel("sp_scan_add_u32");
  arg(add, 0, out);
  arg(add, 1, totals);
  arg(add, 2, n);
  arg(add, 3, op_add);
  launch(add, G, L);

  uint32_t acc = 100;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(acc, out[i]) << i;
    acc += in[i];
  }
  ZE_OK(zeKernelDestroy(tiles));
  ZE_OK(zeKernelDestroy(add));
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), static_cast<void*>(totals)}) {
    ZE_OK(zeMemFree(context_, p));
  }
}

}  // namespace
