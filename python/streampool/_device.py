"""Devices: the CPU as a device, CUDA, OpenCL and Level Zero devices; and the library's version.

A Device makes streams and pools (Stream(device), Pool(device), device.default_pool()) and keeps
the calling thread's default stream, on which array operations without ``stream=`` run.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING

from . import _capi
from ._capi import lib as _lib
from ._checks import UINT_MAX, _flag, _integer
from ._errors import _check, _report
from ._handle import _Handle, _Using

if TYPE_CHECKING:  # each imports this module: Device imports them when it first needs them
    from ._pool import Pool
    from ._stream import Stream


def version() -> tuple[int, int, int]:
    """The library's version as (major, minor, patch)."""
    v = [ctypes.c_int() for _ in range(3)]
    _check(_lib.sp_get_version(*[ctypes.byref(x) for x in v]))
    return (v[0].value, v[1].value, v[2].value)


def _destroy_device(handle):
    _report("sp_device_destroy", _lib.sp_device_destroy(handle))


class Device(_Handle):
    """A device: the CPU as a device (``Device.host()``), a CUDA GPU (``Device.cuda(0)``), an OpenCL
    device (``Device.opencl(0)``) or a Level Zero device (``Device.level_zero(0)``).

    close() drops the handle: later calls on the Device, and passing it to Stream, Pool or Array,
    raise InvalidArgument. Its streams, pools and memory keep working (include/streampool.h,
    "Lifetimes"), but arrays then need an explicit live ``stream=``: the default stream is the
    device's.
    """

    def __init__(self, handle: int, ordinal: int = 0) -> None:
        self._handle = handle
        self._ordinal = ordinal  # the runtime's device number (DLPack's device_id)
        self._own(_destroy_device, handle)
        self._locals = threading.local()  # this thread's default Stream
        # Asked once, while the handle is live, so that a message about a closed device names it.
        # The kind decides (DLPack, the CUDA array interface); the name is for messages.
        v, s, k = ctypes.c_uint64(), ctypes.c_char_p(), ctypes.c_int()
        _check(_lib.sp_device_id(handle, ctypes.byref(v)))
        _check(_lib.sp_device_backend_name(handle, ctypes.byref(s)))
        _check(_lib.sp_device_backend_kind(handle, ctypes.byref(k)))
        self._id, self._backend, self._kind = v.value, (s.value or b"").decode(), k.value

    @classmethod
    def host(cls, checking: bool = False, max_delay_us: int = 0, seed: int = 1,
             total_memory: int = 0, device_wait: bool = True) -> Device:
        o = _capi.HostOptions()  # struct_size set: the library fills the fields it covers
        _check(_lib.sp_host_options_set_defaults(ctypes.byref(o)))
        o.checking = _flag(checking, "Device.host: checking")
        o.max_delay_us = _integer(max_delay_us, "Device.host: max_delay_us", UINT_MAX)
        o.seed = _integer(seed, "Device.host: seed", (1 << 64) - 1)
        o.total_memory = _integer(total_memory, "Device.host: total_memory")
        o.device_wait = _flag(device_wait, "Device.host: device_wait")
        h = ctypes.c_void_p()
        _check(_lib.sp_device_create_host(ctypes.byref(o), ctypes.byref(h)))
        return cls(h.value or 0)

    @classmethod
    def cuda(cls, ordinal: int = 0) -> Device:
        """CUDA GPU ``ordinal``. Raises NotAvailable without a driver or GPU."""
        return cls._gpu("cuda", ordinal)

    @classmethod
    def opencl(cls, ordinal: int = 0) -> Device:
        """OpenCL device ``ordinal`` over all platforms (PoCL's CPU device counts). Raises
        NotAvailable without libOpenCL.so.1 or such a device."""
        return cls._gpu("opencl", ordinal)

    @classmethod
    def level_zero(cls, ordinal: int = 0) -> Device:
        """Level Zero device ``ordinal``. Raises NotAvailable without the loader or a driver."""
        return cls._gpu("level_zero", ordinal)

    @staticmethod
    def cuda_count() -> int:
        return Device._count("cuda")

    @staticmethod
    def opencl_count() -> int:
        return Device._count("opencl")

    @staticmethod
    def level_zero_count() -> int:
        return Device._count("level_zero")

    @classmethod
    def _gpu(cls, runtime, ordinal):
        ordinal = _integer(ordinal, f"Device.{runtime}: ordinal", (1 << 31) - 1)
        h = ctypes.c_void_p()
        _check(getattr(_lib, f"sp_device_create_{runtime}")(ordinal, ctypes.byref(h)))
        return cls(h.value or 0, ordinal)

    @staticmethod
    def _count(runtime):
        n = ctypes.c_int()
        _check(getattr(_lib, f"sp_{runtime}_device_count")(ctypes.byref(n)))
        return n.value

    def _describe(self):
        return f"{self._backend} device {self._id}"

    @property
    def id(self) -> int:
        with _Using("Device.id", self):
            return self._id

    @property
    def backend(self) -> str:
        with _Using("Device.backend", self):
            return self._backend

    def violations(self) -> list[str]:
        """Host backend in checking mode: the ordering violations seen (should be empty)."""
        with _Using("Device.violations", self):
            n = ctypes.c_size_t()
            _check(_lib.sp_device_violation_count(self._handle, ctypes.byref(n)))
            out = []
            for i in range(n.value):
                s = ctypes.c_char_p()
                _check(_lib.sp_device_violation_message(self._handle, i, ctypes.byref(s)))
                out.append((s.value or b"").decode("utf-8", "replace"))
            return out

    def upstream_bytes(self) -> int:
        """Host backend: bytes held from the upstream (0 once everything is freed and gone)."""
        with _Using("Device.upstream_bytes", self):
            n = ctypes.c_size_t()
            _check(_lib.sp_device_upstream_bytes(self._handle, ctypes.byref(n)))
            return n.value

    def default_pool(self) -> Pool:
        """A new handle to the device's default pool."""
        with _Using("Device.default_pool", self):
            h = ctypes.c_void_p()
            _check(_lib.sp_device_default_pool(self._handle, ctypes.byref(h)))
            from ._pool import Pool
            return Pool._from_handle(h.value, self)

    def default_stream(self) -> Stream:
        """The calling thread's stream on this device; destroyed when the thread exits. A new
        one replaces it if it was closed."""
        with _Using("Device.default_stream", self):
            s = getattr(self._locals, "stream", None)
            if s is None or s.closed:
                from ._stream import Stream
                s = self._locals.stream = Stream(self)
            return s

    def close(self) -> None:
        """Drops the handle (idempotent); streams, pools and memory made from it keep working."""
        self._life.close()
