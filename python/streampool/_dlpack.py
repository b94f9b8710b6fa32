"""DLPack in ctypes: the structs of dlpack.h (legacy and versioned), capsules, and dtypes.

Exporting (Array.__dlpack__) builds a managed tensor whose deleter, a ctypes callback that lives
as long as the process, drops the export's record (and with it the exported Array); a capsule
that nobody consumed calls that deleter from its destructor. Importing (Array.from_dlpack) reads
a producer's capsule, renames it "used_..." as the protocol asks, and calls the producer's deleter
when the Array is freed.

The protocol's rules that matter here: a capsule named "dltensor" holds a DLManagedTensor, one
named "dltensor_versioned" a DLManagedTensorVersioned (DLPack 1.0, sent only to a consumer that
asked with max_version >= (1, 0)); the consumer renames the capsule when it takes ownership; the
deleter may be called from any thread.

A producer is not trusted (docs/python.md, "Interop"): Imported checks the capsule and every field
it reads before it takes ownership, and raises Malformed naming the value; the capsule then stays
the producer's, whose destructor gives the tensor back.
"""

import ctypes
import threading
from typing import Any

# DLDeviceType
CPU = 1
CUDA = 2
# dlpack.h's names of the others, for messages.
DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon",
                17: "kDLMAIA"}
# The most dimensions a tensor may have here: NumPy 2's own maximum. A bound, so that a garbage
# ndim is refused instead of read as an index into the shape array.
MAX_NDIM = 64
ADDRESS_END = 1 << (8 * ctypes.sizeof(ctypes.c_void_p))

VERSION = (1, 0)
FLAG_READ_ONLY = 1

NAME = b"dltensor"
NAME_VERSIONED = b"dltensor_versioned"
USED = b"used_dltensor"
USED_VERSIONED = b"used_dltensor_versioned"


class Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int32),
                ("dtype", DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class ManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class PackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class ManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", PackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", Tensor)]


# Typecodes of the array module and DLPack's (code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2.
_CODES = {"b": (0, 8), "B": (1, 8), "h": (0, 16), "H": (1, 16), "i": (0, 32), "I": (1, 32),
          "l": (0, 8 * ctypes.sizeof(ctypes.c_long)), "L": (1, 8 * ctypes.sizeof(ctypes.c_long)),
          "q": (0, 64), "Q": (1, 64), "f": (2, 32), "d": (2, 64)}
_TYPECODES = {}
for _code in "bBhHiIqQfd":  # 'l'/'L' alias 'q'/'Q' or 'i'/'I'; imports get the fixed-size code
    _TYPECODES[_CODES[_code]] = _code
_KIND_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


class Malformed(Exception):
    """What a producer returned is not a well-formed DLPack capsule; the message names the value.
    ``wrong_type``: it is not a capsule at all."""

    def __init__(self, message, wrong_type=False):
        super().__init__(message)
        self.wrong_type = wrong_type


def device_name(device_type):
    name = DEVICE_NAMES.get(device_type)
    return f"{device_type} ({name})" if name else str(device_type)


def dtype_of(typecode):
    code, bits = _CODES[typecode]
    return DataType(code, bits, 1)


def typecode_of(dtype):
    """The array typecode for a DLPack dtype, or None (with a name for messages)."""
    name = f"{_KIND_NAMES.get(dtype.code, f'code {dtype.code} ')}{dtype.bits}"
    if dtype.lanes != 1:
        name += f"x{dtype.lanes}"
        return None, name
    return _TYPECODES.get((dtype.code, dtype.bits)), name


# ---- capsules (CPython's C API through ctypes; PYFUNCTYPE keeps the GIL) ---------------------

def _api(name, restype, *argtypes):
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                    ctypes.c_void_p)
_capsule_is_valid = _api("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_get_pointer = _api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                            ctypes.c_char_p)
_capsule_set_name = _api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_capsule_get_name = _api("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
# The destructor gets the dying capsule: as a plain address, never as a py_object (which would
# take a new reference to an object being deallocated).
_raw_is_valid = _api("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_raw_get_pointer = _api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# What keeps an export alive until its deleter runs: managed tensor address -> (struct, shape,
# strides, on_delete).
_exports: dict[int, tuple[Any, ...]] = {}
_exports_lock = threading.Lock()


@DELETER
def _deleter(managed):
    with _exports_lock:
        record = _exports.pop(managed, None)
    if record is not None:
        record[-1]()


@_DESTRUCTOR
def _destructor(capsule):
    # Only a capsule that no consumer took still owns its tensor.
    for name in (NAME, NAME_VERSIONED):
        if _raw_is_valid(capsule, name):
            _deleter(_raw_get_pointer(capsule, name))
            return


def export(data, device_type, device_id, typecode, n, versioned, on_delete):
    """A capsule holding a 1-D tensor of ``n`` elements at ``data``; ``on_delete()`` runs when
    the consumer (or the capsule, if unconsumed) calls the deleter."""
    shape = (ctypes.c_int64 * 1)(n)
    strides = (ctypes.c_int64 * 1)(1)
    tensor = Tensor(data, Device(device_type, device_id), 1, dtype_of(typecode),
                    ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
                    ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0)
    if versioned:
        managed = ManagedTensorVersioned(PackVersion(*VERSION), None, _deleter, 0, tensor)
    else:
        managed = ManagedTensor(tensor, None, _deleter)
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = (managed, shape, strides, on_delete)
    return _capsule_new(address, NAME_VERSIONED if versioned else NAME,
                        ctypes.cast(_destructor, ctypes.c_void_p))


# PyCapsule's type (types.CapsuleType from Python 3.13 on): that of a capsule made here once.
_capsule_target = ctypes.c_char()
CAPSULE = type(_capsule_new(ctypes.addressof(_capsule_target), b"streampool.capsule_type", None))


class Imported:
    """A producer's tensor, taken from its capsule: data address (with byte_offset), device, dtype,
    element count, whether it is compact row-major, read-only, and how to give it back.

    ``device`` is what the producer's __dlpack_device__ said, (device type, device id): the tensor
    must be there. Everything read is checked before the capsule is renamed (taken); a Malformed
    leaves it the producer's."""

    def __init__(self, capsule, device):
        if type(capsule) is not CAPSULE:
            raise Malformed(f"a {type(capsule).__name__}, not a DLPack capsule", wrong_type=True)
        if _capsule_is_valid(capsule, NAME_VERSIONED):
            self.managed = _capsule_get_pointer(capsule, NAME_VERSIONED)
            m = ManagedTensorVersioned.from_address(self.managed)
            if m.version.major != VERSION[0]:
                raise Malformed(f"a DLPack {m.version.major}.{m.version.minor} tensor; streampool "
                                f"reads {VERSION[0]}.x")
            used, self.read_only = USED_VERSIONED, bool(m.flags & FLAG_READ_ONLY)
        elif _capsule_is_valid(capsule, NAME):
            self.managed = _capsule_get_pointer(capsule, NAME)
            m = ManagedTensor.from_address(self.managed)
            used, self.read_only = USED, False
        else:
            name = _capsule_get_name(capsule)
            name = "no name" if name is None else repr(name.decode("utf-8", "replace"))
            raise Malformed(f"a capsule of {name} (or of a NULL pointer), not a DLPack capsule "
                            f"'{NAME.decode()}' or '{NAME_VERSIONED.decode()}' (a consumed one is "
                            "named 'used_...')")
        t = m.dl_tensor
        self.device = (t.device.device_type, t.device.device_id)
        if self.device != tuple(device):
            raise Malformed(f"a tensor on device {self.device}, but __dlpack_device__() said "
                            f"{tuple(device)}")
        if not 0 <= t.ndim <= MAX_NDIM:
            raise Malformed(f"a tensor of ndim {t.ndim} (0 to {MAX_NDIM})")
        if t.ndim and not t.shape:
            raise Malformed(f"a tensor of ndim {t.ndim} with a NULL shape")
        shape = tuple(t.shape[i] for i in range(t.ndim))
        if any(s < 0 for s in shape):
            raise Malformed(f"a tensor of shape {shape}")
        self.shape = shape
        self.size = 1
        for s in shape:
            self.size *= s
        base = t.data or 0
        if self.size and not base:
            raise Malformed(f"a tensor of shape {shape} at NULL")
        # Where a wrapped sum would point: ctypes passes an address mod 2**64 without a word.
        if base + t.byte_offset >= ADDRESS_END:
            raise Malformed(f"a tensor at {base:#x} with byte_offset {t.byte_offset}, past the "
                            "end of the address space")
        self.data = base + t.byte_offset
        self.dtype = t.dtype
        self.deleter = ctypes.cast(m.deleter, ctypes.c_void_p).value
        self.compact = True
        if t.strides:
            expected = 1
            for i in reversed(range(t.ndim)):
                if shape[i] != 1 and t.strides[i] != expected:
                    self.compact = False
                expected *= shape[i]
        _capsule_set_name(capsule, used)  # ours now: the producer's deleter is for us to call


def release(managed, deleter):
    """Calls a producer's deleter on its managed tensor (the consumer's last duty)."""
    if deleter:
        DELETER(deleter)(managed)
