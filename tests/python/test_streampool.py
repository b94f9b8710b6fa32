"""Tests of the Python binding under CPython's real garbage collector (plain unittest).

Run: STREAMPOOL_LIBRARY=build/release/libstreampool.so PYTHONPATH=python \
     python3 -m unittest discover -s tests/python -v
"""

import array
import gc
import os
import random
import re
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The package in python/, unless the installed one is under test (scripts/run-tests.sh, stage
# python; tests/python/test_install.py).
if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))

import streampool as sp  # noqa: E402

N = 1024  # float32 elements per array, as in the origin report


class Task:
    """Holds a stream and the arrays made on it; the arrays point back: a reference cycle."""


def use_elsewhere(device, pool, n, keep_default_stream):
    """The origin reproducer's task: arrays made, filled and synchronised on the thread's own
    stream, then dropped together with the thread and its stream, all in one reference cycle."""
    def body():
        task = Task()
        task.stream = device.default_stream() if keep_default_stream else sp.Stream(device)
        task.arrays = [sp.Array(N, "f", pool=pool, stream=task.stream) for _ in range(n)]
        for a in task.arrays:
            a.task = task  # cycle: array -> task -> arrays -> array
            a.stream = task.stream
            a.fill(1.0, stream=task.stream)
        task.stream.task = task  # cycle through the stream too
        task.stream.synchronize()
    t = threading.Thread(target=body)
    t.start()
    t.join()


def origin_rounds(test, device, pool, rounds, n):
    """Rounds of use_elsewhere, each followed by uploads that must reuse the dead streams' chunks
    and read back exactly."""
    rng = random.Random(7)
    gc.disable()  # only the explicit collections below finalize: all at once, any order
    try:
        for i in range(rounds):
            use_elsewhere(device, pool, n, keep_default_stream=i % 2 == 0)
            gc.collect()
            # Fresh memory is gone: this reuses chunks last used by the dead streams.
            host = [array.array("f", (rng.random() for _ in range(N))) for _ in range(n)]
            bs = [sp.Array.from_buffer(h, pool=pool) for h in host]
            for b, h in zip(bs, host):
                test.assertEqual(b.download(), h)  # exact read-back
            del bs
    finally:
        gc.enable()


class OriginReproducer(unittest.TestCase):
    def setUp(self):
        gc.collect()
        self.device = sp.Device.host(checking=True, max_delay_us=5)

    def tearDown(self):
        gc.collect()
        self.assertEqual(self.device.violations(), [])

    def test_origin_reproducer(self):
        pool = sp.Pool(self.device, memory_limit=2 << 20)  # 2 MiB: 512 arrays of 4 KiB
        origin_rounds(self, self.device, pool, rounds=6, n=400)
        st = pool.statistics()
        self.assertGreater(st["ready_reuses"] + st["waited_reuses"], 0)

    def test_pool_and_device_collected_with_the_arrays(self):
        # Pool handle, streams, arrays and the Device object itself all in one cycle.
        for _ in range(3):
            device = sp.Device.host(checking=True)
            pool = sp.Pool(device)
            s = sp.Stream(device)
            holder = Task()
            holder.self = holder
            holder.items = [device, pool, s] + [sp.Array(N, pool=pool, stream=s) for _ in range(50)]
            for a in holder.items[3:]:
                a.fill(2.0, stream=s)
                a.holder = holder
            random.Random(1).shuffle(holder.items)
            upstream = device.upstream_bytes
            del device, pool, s, holder, a
            gc.collect()
            self.assertEqual(upstream(), 0)  # bound method keeps the device: then it goes too


class ThreadsExitWithStreams(unittest.TestCase):
    def test_arrays_outlive_their_threads(self):
        device = sp.Device.host(checking=True, max_delay_us=5)
        pool = device.default_pool()
        results = []

        def work(k):
            a = sp.Array(N, "i", pool=pool)  # on this thread's default stream
            a.fill(k)
            results.append((k, a))  # the array leaves; the stream dies with the thread

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gc.collect()
        for k, a in results:
            self.assertEqual(a.tolist(), [k] * N)
        # Free from other threads, concurrently.
        chunks = [results[i::3] for i in range(3)]
        del results
        freers = [threading.Thread(target=lambda c=c: [a.free() for _, a in c]) for c in chunks]
        for t in freers:
            t.start()
        for t in freers:
            t.join()
        del chunks, freers
        gc.collect()
        self.assertEqual(pool.statistics()["live_bytes"], 0)
        self.assertEqual(device.violations(), [])

    def test_uploads_from_many_threads(self):
        device = sp.Device.host(checking=True, max_delay_us=5)
        pool = sp.Pool(device, memory_limit=4 << 20)
        errors = []

        def work(seed):
            rng = random.Random(seed)
            try:
                for _ in range(50):
                    h = array.array("d", (rng.random() for _ in range(300)))
                    a = sp.Array.from_buffer(h, pool=pool)
                    if a.download() != h:
                        errors.append(seed)
            except Exception as e:  # noqa: BLE001 - reported through the test
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        gc.collect()
        self.assertEqual(device.violations(), [])


class ReclaimHook(unittest.TestCase):
    def test_gc_collect_under_memory_pressure(self):
        device = sp.Device.host(checking=True, max_delay_us=5)
        pool = sp.Pool(device, memory_limit=4 << 20)
        calls = []

        def collect(nbytes):
            calls.append(nbytes)
            gc.collect()  # finalizes garbage arrays: frees from inside the allocation

        hook = pool.add_reclaim_hook(collect)
        gc.disable()
        try:
            for round_ in range(5):
                # Garbage in cycles, on a stream that dies with it, filling the pool.
                s = sp.Stream(device)
                garbage = [sp.Array(64 * 1024, "f", pool=pool, stream=s) for _ in range(12)]
                for g in garbage:
                    g.fill(9.0, stream=s)
                    g.cycle = garbage
                s.garbage = garbage
                del s, garbage, g
                # The pool is full of unreachable arrays: only the hook can make room.
                rng = random.Random(round_)
                h = array.array("f", (rng.random() for _ in range(256 * 1024)))
                b = sp.Array.from_buffer(h, pool=pool)
                self.assertEqual(b.download(), h)
                del b
        finally:
            gc.enable()
        self.assertGreaterEqual(len(calls), 1)
        self.assertGreaterEqual(pool.statistics()["reclaim_calls"], len(calls))
        pool.remove_reclaim_hook(hook)
        gc.collect()
        self.assertEqual(device.violations(), [])

    def test_out_of_memory_names_the_numbers(self):
        device = sp.Device.host()
        pool = sp.Pool(device, memory_limit=1 << 20)
        with self.assertRaises(sp.OutOfDeviceMemory) as cm:
            sp.Array(1 << 20, "f", pool=pool)  # 4 MiB
        self.assertIn("requested 4194304 bytes", str(cm.exception))
        self.assertIn("limit 1048576 bytes", str(cm.exception))
        self.assertIsInstance(cm.exception, MemoryError)


class Basics(unittest.TestCase):
    def test_streams_keep_their_memory_unless_the_pool_shares(self):
        # A 4 MiB block freed on s1, its work complete, comes back on s2 while s1 lives only in a
        # pool that shares memory between streams.
        device = sp.Device.host(checking=True)
        for share in (False, True):
            pool = sp.Pool(device, share_between_streams=share)
            s1, s2 = sp.Stream(device), sp.Stream(device)
            a = pool.allocate(4 << 20, s1)
            pool.deallocate(a, s1)
            s1.synchronize()
            b = pool.allocate(4 << 20, s2)
            pool.deallocate(b, s2)
            self.assertEqual(a == b, share)
        self.assertEqual(device.violations(), [])

    def test_the_large_cache_is_an_option(self):
        # The shelf (docs/large-blocks.md): a stream's freed large block comes back for its next
        # request of the same size class, with the default bound and with none.
        device = sp.Device.host(checking=True)
        s = sp.Stream(device)
        for bound in (None, 0, 16 << 20):
            pool = sp.Pool(device) if bound is None else sp.Pool(device, large_cache_bytes=bound)
            a = pool.allocate(3 << 20, s)
            pool.deallocate(a, s)
            b = pool.allocate(3 << 20, s)
            pool.deallocate(b, s)
            self.assertEqual(a, b)
        with self.assertRaises(sp.InvalidType):
            sp.Pool(device, large_cache_bytes="64 MiB")
        self.assertEqual(device.violations(), [])

    def test_peaks_reset_to_now(self):
        # reset_peak_statistics() (torch.cuda.reset_peak_memory_stats' counterpart): the peaks
        # read after it are those since the reset, not the pool's all-time ones.
        device = sp.Device.host(checking=True)
        pool, s = sp.Pool(device), sp.Stream(device)
        a, b = pool.allocate(2 << 20, s), pool.allocate(2 << 20, s)
        pool.deallocate(b, s)
        self.assertGreaterEqual(pool.statistics()["peak_live_bytes"], 4 << 20)
        pool.reset_peak_statistics()
        st = pool.statistics()
        self.assertEqual(st["peak_live_bytes"], st["live_bytes"])
        self.assertEqual(st["peak_reserved_bytes"], st["reserved_bytes"])
        self.assertLess(st["peak_live_bytes"], 4 << 20)
        pool.deallocate(a, s)
        self.assertEqual(device.violations(), [])

    def test_round_trips_and_errors(self):
        device = sp.Device.host(checking=True)
        s1, s2 = sp.Stream(device), sp.Stream(device)
        a = sp.Array.from_buffer(array.array("q", range(1000)), device=device, stream=s1)
        b = sp.Array(1000, "q", device=device)
        b.copy_from(a, stream=s2)  # ordered after s1's upload by the C layer
        self.assertEqual(b.tolist(), list(range(1000)))
        out = bytearray(8000)
        b.download(out=out)
        self.assertEqual(array.array("q", bytes(out)).tolist(), list(range(1000)))
        a.upload(memoryview(bytes(8000)))
        self.assertEqual(a.tolist(), [0] * 1000)
        with self.assertRaises(sp.InvalidArgument):
            a.upload(bytes(10))
        pool = device.default_pool()
        z = pool.allocate(0)  # like malloc(0): unique and freeable
        self.assertNotEqual(z, 0)
        pool.deallocate(z)
        p = pool.allocate(100, s1)
        pool.deallocate(p, s1)
        with self.assertRaises(sp.InvalidArgument) as cm:
            pool.deallocate(p, s1)
        self.assertIn("double free", str(cm.exception))
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None:
            x = np.arange(10, dtype=np.float32)
            self.assertTrue((sp.Array.from_buffer(x, device=device).numpy() == x).all())
        if sp.Device.cuda_count() == 0:
            with self.assertRaises(sp.NotAvailable):
                sp.Device.cuda(0)
        self.assertEqual(device.violations(), [])


class OtherBackends(unittest.TestCase):
    """OpenCL and Level Zero devices from Python: where a runtime and device are here (PoCL in CI;
    the Level Zero test driver when ZE_ENABLE_ALT_DRIVERS names it), the origin reproducer's
    rounds run on them with exact read-back; where none is, creating one raises NotAvailable."""

    def check_backend(self, name, required):
        count = getattr(sp.Device, f"{name}_count")()
        make = getattr(sp.Device, name)
        if required:
            self.assertGreater(count, 0, f"{name}: no device, but this run requires one")
        if count == 0:
            with self.assertRaises(sp.NotAvailable) as cm:
                make(0)
            self.assertIn(name, str(cm.exception))
            return
        with self.assertRaises(sp.NotAvailable):
            make(count)  # one past the last
        device = make(0)
        self.assertEqual(device.backend, name)
        # The kind the binding decides by (DLPack, the CUDA array interface) is the name's.
        self.assertEqual(device._kind, getattr(sp._capi, f"BACKEND_{name.upper()}"))
        pool = sp.Pool(device, memory_limit=2 << 20)
        origin_rounds(self, device, pool, rounds=3, n=200)
        st = pool.statistics()
        self.assertGreater(st["ready_reuses"] + st["waited_reuses"], 0)

    def test_the_host_device_is_of_the_host_kind(self):
        device = sp.Device.host()
        self.assertEqual(device.backend, "host")
        self.assertEqual(device._kind, sp._capi.BACKEND_HOST)

    def test_opencl(self):
        # CI installs PoCL and sets this (STREAMPOOL_REQUIRE_OPENCL): a skip would hide a break.
        self.check_backend("opencl", os.environ.get("STREAMPOOL_REQUIRE_OPENCL") == "1")

    def test_level_zero(self):
        # The test driver's CTest entry names it: then a device must be there.
        self.check_backend("level_zero", bool(os.environ.get("ZE_ENABLE_ALT_DRIVERS")))


def code_blocks(path, language):
    with open(path) as f:
        text = f.read()
    return re.findall(r"^```" + language + r"\n(.*?)^```", text, re.S | re.M)


class Docs(unittest.TestCase):
    """The examples in docs/ run as tests, so they cannot rot."""

    def test_python_md_examples_run(self):
        # Every ```python block runs (```py blocks need a GPU or CuPy: test_gpu_interop.py covers
        # them); one that imports numpy runs where numpy is installed.
        blocks = code_blocks(os.path.join(ROOT, "docs", "python.md"), "python")
        self.assertGreater(len(blocks), 0)
        try:
            import numpy  # noqa: F401
            have_numpy = True
        except ImportError:
            have_numpy = False
        for i, block in enumerate(blocks):
            with self.subTest(block=i):
                if "import numpy" in block and not have_numpy:
                    self.skipTest("needs numpy")
                exec(compile(block, "docs/python.md", "exec"), {"__name__": "__docs__"})
                gc.collect()

    def test_c_api_md_example_is_the_tested_file(self):
        # docs/c-api.md quotes tests/c_api/doc_example.c verbatim; ctest builds and runs that file.
        blocks = code_blocks(os.path.join(ROOT, "docs", "c-api.md"), "c")
        with open(os.path.join(ROOT, "tests", "c_api", "doc_example.c")) as f:
            source = f.read()
        self.assertIn(source, blocks)


if __name__ == "__main__":
    unittest.main()
