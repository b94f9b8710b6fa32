"""Interop on the host device (docs/python.md, "Interop"): DLPack both ways with NumPy, exports
that outlive free(), capsules nobody consumed, the protocol's refusals, and streams released
without waiting. The CUDA side (PyTorch, CuPy, the CUDA array interface, streampool.cupy) is in
test_gpu_interop.py."""

import array
import gc
import unittest

import streampool as sp

try:
    import numpy as np
except ImportError:  # the in-tree run without numpy: the NumPy tests skip
    np = None
# NumPy before 2.0 (Debian 12 has 1.24) makes from_dlpack's arrays read-only and refuses to export
# a read-only array, so writing through them, and the round trip, need NumPy 2.
NUMPY_2 = np is not None and int(np.__version__.split(".")[0]) >= 2


def live_bytes(pool):
    return pool.statistics()["live_bytes"]


class CheckedHost(unittest.TestCase):
    """A host device with the race detector and delays, that must see no violation."""

    def setUp(self):
        self.device = sp.Device.host(checking=True, max_delay_us=50)
        self.pool = sp.Pool(self.device)

    def tearDown(self):
        gc.collect()
        self.assertEqual(self.device.violations(), [])


class Export(CheckedHost):

    def test_capsule_names_follow_max_version(self):
        a = sp.Array(4, "f", pool=self.pool)
        legacy = a.__dlpack__()
        versioned = a.__dlpack__(max_version=(1, 0))
        self.assertIn('"dltensor"', repr(legacy))
        self.assertIn('"dltensor_versioned"', repr(versioned))
        self.assertEqual(a.__dlpack_device__(), (1, 0))

    def test_free_waits_for_every_export(self):
        a = sp.Array(1024, "i", pool=self.pool)
        a.fill(3)
        capsule = a.__dlpack__()  # nobody consumes it
        a.free()
        self.assertTrue(a.freed)
        self.assertEqual(live_bytes(self.pool), 4096)  # the capsule still owns the memory
        del capsule
        gc.collect()
        self.assertEqual(live_bytes(self.pool), 0)

    def test_refusals(self):
        a = sp.Array(4, "f", pool=self.pool)
        with self.assertRaises(BufferError):
            a.__dlpack__(copy=True)
        with self.assertRaises(BufferError):
            a.__dlpack__(stream=5)  # the host device has no consumer streams
        with self.assertRaises(BufferError):
            a.__dlpack__(dl_device=(2, 0))
        self.assertFalse(hasattr(a, "__cuda_array_interface__"))
        a.free()
        with self.assertRaises(sp.InvalidArgument):
            a.__dlpack__()
        with self.assertRaises(sp.InvalidArgument):
            a.__dlpack_device__()
        with self.assertRaises(TypeError):
            sp.Array.from_dlpack([1, 2, 3], device=self.device)


@unittest.skipIf(np is None, "needs numpy")
class NumPyRoundTrip(CheckedHost):

    def test_numpy_reads_and_writes_the_same_memory(self):
        a = sp.Array.from_buffer(array.array("f", range(1000)), pool=self.pool)
        a.fill(2.5)  # asynchronous: from_dlpack waits for it (the host has no consumer streams)
        n = np.from_dlpack(a)
        self.assertEqual(n.dtype, np.float32)
        self.assertEqual(n.ctypes.data, a.ptr)  # no copy
        self.assertTrue((n == 2.5).all())
        if NUMPY_2:
            n[7] = -1.0
            self.assertEqual(a.tolist()[6:8], [2.5, -1.0])
        a.fill(4.0)  # seen through n once a new export waited for it
        self.assertTrue((np.from_dlpack(a) == 4.0).all())
        self.assertTrue((n == 4.0).all())
        a.free()  # numpy still holds it: the memory stays
        self.assertTrue((n[:7] == 4.0).all())
        del n
        gc.collect()
        self.assertEqual(live_bytes(self.pool), 0)

    def test_streampool_wraps_numpy_memory(self):
        x = np.arange(6, dtype=np.int64)
        b = sp.Array.from_dlpack(x, device=self.device)
        self.assertEqual((b.typecode, b.size, b.ptr), ("q", 6, x.ctypes.data))
        self.assertEqual(b.tolist(), list(range(6)))
        b.fill(7)
        c = sp.Array.from_dlpack(x, device=self.device)  # the same memory, twice
        self.assertEqual(c.tolist(), [7] * 6)
        b.free()  # waits for streampool's work on x, then gives it back
        c.free()
        self.assertEqual(x.tolist(), [7] * 6)
        m = np.arange(12, dtype=np.float64).reshape(3, 4)  # compact: flattened
        self.assertEqual(sp.Array.from_dlpack(m, device=self.device).tolist(),
                         [float(i) for i in range(12)])

    @unittest.skipUnless(NUMPY_2, "NumPy 1 exports no read-only array, and from_dlpack gives one")
    def test_round_trip_through_numpy_and_back(self):
        a = sp.Array.from_buffer(array.array("d", [1.0, 2.0, 3.0]), pool=self.pool)
        back = sp.Array.from_dlpack(np.from_dlpack(a), device=self.device)
        self.assertEqual(back.ptr, a.ptr)
        back.fill(9.0)
        self.assertEqual(a.tolist(), [9.0, 9.0, 9.0])

    def test_unsupported_tensors_are_refused_and_given_back(self):
        with self.assertRaises(TypeError) as e:
            sp.Array.from_dlpack(np.zeros(3, dtype=np.float16), device=self.device)
        self.assertIn("float16", str(e.exception))
        with self.assertRaises(ValueError) as e:
            sp.Array.from_dlpack(np.zeros((3, 4))[:, 1], device=self.device)
        self.assertIn("not compact", str(e.exception))
        frozen = np.zeros(3)
        frozen.flags.writeable = False
        with self.assertRaises((ValueError, BufferError)):
            sp.Array.from_dlpack(frozen, device=self.device)
        with self.assertRaises(ValueError):
            sp.Array.from_dlpack(np.zeros(3))  # host memory needs its device


class ReleasedStreams(unittest.TestCase):
    def test_a_released_wrapper_orders_reuse_behind_its_last_marker(self):
        device = sp.Device.host(checking=True, max_delay_us=200)
        pool = sp.Pool(device)
        owner = sp.Stream(device)  # stands in for a framework's stream
        other = sp.Stream(device)
        wrapper = sp.Stream.wrap(device, owner.native)
        a = sp.Array(1 << 18, "B", pool=pool, stream=wrapper)
        for v in range(4):
            a.fill(v, stream=wrapper)
        raw = pool.allocate(4096, stream=wrapper)
        pool.deallocate(raw, stream=wrapper)  # into the wrapper's own cache
        wrapper.release()  # no wait: owner may destroy its stream now
        self.assertTrue(wrapper.closed)
        wrapper.release()  # idempotent
        a.free()  # after its stream's release: behind the tokens of its users
        pool.deallocate(pool.allocate(4096, stream=other), stream=other)
        b = sp.Array(1 << 18, "B", pool=pool, stream=other)
        b.fill(9, stream=other)
        self.assertEqual(b.download(stream=other).count(9), 1 << 18)
        owner.close()
        self.assertEqual(device.violations(), [])

    def test_a_collected_stream_is_closed_for_those_holding_its_life(self):
        # streampool.cupy's blocks keep a wrapper's _Life, not the wrapper: once the wrapper is
        # collected (its handle destroyed), they must see it closed and free without it.
        device = sp.Device.host()
        owner = sp.Stream(device)
        wrapper = sp.Stream.wrap(device, owner.native)
        life = wrapper._life
        self.assertTrue(life.try_enter())
        life.leave()
        del wrapper
        gc.collect()
        self.assertTrue(life.closed)
        self.assertFalse(life.try_enter())
        owner.close()

    def test_release_native_stream(self):
        self.assertEqual(sp.release_native_stream(0x1234), 0)  # never handed to streampool
        with self.assertRaises(TypeError):
            sp.release_native_stream("0x1234")
        with self.assertRaises(sp.InvalidArgument) as e:
            sp.release_native_stream(2)
        self.assertIn("per-thread", str(e.exception))


if __name__ == "__main__":
    unittest.main()
