"""CPU-only plumbing check of the native allocator (issue 44) through torch's
Python bindings: installed through sp_torch_native_install, they reach it (name, statistics with
every key PyTorch fills, clear errors for what is not built yet). Needs `import torch` to work
(torch's CUDA libraries installed, no GPU); CI cannot, and runs tests/torch_native/*_test.cpp
instead (docs/torch.md). Usage: python plumbing_check.py path/to/libstreampool_torch.so"""
import ctypes
import sys

import torch

KEYS = {"active", "active_bytes", "allocated_bytes", "allocation", "inactive_split",
        "inactive_split_bytes", "max_split_size", "num_alloc_retries", "num_device_alloc",
        "num_device_free", "num_ooms", "num_sync_all_streams", "oversize_allocations",
        "oversize_segments", "requested_bytes", "reserved_bytes", "segment"}
PER_POOL = {"active", "active_bytes", "allocated_bytes", "allocation", "inactive_split",
            "inactive_split_bytes", "requested_bytes", "reserved_bytes", "segment"}

lib = ctypes.CDLL(sys.argv[1])
buf = ctypes.create_string_buffer(512)
assert lib.sp_torch_native_install(buf, 512) == 0, buf.value
assert lib.sp_torch_native_install(buf, 512) == 0, buf.value  # again: nothing changes
assert torch._C._cuda_getAllocatorBackend() == "streampool"
# Device 1 never allocated: every key PyTorch fills, every number zero.
stats = torch._C._cuda_memoryStats(1)
assert set(stats) == KEYS, sorted(set(stats) ^ KEYS)
for key in PER_POOL:
    for pool in ("all", "small_pool", "large_pool"):
        assert stats[key][pool] == {"current": 0, "peak": 0, "allocated": 0, "freed": 0}, (
            key, pool, stats[key][pool])
for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
    assert stats[key] == 0, (key, stats[key])
assert torch._C._cuda_memoryStats(0)["allocated_bytes"]["all"]["current"] == 0
assert torch._C._accelerator_getDeviceStats(0)["allocated_bytes"]["all"]["current"] == 0
torch._C._cuda_resetPeakMemoryStats(0)
torch._C._cuda_resetAccumulatedMemoryStats(0)
for what, call in (("memory snapshots", lambda: torch._C._cuda_memorySnapshot(None)),
                   ("CUDA graphs", lambda: torch._C._cuda_beginAllocateToPool(0, (0, 1)))):
    try:
        call()
        raise AssertionError(f"{what}: expected a 'not supported yet' error")
    except RuntimeError as e:
        assert "not supported yet" in str(e) and what in str(e), e
print("plumbing ok")
