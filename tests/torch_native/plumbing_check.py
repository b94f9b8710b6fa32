"""CPU-only plumbing check of the native allocator (work in progress, issue 44): installed through
sp_torch_native_install, PyTorch's bindings reach it (name, statistics, clear errors for what is
not built yet). Usage: python plumbing_check.py path/to/libstreampool_torch.so"""
import ctypes
import sys

import torch

lib = ctypes.CDLL(sys.argv[1])
buf = ctypes.create_string_buffer(512)
assert lib.sp_torch_native_install(buf, 512) == 0, buf.value
assert torch._C._cuda_getAllocatorBackend() == "streampool"
assert torch._C._cuda_memoryStats(0)["allocated_bytes"]["all"]["current"] == 0
assert torch._C._accelerator_getDeviceStats(0)["allocated_bytes"]["all"]["current"] == 0
torch._C._cuda_resetPeakMemoryStats(0)
for call in (lambda: torch._C._cuda_memorySnapshot(None),
             lambda: torch._C._cuda_beginAllocateToPool(0, (0, 1))):
    try:
        call()
        raise AssertionError("expected a 'not supported yet' error")
    except RuntimeError as e:
        assert "not supported yet" in str(e), e
print("plumbing ok")
