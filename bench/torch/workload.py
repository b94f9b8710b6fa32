"""One workload under one allocator, in this process (bench/torch/run.py starts one per run).

    python3 bench/torch/workload.py --allocator streampool --workload gpt2 --steps 40 --json out.json

Allocators: native (PyTorch's caching allocator), async (backend:cudaMallocAsync), expandable
(expandable_segments:True), streampool (streampool.torch.enable()), and floor: the cheapest plug-in
(bench/torch/floor_plugin.cpp, exact-size free lists; training only), which measures what PyTorch's
pluggable path costs by itself. Its library: $STREAMPOOL_FLOOR_LIBRARY, else
libstreampool_torch_floor.so beside $STREAMPOOL_LIBRARY.
Workloads (issue 7):
  gpt2      GPT-2 small training: GPT2Config() defaults, random init, batch 8x512, AdamW lr 1e-4,
            bf16 autocast.
  resnet50  ResNet-50 training: torchvision resnet50(weights=None), batch 64x3x224x224, SGD
            momentum 0.9, bf16 autocast; cuDNN deterministic, so losses can be compared bit for bit.
  server    multi-stream inference: 4 worker threads, each with its own stream and its own GPT-2
            (bf16, eval, no_grad); a loader thread on a fifth stream uploads pinned batches and
            calls record_stream for the worker that consumes them. One step = one batch.
  resnet50-graph  resnet50's training step captured whole in one CUDA graph (torch.cuda.graph:
            forward, backward, optimizer; its memory from the graph's private pool) after 3 eager
            warm-up steps on a side stream, then replayed with each batch copied in. Same batches
            and order as resnet50, so its losses can be compared with resnet50's bit for bit.
  gpt2-compile    GPT-2 small greedy generation (fp32, eval, random init) of 32 tokens from a
            4x32 prompt, the model's next-token logits under torch.compile(mode="reduce-overhead",
            dynamic=True): CUDA graph trees record one graph per sequence length in one private
            pool and replay them. One step = one generation; the tokens are compared with eager's
            (the same loop, uncompiled, in the same process).
Writes one JSON object: step times, peak reserved, upstream calls and host waits per step (where
the allocator can say), losses or output tokens.
"""

import argparse
import copy
import faulthandler
import json
import os
import queue
import sys
import threading
import time

from allocators import NAMES  # this folder's: the allocators run.py compares

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", required=True, choices=list(NAMES))
    ap.add_argument("--workload", required=True, choices=["gpt2", "resnet50", "server", "resnet50-graph", "gpt2-compile"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", required=True)
    ap.add_argument("--snapshot", metavar="STEP:FILE",
                    help="streampool: write the plug-in pool's snapshot (docs/memory-picture.md) "
                         "to FILE in training step STEP, after the forward pass (activations live)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="training: after the timed steps, N more under torch.profiler; the JSON "
                         "gains where the step's time goes (device time, runtime calls, top kernels)")
    return ap.parse_args()


ARGS = parse()
# A workload that hangs prints every thread's stack and exits instead of stalling the whole run.
faulthandler.dump_traceback_later(float(os.environ.get("WORKLOAD_TIMEOUT", "300")), exit=True)
if ARGS.allocator == "async":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
elif ARGS.allocator == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402  (after PYTORCH_CUDA_ALLOC_CONF)

# streampool's variants (allocators.py says what each measures).
STREAMPOOL = ARGS.allocator.startswith("streampool")
if ARGS.allocator == "streampool-noipc":
    os.environ["STREAMPOOL_CUDA_IPC"] = "0"
elif ARGS.allocator.startswith("streampool-g"):
    os.environ["STREAMPOOL_CUDA_VM_GRANULARITY"] = str(int(ARGS.allocator[len("streampool-g"):]) << 20)
if STREAMPOOL:
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import streampool.torch  # noqa: E402

    streampool.torch.enable(native=False if ARGS.allocator == "streampool-plugin" else None)
elif ARGS.allocator == "floor":
    if ARGS.workload == "server":
        sys.exit("workload.py: the floor plug-in ignores streams; it is for one-stream training only")
    FLOOR = os.environ.get("STREAMPOOL_FLOOR_LIBRARY") or os.path.join(
        os.path.dirname(os.environ.get("STREAMPOOL_LIBRARY", "")), "libstreampool_torch_floor.so")
    torch.cuda.memory.change_current_allocator(
        torch.cuda.memory.CUDAPluggableAllocator(FLOOR, "floor_malloc", "floor_free"))


class Counters:
    """Upstream calls and host waits, where the allocator reports them."""

    def read(self):
        if STREAMPOOL:
            st = streampool.torch.memory_stats()
            return {"upstream_calls": st["streampool.upstream_calls"],
                    "host_waits": st["streampool.host_waits"],
                    "device_waits": st["streampool.device_waits"]}
        if ARGS.allocator in ("async", "floor"):
            return {}  # neither the cudaMallocAsync backend nor the floor plug-in counts them
        st = torch.cuda.memory_stats()
        if "num_device_alloc" not in st:
            return {}
        return {"upstream_calls": st["num_device_alloc"] + st["num_device_free"]}

    def peak_reserved(self):
        if STREAMPOOL:
            return streampool.torch.memory_stats()["reserved_bytes.all.peak"]
        if ARGS.allocator == "floor":
            return 0  # not counted (it never gives memory back: the most it held is at the end)
        return torch.cuda.max_memory_reserved()


COUNTERS = Counters()


def trace_phase(name):
    """A phase line in the plug-in's trace (STREAMPOOL_TORCH_TRACE), for tools/replay."""
    if STREAMPOOL and os.environ.get("STREAMPOOL_TORCH_TRACE"):
        from streampool import _capi
        _capi.lib.sp_torch_trace_phase(name.encode())


def snapshot_if_asked(step):
    """--snapshot STEP:FILE: the plug-in pool's snapshot JSON, taken mid-step (no synchronize: a
    snapshot reads the pool, not the device)."""
    if not ARGS.snapshot or not STREAMPOOL:
        return
    at, path = ARGS.snapshot.split(":", 1)
    if int(at) == step:
        with open(path, "w", encoding="utf-8") as f:
            f.write(streampool.torch.pool().snapshot_json())


def timed_steps(step_fn, n_warmup, n_steps):
    """Runs warm-up then timed steps; a step ends when the device is done (synchronize)."""
    times, per_step = [], []
    for i in range(n_warmup + n_steps):
        trace_phase(f"step {i} begin")
        before = COUNTERS.read()
        t0, c0 = time.perf_counter(), time.thread_time()
        step_fn(i)
        c1 = time.thread_time()  # the host's own time for the step, before waiting for the device
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        after = COUNTERS.read()
        if i >= n_warmup:
            times.append(dt * 1e3)
            per_step.append({k: after[k] - before[k] for k in after})
            per_step[-1]["cpu_ms"] = (c1 - c0) * 1e3
            per_step[-1]["ended_at"] = time.time()  # wall clock: lines steps up with clock logs
    return times, per_step


def train(opt, batches, loss_of):
    """Timed training steps: bf16 autocast forward (loss_of(batch) on the device), backward, step."""
    losses = []

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(batches[i % len(batches)])
        snapshot_if_asked(i)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())

    times, per_step = timed_steps(step, ARGS.warmup, ARGS.steps)
    extra = {"losses": losses}
    if ARGS.profile > 0:
        extra["profile"] = profiled(step, ARGS.warmup + ARGS.steps, ARGS.profile)
        del losses[ARGS.steps + ARGS.warmup:]  # the profiled steps' losses are not compared
    return times, per_step, extra


def profiled(step_fn, first, n):
    """n more steps under torch.profiler, summarised per step: wall time, device time (kernels,
    copies, sets), the runtime/driver calls by count and host time, and the kernels by device time.
    Where a step's time goes tells a slower device from a host that falls behind."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for i in range(first, first + n):
            step_fn(i)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
    rows = prof.key_averages()
    device = [r for r in rows if r.self_device_time_total > 0 and r.device_type.name == "CUDA"]
    calls = [r for r in rows if r.key.startswith(("cuda", "cu")) and r.count > 0]
    return {
        "steps": n,
        "wall_ms_per_step": wall / n,
        "device_ms_per_step": sum(r.self_device_time_total for r in device) / 1e3 / n,
        "calls": sorted(([r.key, r.count / n, r.cpu_time_total / 1e3 / n] for r in calls),
                        key=lambda c: -c[2])[:20],
        "kernels": sorted(([r.key[:80], r.count / n, r.self_device_time_total / 1e3 / n]
                           for r in device), key=lambda k: -k[2])[:25],
    }


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 50257, (8, 512), generator=g) for _ in range(4)]

    def loss_of(batch):
        x = batch.cuda(non_blocking=True)
        return model(x, labels=x).loss

    return train(opt, batches, loss_of)


def resnet50_setup():
    """ResNet-50, its optimizer and its two batches, made the same way for resnet50 and
    resnet50-graph: their losses are compared bit for bit."""
    import torchvision

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 3, 224, 224, generator=g), torch.randint(0, 1000, (64,), generator=g))
               for _ in range(2)]
    return model, opt, batches


def resnet50():
    import torch.nn.functional as F

    model, opt, batches = resnet50_setup()

    def loss_of(batch):
        x, y = batch[0].cuda(non_blocking=True), batch[1].cuda(non_blocking=True)
        return F.cross_entropy(model(x), y)

    return train(opt, batches, loss_of)


def resnet50_graph():
    import torch.nn.functional as F

    model, opt, batches = resnet50_setup()
    static_x = torch.empty(64, 3, 224, 224, device="cuda")
    static_y = torch.empty(64, dtype=torch.long, device="cuda")
    eager_steps = 3
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    state = {}
    losses = []

    def whole_step():
        # cache_enabled=False: autocast's weight cache would hold tensors from the capture.
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = F.cross_entropy(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    def step(i):
        x, y = batches[i % len(batches)]
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        if i < eager_steps:  # PyTorch's recipe: warm up on a side stream before capturing
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                opt.zero_grad(set_to_none=True)
                loss = whole_step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            if i == eager_steps:
                opt.zero_grad(set_to_none=True)  # the capture allocates the gradients itself
                with torch.cuda.graph(graph):
                    state["loss"] = whole_step()
            graph.replay()
            loss = state["loss"]
        losses.append(loss.item())

    times, per_step = timed_steps(step, max(ARGS.warmup, eager_steps + 1), ARGS.steps)
    return times, per_step, {"losses": losses}


def gpt2_compile():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().eval()

    def next_logits(ids):
        return model(ids).logits[:, -1, :]

    compiled = torch.compile(next_logits, mode="reduce-overhead", dynamic=True)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 50257, (4, 32), generator=g).cuda()
    outputs = []

    def generate(fn):
        ids = prompt
        with torch.no_grad():
            for _ in range(32):
                ids = torch.cat([ids, fn(ids).argmax(-1, keepdim=True)], 1)
        return ids[:, prompt.shape[1]:].tolist()

    def step(_):
        outputs.append(generate(compiled))

    # Warm-up: the first generation warms each length up, the second records its graph.
    times, per_step = timed_steps(step, max(ARGS.warmup, 3), ARGS.steps)
    eager = generate(next_logits)
    return times, per_step, {"tokens": outputs[-1],
                             "graphs_agree": all(o == outputs[0] for o in outputs),
                             "eager_tokens_match": outputs[-1] == eager}


def server():
    from transformers import GPT2Config, GPT2LMHeadModel

    workers = 4
    # The same weights in every copy (tokens depend only on the input): initialised once on the
    # host, copied there (initialising four took most of a run's time), each copy moved on its own.
    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config()).to(torch.bfloat16)
    models = [copy.deepcopy(base).cuda().eval() for _ in range(workers)]
    del base
    streams = [torch.cuda.Stream() for _ in range(workers)]
    loader_stream = torch.cuda.Stream()
    g = torch.Generator().manual_seed(2)
    total = (ARGS.warmup + ARGS.steps) * workers
    inputs = [torch.randint(0, 50257, (8, 256), generator=g).pin_memory() for _ in range(16)]
    tokens = [None] * total
    work = [queue.Queue(maxsize=2) for _ in range(workers)]
    done_times = [0.0] * total
    errors = []
    # Counters when worker 0 starts each step's first batch (a step: one batch per worker), so
    # that a steady state that still calls the driver shows step by step. (Not when the loader
    # queues it: the loader runs up to three steps ahead of the workers.)
    step_counters = []

    def loader():
        try:
            for i in range(total):
                with torch.cuda.stream(loader_stream):
                    x = inputs[i % len(inputs)].to("cuda", non_blocking=True)
                    ready = torch.cuda.Event()
                    ready.record(loader_stream)
                while not errors:  # a failed worker must not leave the loader blocked
                    try:
                        work[i % workers].put((i, x, ready), timeout=1)
                        break
                    except queue.Full:
                        pass
                del x
            for q in work:
                q.put(None, timeout=60)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    def worker(k):
        try:
            s = streams[k]
            with torch.cuda.stream(s), torch.no_grad():
                while True:
                    item = work[k].get()
                    if item is None:
                        return
                    i, x, ready = item
                    if k == 0:  # batch i goes to worker i % workers
                        trace_phase(f"step {i // workers} begin")
                        step_counters.append(COUNTERS.read())
                    s.wait_event(ready)
                    x.record_stream(s)  # x was made on the loader's stream
                    logits = models[k](x).logits
                    tokens[i] = logits[:, -1, :].argmax(-1)
                    del x, logits, item
                    s.synchronize()
                    done_times[i] = time.perf_counter()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    before = {}
    t_start = [0.0]

    def mark_start():
        before.update(COUNTERS.read())
        t_start[0] = time.perf_counter()

    threads = [threading.Thread(target=loader)] + [threading.Thread(target=worker, args=(k,))
                                                   for k in range(workers)]
    # Warm-up batches are the first warmup*workers; the clock starts when they are done.
    watcher_done = threading.Event()

    def watcher():
        warm = ARGS.warmup * workers
        while not all(done_times[:warm]) and not errors:
            time.sleep(0.0005)
        mark_start()
        watcher_done.set()

    w = threading.Thread(target=watcher)
    w.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.join()
    torch.cuda.synchronize()
    elapsed = max(done_times) - t_start[0]
    after = COUNTERS.read()
    if errors:
        raise RuntimeError("; ".join(errors))
    timed = ARGS.steps * workers
    per_step = [{k: (after[k] - before[k]) / timed for k in after}]
    out_tokens = [t.cpu().tolist() for t in tokens]
    step_counters.append(after)
    calls_by_step = [b["upstream_calls"] - a["upstream_calls"]
                     for a, b in zip(step_counters, step_counters[1:]) if "upstream_calls" in a]
    return [elapsed * 1e3 / timed], per_step, {"items_per_s": timed / elapsed, "tokens": out_tokens,
                                               "calls_by_step": calls_by_step}


def main():
    t0 = time.time()
    fn = {"gpt2": gpt2, "resnet50": resnet50, "server": server, "resnet50-graph": resnet50_graph,
          "gpt2-compile": gpt2_compile}[ARGS.workload]
    times, per_step, extra = fn()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    result = {
        "allocator": ARGS.allocator,
        "workload": ARGS.workload,
        "step_ms": times,
        "per_step": per_step,
        "peak_reserved": COUNTERS.peak_reserved(),
        "device_used_at_end": total - free,
        "wall_s": time.time() - t0,
    }
    if STREAMPOOL:
        result["record_stream_hook"] = streampool.torch.record_stream_hook()
        result["path"] = "native" if streampool.torch.native() else "plug-in"
        result["stats"] = streampool.torch.memory_stats()
    result.update(extra)
    with open(ARGS.json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
