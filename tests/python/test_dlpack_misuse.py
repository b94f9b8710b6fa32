"""Issue 45, item 8: Array.from_dlpack (and __dlpack__) under a hostile producer or consumer.

Every malformed answer of a producer's ``__dlpack_device__`` (not a tuple, a wrong length, items
that are not ints or are bools, negative or huge numbers, a device type streampool does not import,
a device id out of range, an exception inside) and every malformed ``__dlpack__`` capsule (not a
capsule, a used one, another DLPack major version, a tensor on another device than announced, a
negative or huge ndim, a NULL or negative shape, NULL data, an offset or size that wraps the
address space) is refused with InvalidArgument (InvalidType where the fault is a type) naming
the value received. Before the fix these raised raw TypeError/ValueError/BufferError, or were
accepted: a negative shape became one element, an offset that wrapped 2**64 pointed the Array 8
bytes before the producer's buffer, and a tensor announced as host memory was taken whatever the
capsule said. A refused capsule is given back to its producer: its deleter runs exactly once.

The producers here are fakes over an array.array's memory, so no NumPy is needed; with hypothesis
installed, two property tests throw random answers at the same checks.
"""

import array
import ctypes
import enum
import gc
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package in python/, unless the installed one is under test (scripts/run-tests.sh, stage
# python; tests/python/test_install.py).
if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import streampool as sp  # noqa: E402
from streampool import _dlpack  # noqa: E402

try:
    import hypothesis
    from hypothesis import strategies as st
except ImportError:  # Debian's CI Python has no hypothesis: the explicit cases below still run
    hypothesis = None

MAX_BYTES = sp.MAX_ALLOCATION_BYTES  # the library's sp_max_allocation_bytes()
UNSET = object()


class Producer:
    """A DLPack producer over the memory of an array.array of ``n`` 'i' elements. Its capsules
    are streampool's own exports, which the test then corrupts (``corrupt(tensor, managed,
    keep)``); ``deleted`` counts the deleter's calls, which must come to one per capsule."""

    def __init__(self, device=(1, 0), corrupt=None, capsule=UNSET, raises=None,
                 device_raises=None, n=4, legacy=False):
        self.buf = array.array("i", range(n))
        self.device, self.corrupt, self.capsule = device, corrupt, capsule
        self.raises, self.device_raises, self.legacy = raises, device_raises, legacy
        self.deleted = 0
        self.exported = 0
        self.keep = []  # what a corruption points the tensor at

    def __dlpack_device__(self):
        if self.device_raises is not None:
            raise self.device_raises
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        if self.raises is not None:
            raise self.raises
        if self.capsule is not UNSET:
            return self.capsule
        versioned = max_version is not None and not self.legacy
        address, n = self.buf.buffer_info()
        capsule = _dlpack.export(address, _dlpack.CPU, 0, "i", n, versioned, self._on_delete)
        self.exported += 1
        if self.corrupt is not None:
            name = _dlpack.NAME_VERSIONED if versioned else _dlpack.NAME
            managed = _dlpack._exports[_dlpack._capsule_get_pointer(capsule, name)][0]
            self.corrupt(managed.dl_tensor, managed, self.keep)
        return capsule

    def _on_delete(self):
        self.deleted += 1


def shape(*dims):
    """A corruption that points the tensor at a new shape (compact: no strides)."""
    def corrupt(t, m, keep):
        array_ = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        keep.append(array_)
        t.ndim = len(dims)
        t.shape = ctypes.cast(array_, ctypes.POINTER(ctypes.c_int64))
        t.strides = None
    return corrupt


def setter(**fields):
    """A corruption that sets fields of the tensor (or, for version, of the managed struct)."""
    def corrupt(t, m, keep):
        for name, value in fields.items():
            if name == "version":
                m.version.major, m.version.minor = value
            elif name == "device":
                t.device.device_type, t.device.device_id = value
            elif name == "data":
                t.data = value
            else:
                setattr(t, name, value)
    return corrupt


class DLDeviceType(enum.IntEnum):  # how PyTorch answers __dlpack_device__
    kDLCPU = 1


class Base(unittest.TestCase):
    def setUp(self):
        self.device = sp.Device.host(checking=True)

    def tearDown(self):
        gc.collect()
        self.assertEqual(self.device.violations(), [])

    def refused(self, producer, kind=sp.InvalidArgument, *parts):
        """from_dlpack(producer) raises ``kind`` whose message names ``parts``; the capsule (if
        one was made) is then given back exactly once."""
        with self.assertRaises(kind) as cm:
            sp.Array.from_dlpack(producer, device=self.device)
        e = cm.exception
        self.assertIsInstance(e, sp.StreampoolError)
        message = str(e)
        self.assertIn("Array.from_dlpack", message)
        for part in parts:
            self.assertIn(part, message)
        del cm, e
        gc.collect()
        self.assertEqual(producer.deleted, producer.exported, "a capsule was not given back")
        return message


class MalformedDevice(Base):
    """__dlpack_device__ must return a tuple (device type, device id) of two ints."""

    def test_not_a_tuple(self):
        for bad in (None, 5, "ab", b"\x01\x00", [1, 0], {1: 0}, iter([1, 0]), 1.5):
            with self.subTest(bad=bad):
                self.refused(Producer(device=bad), sp.InvalidType, repr(bad), "not a tuple")

    def test_wrong_length(self):
        for bad in ((), (1,), (1, 0, 0)):
            with self.subTest(bad=bad):
                self.refused(Producer(device=bad), sp.InvalidArgument, repr(bad))

    def test_items_that_are_not_ints(self):
        for bad in (("1", 0), (1, "0"), (1.0, 0), (1, 0.0), (None, 0), (1, None), (True, 0),
                    (1, False), ((1,), 0)):
            with self.subTest(bad=bad):
                message = self.refused(Producer(device=bad), sp.InvalidType, repr(bad))
                self.assertNotIn("Traceback", message)

    def test_out_of_range(self):
        for bad in ((-1, 0), (1 << 31, 0), (1 << 70, 0), (2, -1), (2, 1 << 31), (2, 1 << 70),
                    (1, -1), (1, 1 << 70)):
            with self.subTest(bad=bad):
                self.refused(Producer(device=bad), sp.InvalidArgument, repr(bad))

    def test_host_memory_is_device_zero(self):
        # DLPack: kDLCPU's device_id is 0. Another id was taken as host memory without a word.
        for bad in ((1, 1), (1, 5)):
            with self.subTest(bad=bad):
                self.refused(Producer(device=bad), sp.InvalidArgument, repr(bad), "device id")

    def test_device_types_streampool_does_not_import(self):
        for bad, name in (((0, 0), "0"), ((3, 0), "kDLCUDAHost"), ((4, 0), "kDLOpenCL"),
                          ((10, 0), "kDLROCM"), ((13, 0), "kDLCUDAManaged"),
                          ((14, 0), "kDLOneAPI"), ((99, 0), "99")):
            with self.subTest(bad=bad):
                self.refused(Producer(device=bad), sp.InvalidArgument, repr(bad), name)

    def test_an_exception_inside(self):
        for raised in (ValueError("v"), TypeError("t"), BufferError("b"), RuntimeError("r"),
                       AttributeError("a"), KeyError("k")):
            with self.subTest(raised=raised):
                with self.assertRaises(sp.InvalidArgument) as cm:
                    sp.Array.from_dlpack(Producer(device_raises=raised), device=self.device)
                self.assertIs(cm.exception.__cause__, raised)
                self.assertIn(type(raised).__name__, str(cm.exception))
                self.assertIn("__dlpack_device__", str(cm.exception))

    def test_values_whose_repr_or_str_raise(self):
        # The message is made without them: a failing __repr__/__str__ must not replace it.
        class Hostile:
            def __repr__(self):
                raise RuntimeError("repr")

            def __index__(self):
                raise ValueError("index")

        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("str")

        message = self.refused(Producer(device=(Hostile(), 0)), sp.InvalidType,
                               "Hostile whose repr() raised")
        self.assertIn("device type", message)
        with self.assertRaises(sp.InvalidArgument) as cm:
            sp.Array.from_dlpack(Producer(device_raises=Unprintable()), device=self.device)
        self.assertIn("Unprintable", str(cm.exception))

    def test_a_streampool_error_inside_goes_through(self):
        a = sp.Array(4, "i", device=self.device)
        a.free()
        with self.assertRaises(sp.InvalidArgument) as cm:
            sp.Array.from_dlpack(a, device=self.device)
        self.assertIn("was freed", str(cm.exception))
        self.assertIsNone(cm.exception.__cause__)

    def test_attributes_that_raise_or_are_not_callable(self):
        class Raising:
            @property
            def __dlpack__(self):
                raise ValueError("property")
            __dlpack_device__ = __dlpack__

        class NotCallable:
            __dlpack__ = 5
            __dlpack_device__ = (1, 0)

        with self.assertRaises(sp.InvalidArgument) as cm:
            sp.Array.from_dlpack(Raising(), device=self.device)
        self.assertIn("property", str(cm.exception))
        with self.assertRaises(sp.InvalidArgument) as cm:
            sp.Array.from_dlpack(NotCallable(), device=self.device)
        self.assertIn("NotCallable", str(cm.exception))

    def test_what_is_well_formed_is_taken(self):
        # Ints by __index__ (an IntEnum, as PyTorch answers) and a tuple subclass are fine.
        class Pair(tuple):
            pass
        for good in ((1, 0), (DLDeviceType.kDLCPU, 0), Pair((1, 0))):
            with self.subTest(good=good):
                p = Producer(device=good)
                a = sp.Array.from_dlpack(p, device=self.device)
                self.assertEqual(a.tolist(), [0, 1, 2, 3])
                a.fill(7)
                a.free()
                self.assertEqual(p.buf.tolist(), [7] * 4)
                self.assertEqual(p.deleted, 1)

    def test_cuda_ordinals_are_checked_before_a_device_is_made(self):
        # Without device=, a CUDA id went straight to Device.cuda (and a list id to a dict key:
        # "unhashable type").
        for bad in ((2, [0]), (2, -1), (2, 1 << 40), (2, 0.0)):
            with self.subTest(bad=bad), self.assertRaises(sp.InvalidArgument) as cm:
                sp.Array.from_dlpack(Producer(device=bad))
            self.assertIn(repr(bad), str(cm.exception))


class MalformedCapsule(Base):
    """What __dlpack__ returns must be a DLPack 1.x capsule of a well-formed tensor on the
    device __dlpack_device__ announced."""

    def test_not_a_capsule(self):
        for bad in (None, 5, "dltensor", b"dltensor", object(), memoryview(b"ab")):
            with self.subTest(bad=type(bad).__name__):
                self.refused(Producer(capsule=bad), sp.InvalidType, type(bad).__name__,
                             "not a DLPack capsule")

    def test_a_used_capsule_or_another_kind(self):
        used = Producer()
        capsule = used.__dlpack__()
        sp.Array.from_dlpack(Producer(capsule=capsule), device=self.device).free()  # takes it
        self.refused(Producer(capsule=capsule), sp.InvalidArgument, "'used_dltensor'")
        target = ctypes.c_int(0)
        other = _dlpack._capsule_new(ctypes.addressof(target), b"other", None)
        self.refused(Producer(capsule=other), sp.InvalidArgument, "'other'")

    def test_an_exception_inside(self):
        for raised in (BufferError("read-only"), TypeError("t"), ValueError("v"),
                       NotImplementedError("n")):
            with self.subTest(raised=raised), self.assertRaises(sp.InvalidArgument) as cm:
                sp.Array.from_dlpack(Producer(raises=raised), device=self.device)
            self.assertIs(cm.exception.__cause__, raised)
            self.assertIn("__dlpack__", str(cm.exception))
            self.assertIn(str(raised), str(cm.exception))

    def test_another_major_version(self):
        for version in ((0, 8), (2, 0)):
            with self.subTest(version=version):
                p = Producer(corrupt=setter(version=version))
                self.refused(p, sp.InvalidArgument, "%d.%d" % version)

    def test_a_tensor_on_another_device_than_announced(self):
        for device in ((2, 0), (1, 3), (14, 0)):
            with self.subTest(device=device):
                self.refused(Producer(corrupt=setter(device=device)), sp.InvalidArgument,
                             repr(device), "(1, 0)")

    def test_ndim(self):
        for ndim in (-1, -(1 << 31), 65, 1 << 30):
            with self.subTest(ndim=ndim):
                self.refused(Producer(corrupt=setter(ndim=ndim)), sp.InvalidArgument,
                             f"ndim {ndim}")

    def test_a_null_shape(self):
        self.refused(Producer(corrupt=setter(shape=None)), sp.InvalidArgument, "shape")

    def test_negative_shapes(self):
        for dims in ((-4,), (-1, -1), (2, -2), (-(1 << 63),)):
            with self.subTest(dims=dims):
                self.refused(Producer(corrupt=shape(*dims)), sp.InvalidArgument, repr(dims))

    def test_null_data(self):
        self.refused(Producer(corrupt=setter(data=None)), sp.InvalidArgument, "NULL")
        # No element: no memory, NULL is fine.
        def empty(t, m, keep):
            shape(0)(t, m, keep)
            t.data = None
        a = sp.Array.from_dlpack(Producer(corrupt=empty), device=self.device)
        self.assertEqual((a.size, a.nbytes), (0, 0))
        a.free()

    def test_an_offset_that_wraps_the_address_space(self):
        # Was taken: the Array pointed 8 bytes before the producer's buffer.
        self.refused(Producer(corrupt=setter(byte_offset=(1 << 64) - 8)), sp.InvalidArgument,
                     str((1 << 64) - 8))

    def test_memory_that_wraps_the_address_space(self):
        self.refused(Producer(corrupt=setter(data=(1 << 64) - 8)), sp.InvalidArgument,
                     "0xfffffffffffffff8")

    def test_more_bytes_than_any_device(self):
        # Refused naming the exact byte count: in a size_t the product would wrap modulo 2**64,
        # and C would see some other size (0 for these).
        for dims in (((1 << 62),), ((1 << 40), (1 << 40)), ((MAX_BYTES // 4) + 1,)):
            with self.subTest(dims=dims):
                n = 1
                for d in dims:
                    n *= d
                self.refused(Producer(corrupt=shape(*dims)), sp.InvalidArgument, repr(dims),
                             str(4 * n), str(MAX_BYTES))

    def test_legacy_capsules_are_checked_alike(self):
        self.refused(Producer(legacy=True, corrupt=shape(-4)), sp.InvalidArgument, "(-4,)")
        self.refused(Producer(legacy=True, corrupt=setter(device=(2, 0))), sp.InvalidArgument,
                     "(2, 0)")
        a = sp.Array.from_dlpack(Producer(legacy=True, corrupt=shape(2, 2)), device=self.device)
        self.assertEqual(a.tolist(), [0, 1, 2, 3])
        a.free()

    def test_a_scalar_is_one_element(self):
        p = Producer(corrupt=setter(ndim=0, shape=None))  # DLPack: ndim 0, shape may be NULL
        a = sp.Array.from_dlpack(p, device=self.device)
        self.assertEqual(a.tolist(), [0])
        a.free()
        self.assertEqual(p.deleted, 1)


class ExportArguments(Base):
    """__dlpack__'s keyword arguments come from the consumer: malformed ones are refused with
    InvalidType/InvalidArgument (a raw TypeError, IndexError or ValueError before), requests it
    cannot meet with BufferError, as the protocol asks."""

    def setUp(self):
        super().setUp()
        self.a = sp.Array(4, "f", device=self.device)

    def test_max_version(self):
        for bad, kind in ((5, sp.InvalidType), ((), sp.InvalidArgument),
                          ((1,), sp.InvalidArgument), (("a", 0), sp.InvalidType),
                          ((True, 0), sp.InvalidType), ((1, 0.5), sp.InvalidType),
                          ((-1, 0), sp.InvalidArgument), ("10", sp.InvalidType)):
            with self.subTest(bad=bad), self.assertRaises(kind) as cm:
                self.a.__dlpack__(max_version=bad)
            self.assertIn(repr(bad), str(cm.exception))
        self.assertIn("versioned", repr(self.a.__dlpack__(max_version=(1, 2))))
        self.assertIn('"dltensor"', repr(self.a.__dlpack__(max_version=(0, 8))))

    def test_dl_device(self):
        for bad, kind in ((5, sp.InvalidType), ("ab", sp.InvalidType), ((1,), sp.InvalidArgument),
                          ((1, "0"), sp.InvalidType), ((1.0, 0), sp.InvalidType)):
            with self.subTest(bad=bad), self.assertRaises(kind) as cm:
                self.a.__dlpack__(dl_device=bad)
            self.assertIn(repr(bad), str(cm.exception))
        with self.assertRaises(BufferError):  # well-formed, but a copy to another device
            self.a.__dlpack__(dl_device=(2, 0))
        self.a.__dlpack__(dl_device=(1, 0))

    def test_stream(self):
        for bad in ("x", 1.0, True, [1], array.array("i", [0, 0])):
            with self.subTest(bad=bad), self.assertRaises(sp.InvalidType) as cm:
                self.a.__dlpack__(stream=bad)
            self.assertIn("stream", str(cm.exception))
        for bad in (-2, 5, 1 << 70):  # ints, but the host device has no consumer streams
            with self.subTest(bad=bad), self.assertRaises(BufferError):
                self.a.__dlpack__(stream=bad)
        self.a.__dlpack__(stream=-1)

    def test_copy(self):
        for bad in ("no", 2, 1.0):
            with self.subTest(bad=bad), self.assertRaises(sp.InvalidType):
                self.a.__dlpack__(copy=bad)
        with self.assertRaises(BufferError):
            self.a.__dlpack__(copy=True)
        self.a.__dlpack__(copy=False)

    def test_nothing_stays_held_after_a_refusal(self):
        with self.assertRaises(sp.InvalidType):
            self.a.__dlpack__(max_version="x")
        self.a.free()  # would wait for an export that never comes if one had been entered
        self.assertTrue(self.a.freed)


PACKAGE_ERRORS = (sp.StreampoolError,)


@unittest.skipIf(hypothesis is None, "needs hypothesis (pip install hypothesis)")
class Properties(Base):
    """Random answers: each is taken (and reads back the producer's data) or refused with a
    package error; nothing else, and every capsule is given back."""

    if hypothesis is not None:
        anything = st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
            | st.binary(max_size=3),
            lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
            | st.tuples(inner), max_leaves=6)

        @hypothesis.settings(max_examples=200, deadline=None, database=None)
        @hypothesis.given(device=anything | st.tuples(st.integers(-3, 20), st.integers(-3, 3)))
        def test_any_dlpack_device(self, device):
            # (True, 0) == (1, 0) in Python: compare the types too.
            well_formed = (type(device) is tuple and device == (1, 0)
                           and all(type(x) is int for x in device))
            p = Producer(device=device)
            try:
                a = sp.Array.from_dlpack(p, device=self.device)
            except PACKAGE_ERRORS:
                self.assertFalse(well_formed, device)
            else:
                self.assertTrue(well_formed, device)
                self.assertEqual(a.tolist(), [0, 1, 2, 3])
                a.free()
            gc.collect()
            self.assertEqual(p.deleted, p.exported)

        @hypothesis.settings(max_examples=200, deadline=None, database=None)
        @hypothesis.given(
            ndim=st.integers(-(1 << 31), (1 << 31) - 1) | st.integers(-1, 3),
            dims=st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-2, 5),
                          min_size=4, max_size=4),
            offset=st.sampled_from([0, 4, 8, 12]) | st.integers(0, (1 << 64) - 1),
            device=st.sampled_from([(1, 0), (2, 0), (1, 1)]),
            version=st.sampled_from([(1, 0), (1, 3), (0, 0), (2, 1)]))
        def test_any_tensor(self, ndim, dims, offset, device, version):
            def corrupt(t, m, keep):
                # The shape array holds every dimension an accepted ndim can name (dims, then
                # 1s): a producer whose ndim runs past its shape array is beyond what any
                # consumer can check, and the size read from it would be the memory's.
                shape(*dims, *[1] * (_dlpack.MAX_NDIM - len(dims)))(t, m, keep)
                t.ndim, t.byte_offset = ndim, offset
                t.device.device_type, t.device.device_id = device
                m.version.major, m.version.minor = version
            p = Producer(corrupt=corrupt, n=16)
            try:
                a = sp.Array.from_dlpack(p, device=self.device)
            except PACKAGE_ERRORS:
                pass
            else:
                n = 1
                for d in dims[:ndim]:
                    n *= d
                self.assertEqual(a.size, n)
                if offset % 4 == 0 and offset + 4 * n <= 64:  # in the buffer: the same data
                    self.assertEqual(a.tolist(), p.buf.tolist()[offset // 4:offset // 4 + n])
                a.free()
            gc.collect()
            self.assertEqual(p.deleted, p.exported)
    else:
        def test_properties(self):  # stands for the two above, so that the skip is reported
            pass


if __name__ == "__main__":
    unittest.main()
