"""GPU smoke test of the native allocator (issue 44). Usage, on a GPU machine,
from the source tree: PYTHONPATH=python python tests/torch_native/gpu_smoke.py (enable() builds the
native allocator on first use)."""
import os
import pickle
import time

import torch

import streampool.torch as st

t0 = time.time()
st.enable(native=True)
print(f"native allocator installed in {time.time() - t0:.1f} s (built or found in the cache)")
assert torch.cuda.get_allocator_backend() == "streampool"
x = torch.empty(1000, device="cuda")            # 4000 bytes: small
y = torch.empty(4 << 20, device="cuda")         # 16 MiB: large
st = torch.cuda.memory_stats()
assert st["allocation.all.current"] == 2, st
assert st["requested_bytes.all.current"] == 4000 + (16 << 20), st
assert torch.cuda.memory_allocated() >= st["requested_bytes.all.current"]
peak = torch.cuda.max_memory_allocated()
del y
assert torch.cuda.memory_allocated() < peak
torch.cuda.reset_peak_memory_stats()
assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    z = x * 2
x.record_stream(s)
del x
torch.cuda.synchronize()
torch.cuda.empty_cache()
torch.cuda.set_per_process_memory_fraction(0.01)
try:
    torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    raise AssertionError("expected torch.OutOfMemoryError")
except torch.OutOfMemoryError as e:
    assert "streampool" in str(e), e
assert torch.cuda.memory_stats()["num_ooms"] == 1
torch.cuda.set_per_process_memory_fraction(1.0)
m = torch.nn.Linear(512, 512).cuda()
for _ in range(3):
    m(torch.randn(64, 512, device="cuda")).sum().backward()
torch.cuda.synchronize()
# memory._snapshot(): segments that tile, allocated bytes as memory_stats says; summary and viz.
snap = torch.cuda.memory._snapshot()
alloc = 0
for seg in snap["segments"]:
    at = seg["address"]
    for b in seg["blocks"]:
        assert b["address"] == at, (seg["address"], b)
        at += b["size"]
        alloc += b["size"] if b["state"] == "active_allocated" else 0
    assert at == seg["address"] + seg["total_size"], seg
assert alloc == torch.cuda.memory_allocated(), (alloc, torch.cuda.memory_allocated())
print(torch.cuda.memory_summary()[:400])
from torch.cuda import _memory_viz
html = _memory_viz.segment_plot(snap)
assert len(html) > 1000
# STREAMPOOL_VIZ_OUT=DIR keeps the pages (and the snapshots) for check_memory_viz.py, which
# renders them in headless Chromium where it is installed.
viz_out = os.environ.get("STREAMPOOL_VIZ_OUT")
if viz_out:
    os.makedirs(viz_out, exist_ok=True)
    with open(os.path.join(viz_out, "segments.html"), "w", encoding="utf-8") as f:
        f.write(html)
    with open(os.path.join(viz_out, "segments.pickle"), "wb") as f:
        pickle.dump(snap, f)
print(_memory_viz.segsum(snap)[:600])
# _record_memory_history: the trace of a few allocations, drawn by _memory_viz.trace_plot.
torch.cuda.memory._record_memory_history(max_entries=1000)
t = [torch.empty(n, device="cuda") for n in (100, 1 << 20, 7 << 20)]
del t
snap = torch.cuda.memory._snapshot()
actions = [e["action"] for e in snap["device_traces"][torch.cuda.current_device()]]
assert actions.count("alloc") >= 3 and actions.count("free_completed") >= 3, actions
frames = [e for e in snap["device_traces"][torch.cuda.current_device()] if e.get("frames")]
print("history:", len(actions), "entries,", len(frames), "with Python frames")
html = _memory_viz.trace_plot(snap)
assert len(html) > 1000
if viz_out:
    with open(os.path.join(viz_out, "trace.html"), "w", encoding="utf-8") as f:
        f.write(html)
    with open(os.path.join(viz_out, "trace.pickle"), "wb") as f:
        pickle.dump(snap, f)
torch.cuda.memory._record_memory_history(enabled=None)
print("gpu smoke ok", torch.cuda.memory_stats()["allocated_bytes.all.peak"])
