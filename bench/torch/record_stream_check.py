"""record_stream under streampool's PyTorch plug-in: the pattern of issue 7 and its variants, many
trials each, counting wrong results. Also checks what a plug-in must get right besides: size-0
tensors, out of memory as a Python exception with the numbers, torch.cuda.empty_cache().

    STREAMPOOL_LIBRARY=build/release/libstreampool.so python3 bench/torch/record_stream_check.py 1000

The control runs the pattern without record_stream: it must go wrong (else the check could not
see the bug it looks for).
"""

import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402

import streampool.torch  # noqa: E402

streampool.torch.enable()
N = 1 << 22
SLEEP = 5_000_000  # cycles: a few milliseconds, far longer than the next allocation takes


def reuse_on(a):
    """Allocates x's size again on the producer stream and overwrites it (the reuse under test),
    then waits for everything."""
    with torch.cuda.stream(a):
        z = torch.full((N,), 7.0, device="cuda")
    torch.cuda.synchronize()
    del z


def pattern(record=True):
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        x = torch.full((N,), 1.0, device="cuda")
    b.wait_stream(a)
    with torch.cuda.stream(b):
        torch.cuda._sleep(SLEEP)
        y = x * 2.0
        if record:
            x.record_stream(b)
    del x
    reuse_on(a)
    return bool((y == 2.0).all())


def recorded_before_use():
    # record_stream before the work that reads x (as data loaders call it), and a large free on
    # the consumer in between: streampool records a marker there, so a point taken at the
    # record_stream call would not cover the read. The free must wait for what b queued until it.
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        x = torch.full((N,), 1.0, device="cuda")
    b.wait_stream(a)
    with torch.cuda.stream(b):
        x.record_stream(b)
        t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        del t
        torch.cuda._sleep(SLEEP)
        y = x * 2.0
    del x
    reuse_on(a)
    return bool((y == 2.0).all())


def several_consumers():
    a = torch.cuda.Stream()
    consumers = [torch.cuda.Stream() for _ in range(3)]
    with torch.cuda.stream(a):
        x = torch.full((N,), 1.0, device="cuda")
    ys = []
    for k, c in enumerate(consumers):
        c.wait_stream(a)
        with torch.cuda.stream(c):
            torch.cuda._sleep(SLEEP * (k + 1))
            ys.append(x * 2.0)
            x.record_stream(c)
    del x
    reuse_on(a)
    return all(bool((y == 2.0).all()) for y in ys)


def freed_on_another_thread():
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        box = [torch.full((N,), 1.0, device="cuda")]
    out = []

    def consumer():
        b.wait_stream(a)
        with torch.cuda.stream(b):
            torch.cuda._sleep(SLEEP)
            out.append(box[0] * 2.0)
            box[0].record_stream(b)
        box.clear()  # the last reference dies here, on this thread

    t = threading.Thread(target=consumer)
    t.start()
    t.join()
    reuse_on(a)
    return bool((out[0] == 2.0).all())


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(f"record_stream hook installed: {streampool.torch.record_stream_hook()}")
    for name, fn, n in [("pattern", pattern, trials), ("recorded before use", recorded_before_use, trials),
                        ("several consumers", several_consumers, trials),
                        ("freed on another thread", freed_on_another_thread, trials),
                        ("control: no record_stream", lambda: pattern(record=False), 20)]:
        wrong = sum(0 if fn() else 1 for _ in range(n))
        print(f"{name}: {wrong} wrong of {n}", flush=True)
    # Size 0, out of memory, empty_cache.
    e = torch.empty(0, device="cuda")
    print(f"size 0: ok ({e.data_ptr() != 0 or e.numel() == 0})")
    try:
        torch.empty(1 << 45, dtype=torch.uint8, device="cuda")
        print("out of memory: NO EXCEPTION")
    except Exception as ex:  # noqa: BLE001
        print(f"out of memory: {type(ex).__name__}: {str(ex)[:300]}")
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.synchronize()
    before = streampool.torch.memory_stats()["reserved_bytes.all.current"]
    torch.cuda.empty_cache()
    after = streampool.torch.memory_stats()["reserved_bytes.all.current"]
    print(f"empty_cache: reserved {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
