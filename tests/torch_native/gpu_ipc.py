"""Sharing CUDA tensors between processes on the native allocator (issue 44), on a GPU machine,
from the source tree: PYTHONPATH=python python tests/torch_native/gpu_ipc.py

A child process (torch.multiprocessing, spawn) receives a 4 KiB tensor (the small path) and a
256 MiB one (the large path), checks their values, writes into them, and drops them. The parent
sees the child's writes; once the child has dropped them and the parent too, PyTorch's IPC
reference counting lets the blocks go back to the pool, and the next allocations of those sizes
reuse them without growing the pool.

    gpu_ipc.py [SENDER [RECEIVER]]: each streampool (the default) or native (PyTorch's own
    allocator), so that a tensor also travels between a process on streampool and one on PyTorch's
    allocator in either direction (both read the same handle format)."""
import os
import sys

import torch
import torch.multiprocessing as mp


def use(allocator):
    if allocator == "streampool":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python"))
        import streampool.torch as st

        st.enable(native=True)
    assert torch.cuda.get_allocator_backend() == allocator, torch.cuda.get_allocator_backend()


def child(allocator, q_in, q_out):
    use(allocator)
    tensors = q_in.get()
    report = []
    for t in tensors:
        report.append((t.numel(), float(t[0]), float(t[-1]), float(t.sum())))
        t.add_(1)  # seen by the parent: the same memory
    torch.cuda.synchronize()
    del t, tensors
    q_out.put(report)
    q_in.get()  # the parent's "done": keep the process until then


def main(sender, receiver):
    use(sender)
    small = torch.arange(1024, dtype=torch.float32, device="cuda")              # 4 KiB
    large = torch.full((64 << 20,), 2.0, dtype=torch.float32, device="cuda")   # 256 MiB
    addresses = {small.data_ptr(), large.data_ptr()}
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(receiver, q_in, q_out))
    p.start()
    q_in.put([small, large])
    report = q_out.get(timeout=120)
    print("child read:", report)
    assert report[0] == (1024, 0.0, 1023.0, float(sum(range(1024)))), report[0]
    assert report[1][:3] == (64 << 20, 2.0, 2.0), report[1]
    torch.cuda.synchronize()
    assert float(small[0]) == 1.0 and float(large[0]) == 3.0, "the child's writes"
    q_in.put("done")
    p.join(timeout=60)
    assert p.exitcode == 0, p.exitcode
    reserved = torch.cuda.memory_reserved()
    del small, large
    torch.cuda.ipc_collect()
    again = [torch.empty(1024, device="cuda"), torch.empty(64 << 20, device="cuda")]
    reused = {t.data_ptr() for t in again} & addresses
    print("reused after the child dropped them:", len(reused), "of 2; reserved",
          reserved, "->", torch.cuda.memory_reserved())
    assert torch.cuda.memory_reserved() <= reserved, "the pool grew instead of reusing"
    print(f"gpu ipc ok ({sender} -> {receiver})")


if __name__ == "__main__":
    sender, receiver = (sys.argv[1:] + ["streampool", "streampool"])[:2]
    assert {sender, receiver} <= {"streampool", "native"}, sys.argv
    main(sender, receiver)
