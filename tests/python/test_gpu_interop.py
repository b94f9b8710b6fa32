"""Interop on a CUDA GPU (docs/python.md, "Interop"): DLPack both ways with PyTorch and CuPy, the
CUDA array interface, and streampool.cupy as CuPy's allocator over 10,000 streams that CuPy
destroys while their memory lives. Skips without a GPU, PyTorch or CuPy; run on the GPU machine
(scripts/device-check.sh runs it there).

Every ordering check makes the writer slow (many passes over 256 MiB) and reads on another
stream at once: without the stream ordering the reader sees an earlier pass."""

import gc
import os
import threading
import unittest

import streampool as sp

try:
    import torch
except ImportError:
    torch = None
try:
    import cupy
except ImportError:
    cupy = None


def cuda_device():
    try:
        if sp.Device.cuda_count() > 0:
            return sp.Device.cuda(0)
    except sp.StreampoolError:
        pass
    return None


DEVICE = cuda_device()
N = 64 << 20  # floats: 256 MiB, so that each pass takes a while
PASSES = 40


def slow_fill(a, value, stream=None):
    """PASSES fills of a streampool array, the last with `value`."""
    for i in range(PASSES):
        a.fill(float(i), stream=stream)
    a.fill(float(value), stream=stream)


@unittest.skipIf(DEVICE is None or torch is None or not torch.cuda.is_available(),
                 "needs a CUDA GPU and PyTorch")
class TorchDLPack(unittest.TestCase):
    def test_torch_reads_what_streampool_wrote(self):
        a = sp.Array(N, "f", device=DEVICE)
        slow_fill(a, 3.0)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            t = torch.from_dlpack(a)  # side waits for the fills, on the device
            self.assertEqual(t.data_ptr(), a.ptr)  # no copy
            ok = bool((t == 3.0).all())
        self.assertTrue(ok)

    def test_streampool_reads_what_torch_wrote(self):
        t = torch.empty(N, device="cuda")
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            for i in range(PASSES):
                t.fill_(float(i))
            t.fill_(5.0)
            b = sp.Array.from_dlpack(t)  # our stream waits for side's fills
        self.assertEqual(b.ptr, t.data_ptr())
        self.assertEqual(b.typecode, "f")
        h = b.download()
        self.assertEqual((h[0], h[N // 2], h[N - 1]), (5.0, 5.0, 5.0))
        b.fill(6.0)
        b.free()  # waits for streampool's fill, then gives the tensor back to torch
        self.assertTrue(bool((t == 6.0).all()))

    def test_consumer_writes_come_before_streampool_s_later_use(self):
        a = sp.Array(N, "f", device=DEVICE)
        a.fill(0.0)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            t = torch.from_dlpack(a)
            for i in range(PASSES):
                t.fill_(float(i))
            t.fill_(7.0)
        # streampool's next use of a waits for side (a user of the memory since the export).
        out = sp.Array(N, "f", device=DEVICE)
        out.copy_from(a)
        self.assertEqual(out.download()[N - 1], 7.0)
        self.assertEqual(a.download()[0], 7.0)


@unittest.skipIf(DEVICE is None or cupy is None, "needs a CUDA GPU and CuPy")
class CuPyDLPack(unittest.TestCase):
    def test_cupy_reads_what_streampool_wrote(self):
        a = sp.Array(N, "f", device=DEVICE)
        slow_fill(a, 3.0)
        with cupy.cuda.Stream(non_blocking=True):
            x = cupy.from_dlpack(a)
            self.assertEqual(x.data.ptr, a.ptr)
            self.assertTrue(bool((x == 3.0).all()))

    def test_cuda_array_interface(self):
        a = sp.Array(N, "f", device=DEVICE)
        slow_fill(a, 4.0)
        cai = a.__cuda_array_interface__
        self.assertEqual((cai["version"], cai["typestr"], cai["shape"]), (3, "<f4", (N,)))
        self.assertNotIn(cai["stream"], (None, 0))
        with cupy.cuda.Stream(non_blocking=True):
            x = cupy.asarray(a)  # through the interface: CuPy waits on its stream
            self.assertEqual(x.data.ptr, a.ptr)
            self.assertTrue(bool((x == 4.0).all()))

    def test_streampool_reads_what_cupy_wrote(self):
        with cupy.cuda.Stream(non_blocking=True):
            x = cupy.empty(N, dtype=cupy.float32)
            for i in range(PASSES):
                x.fill(float(i))
            x.fill(8.0)
            b = sp.Array.from_dlpack(x)
        self.assertEqual(b.ptr, x.data.ptr)
        self.assertEqual(b.download()[N - 1], 8.0)
        b.free()

    def test_consumer_stream_destroyed_after_release(self):
        # A CuPy stream handed to __dlpack__ becomes a user of the memory: streampool.cupy's
        # hook releases it before CuPy destroys it, so the free never touches a dead stream.
        import streampool.cupy as spc
        spc.enable()
        try:
            a = sp.Array(N, "f", device=DEVICE)
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                x = cupy.from_dlpack(a)
                x.fill(2.0)
            del x, s
            gc.collect()
            self.assertEqual(a.download()[N - 1], 2.0)
            a.free()
        finally:
            spc.disable()


@unittest.skipIf(DEVICE is None or cupy is None, "needs a CUDA GPU and CuPy")
class CuPyAllocator(unittest.TestCase):
    def setUp(self):
        import streampool.cupy as spc
        self.spc = spc
        spc.enable()

    def tearDown(self):
        gc.collect()
        self.spc.disable()

    def test_10000_streams_destroyed_while_their_memory_lives(self):
        streams = int(os.environ.get("STREAMPOOL_CUPY_STREAMS", "10000"))
        pool = self.spc.pool(0)
        kept = []  # (i, array) of recent streams, each made on a stream that is gone
        handed = []  # arrays freed on another thread, after their stream died
        worst_reserved = 0
        errors = []
        for i in range(streams):
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                x = cupy.arange(4096, dtype=cupy.float32) + float(i)
                y = x * 2.0 + 1.0  # a temporary and a result, both from streampool
                big = cupy.full((1 << 20) if i % 100 == 0 else 16, float(i), dtype=cupy.float32)
            kept.append((i, y, big))
            del x, s  # CuPy destroys the stream now; y and big still live
            if len(kept) > 64:
                j, old, old_big = kept.pop(0)
                if j % 3 == 0:
                    handed.append((j, old, old_big))
                else:
                    expected = cupy.arange(4096, dtype=cupy.float32) * 2.0 + (2.0 * j + 1.0)
                    if not bool((old == expected).all()) or not bool((old_big == j).all()):
                        errors.append(j)
            if len(handed) >= 32:
                batch, handed = handed, []
                threading.Thread(target=batch.clear).start()  # frees on another thread
            if i % 1000 == 999:
                gc.collect()
                worst_reserved = max(worst_reserved, pool.statistics()["reserved_bytes"])
        cupy.cuda.Device().synchronize()
        for j, old, old_big in kept:
            expected = cupy.arange(4096, dtype=cupy.float32) * 2.0 + (2.0 * j + 1.0)
            if not bool((old == expected).all()) or not bool((old_big == j).all()):
                errors.append(j)
        st = pool.statistics()
        print(f"\nstreampool.cupy: {streams} streams, reserved at most {worst_reserved} bytes, "
              f"peak live {st['peak_live_bytes']}, peak reserved {st['peak_reserved_bytes']}, "
              f"allocations {st['allocations']}, waited reuses {st['waited_reuses']}, "
              f"stream caches {st['stream_caches']}")
        self.assertEqual(errors, [])
        # Bounded: live memory is ~65 arrays of 16 KiB plus a few 4 MiB ones at any time.
        self.assertLess(st["peak_reserved_bytes"], 256 << 20)
        self.assertLess(st["stream_caches"], 200)

    def test_allocations_on_cupy_streams_are_exact(self):
        s1 = cupy.cuda.Stream(non_blocking=True)
        s2 = cupy.cuda.Stream(non_blocking=True)
        with s1:
            a = cupy.full(N, 1.0, dtype=cupy.float32)
            for i in range(PASSES):
                a += 1.0
        ptr = a.data.ptr
        with s1:
            del a  # freed on s1 while s1's work runs
        with s2:
            b = cupy.zeros(N, dtype=cupy.float32)  # may reuse it: waits for s1 on the device
            b += 3.0
            ok = bool((b == 3.0).all())
        self.assertTrue(ok)
        del b, s1, s2
        self.assertIsInstance(ptr, int)


if __name__ == "__main__":
    unittest.main()
