"""MemPool(use_on_oom=True) with the native allocator, on a GPU (issue 44). Usage, from the source
tree: PYTHONPATH=python python tests/torch_native/gpu_oom.py

A pool made with use_on_oom lends its free blocks to the default pool once the default pool is out
of memory (here: under set_per_process_memory_fraction), as PyTorch's allocator does; it does not
grow for it. Without the flag the same request raises torch.OutOfMemoryError.
"""
import torch

import streampool.torch as st

st.enable(native=True)
assert torch.cuda.get_allocator_backend() == "streampool"
MiB = 1 << 20
total = torch.cuda.get_device_properties(0).total_memory


def empty(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def filled_pool(use_on_oom):
    pool = torch.cuda.MemPool(use_on_oom=use_on_oom)
    with torch.cuda.use_mem_pool(pool):
        held = empty(256 * MiB)
        held.fill_(1)
    address = held.data_ptr()
    del held  # free, and kept by the pool
    return pool, address


plain, _ = filled_pool(False)
lender, lent_address = filled_pool(True)
small = empty(4 * MiB)  # the default pool's first memory, before the fraction
torch.cuda.set_per_process_memory_fraction(64 * MiB / total)
try:
    empty(512 * MiB)  # larger than any free block: the lender cannot help
    raise AssertionError("512 MiB under a 64 MiB fraction succeeded")
except torch.OutOfMemoryError as e:
    print("512 MiB: OutOfMemoryError, as expected:", str(e).splitlines()[0][:100])
x = empty(200 * MiB)
assert x.data_ptr() == lent_address, (hex(x.data_ptr()), hex(lent_address))
print("200 MiB under a 64 MiB fraction: the use_on_oom pool's free block at", hex(lent_address))
x.fill_(2)
torch.cuda.synchronize()
try:
    empty(200 * MiB)
    raise AssertionError("a second 200 MiB succeeded: the lender grew for the default pool")
except torch.OutOfMemoryError:
    print("a second 200 MiB: OutOfMemoryError (the lender lends only free blocks)")
del x
y = empty(200 * MiB)
assert y.data_ptr() == lent_address, "the freed loan is lent again"
del y
del lender  # MemPool's destructor: no more lending
try:
    empty(200 * MiB)
    raise AssertionError("200 MiB succeeded after the lender was dropped")
except torch.OutOfMemoryError:
    print("after the lender is dropped: OutOfMemoryError")
torch.cuda.set_per_process_memory_fraction(1.0)
z = empty(200 * MiB)
del z, small, plain
print("gpu oom ok")
