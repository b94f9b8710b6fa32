"""streampool for Python: devices, streams, pools and arrays over the C ABI (ctypes).

Every object frees what it holds through a finalizer (weakref.finalize), so objects may be
collected in any order, on any thread, including in reference cycles that gc.collect() breaks,
and from inside an allocation (a reclaim hook that runs the garbage collector). The finalizers
hold only C handles and addresses, never other Python objects, so their order never matters:

* an Array frees its memory with no stream and no pool handle (the C layer waits for the work of
  every stream that used it, through tokens), so its stream and pool may already be gone;
* a Stream waits for its work and retires; memory it used stays valid;
* a Pool drops its handle; memory still allocated keeps the pool alive until it is freed.

Array operations run on an explicit ``stream=`` or on the calling thread's default stream for the
device, which is destroyed when the thread exits (like the task-local streams of the report
that streampool was made for). Handing an array to another thread or stream needs nothing: the C
layer orders each operation after earlier work on other streams.

Misuse raises, it never reaches C (issue 9; docs/python.md, "Lifecycle and errors"). Each object
knows when it was freed (Array.free()) or closed (close() of a Stream, Pool or Device; both
idempotent): any later use of it, or passing it as an argument, raises InvalidArgument naming it.
This check is the binding's own, not the C layer's: a freed address may already hold another
array, which no check in C can tell from the old one. A free or close while another thread is in a
call on the same object takes effect when that call returns. Sizes, options and values are
checked before they reach ctypes, which would wrap -5 or 1 << 64 into a size_t without a word.
Every error is a StreampoolError: InvalidArgument (a ValueError) for a bad value, InvalidType
(an InvalidArgument and a TypeError) for a bad type.
"""

from __future__ import annotations

import array as _array
import ctypes
import functools
import json
import numbers
import operator
import os
import struct
import sys
import threading
import weakref
from typing import Any, Callable, Optional, Union

from . import _capi, _dlpack
from ._capi import lib as _lib

__all__ = ["Device", "Stream", "Pool", "Array", "StreampoolError", "InvalidArgument",
           "InvalidType", "OutOfDeviceMemory", "NotAvailable", "BackendError", "version",
           "release_native_stream", "Recording"]


class StreampoolError(Exception):
    """A failing streampool call. ``status`` is the C status code; the message names the values."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class InvalidArgument(StreampoolError, ValueError):
    """A broken precondition: a freed or closed object, a negative or overflowing size, a wrong
    length, an out-of-range value. Nothing changed."""


class InvalidType(InvalidArgument, TypeError):
    """An argument of the wrong type (a float or bool size, a string fill value, a non-buffer).
    An InvalidArgument, so one ``except`` catches every misuse, and a TypeError, as Python's own
    functions raise."""


class OutOfDeviceMemory(StreampoolError, MemoryError):
    pass


class NotAvailable(StreampoolError):
    pass


class BackendError(StreampoolError):
    pass


_errors = {_capi.INVALID_ARGUMENT: InvalidArgument, _capi.OUT_OF_DEVICE_MEMORY: OutOfDeviceMemory,
           _capi.NOT_AVAILABLE: NotAvailable, _capi.BACKEND_ERROR: BackendError}


def _check(status):
    if status != _capi.SUCCESS:
        message = _lib.sp_last_error_message().decode("utf-8", "replace")
        raise _errors.get(status, StreampoolError)(status, message)


def _invalid(message):
    return InvalidArgument(_capi.INVALID_ARGUMENT, message)


def _wrong_type(message):
    return InvalidType(_capi.INVALID_ARGUMENT, message)


# Argument checks. ctypes converts a Python int to size_t modulo 2**64 without a word (-5 becomes
# 18446744073709551611, 1 << 64 becomes 0), so every number is range-checked here before it
# reaches C. bool is refused where a number is meant: Array(True) is a bug, not a size.
SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
UINT_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_uint))) - 1
# The most bytes one allocation may ask for: the pool refuses more as "beyond any device"
# (src/core/pool_state.cpp, max_request). Checked here too, so that an overflowing n * itemsize
# is reported with both numbers instead of as whatever the product wrapped to.
MAX_ALLOCATION_BYTES = 1 << 48


def _integer(value, what, maximum=SIZE_MAX):
    """``value`` as an int in [0, maximum] (None: no maximum): InvalidType unless it is an
    integer (an int, or anything with __index__ such as numpy.int64), InvalidArgument when out of
    range."""
    if isinstance(value, bool):
        raise _wrong_type(f"{what}: {value!r} is a bool, not a count")
    try:
        v = operator.index(value)
    except TypeError:
        raise _wrong_type(f"{what}: {value!r} is a {type(value).__name__}, not an int") from None
    if v < 0:
        raise _invalid(f"{what}: {v} is negative")
    if maximum is not None and v > maximum:
        raise _invalid(f"{what}: {v} is above the maximum {maximum}")
    return v


def _flag(value, what):
    if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return int(value)
    raise _wrong_type(f"{what}: {value!r} is not a bool")


def _instance(value, cls, what):
    if not isinstance(value, cls):
        raise _wrong_type(f"{what}: {value!r} is not a {cls.__name__}")
    return value


def _shown(value, limit=200):
    """repr(value) for a message about a value that a producer or consumer handed in: cut to
    ``limit`` characters, and never raising (a hostile __repr__ must not replace the error)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any failure of foreign code is reported the same way
        return f"<a {type(value).__name__} whose repr() raised>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _raised(e):
    """``TypeName: message`` of a foreign exception, for the message of the one that replaces it
    (a hostile __str__ must not replace the error either)."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - as in _shown
        text = "<its str() raised>"
    return f"{type(e).__name__}: {text[:200]}"


def _address(value, what):
    v = _integer(value, what, maximum=(1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1)
    if v == 0:
        raise _invalid(f"{what}: the null address")
    return v


class _Life:
    """Whether an object's C handle (or memory) is still there, and who is using it right now.

    close() marks the object dead at once, so that every later use raises; the C handle itself
    goes when the last use in flight (on another thread, or further up this thread's stack: a
    reclaim hook that closes the pool that is allocating) has finished. The C ABI leaves
    destroying a handle while another thread uses it to the caller, so the caller here makes sure
    it never happens. The lock guards ``users`` and ``closed``; it is never held across a C call.
    """

    __slots__ = ("lock", "users", "closed", "finalizer", "finished", "idle")

    def __init__(self, finalizer):
        self.lock = threading.Lock()
        self.users = 0
        self.closed = False
        self.finalizer = finalizer
        self.finished = False  # the finalizer has run to its end
        self.idle = None  # a Condition on lock, made by the first close_and_wait()

    def enter(self, what, owner):
        with self.lock:
            if not self.closed:
                self.users += 1
                return
        raise _invalid(f"{what}: {owner._describe()} was {owner._dead_verb}")

    def try_enter(self):
        """enter() for a caller with a fallback: False (and no use) when closed."""
        with self.lock:
            if self.closed:
                return False
            self.users += 1
            return True

    def leave(self):
        with self.lock:
            self.users -= 1
            last = self.closed and self.users == 0
        if last:
            self._finalize()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            now = self.users == 0
        if now:
            self._finalize()

    def close_and_wait(self):
        """close(), then wait until the handle is gone: uses in flight on other threads end
        first. For a caller that must not go on while the handle lives (a stream's owner about
        to destroy it); never from inside a use of this object on the same thread."""
        self.close()
        with self.lock:
            if self.idle is None:
                self.idle = threading.Condition(self.lock)
            while not self.finished:
                self.idle.wait()

    def _finalize(self):
        try:
            self.finalizer()
        finally:  # a waiter in close_and_wait must never hang on a finalizer that raised
            with self.lock:
                self.finished = True
                if self.idle is not None:
                    self.idle.notify_all()


class _Using:
    """``with _Using(what, a, b):`` marks a and b (Arrays, Streams, Pools, Devices) in use for the
    call ``what``, raising InvalidArgument naming the first one that was freed or closed."""

    __slots__ = ("what", "objs", "entered")

    def __init__(self, what, *objs):
        self.what = what
        self.objs = objs
        self.entered = []

    def __enter__(self):
        try:
            for o in self.objs:
                o._life.enter(self.what, o)
                self.entered.append(o)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        while self.entered:
            self.entered.pop()._life.leave()


def release_native_stream(native: int) -> int:
    """Tells streampool that the native stream ``native`` (an int: a CUstream that streampool was
    given, e.g. by DLPack's ``__dlpack__(stream=...)``) is about to be destroyed by its owner: a
    last marker is recorded on it, and streampool never touches it again; nothing waits. Returns
    how many wrappers streampool had of it (0: it did not know the handle). streampool.cupy does
    this for every CuPy stream before CuPy destroys it."""
    native = _integer(native, "release_native_stream: native",
                      (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1)
    n = ctypes.c_size_t()
    _check(_lib.sp_native_stream_release(native, ctypes.byref(n)))
    return n.value


def version() -> tuple[int, int, int]:
    """The library's version as (major, minor, patch)."""
    v = [ctypes.c_int() for _ in range(3)]
    _check(_lib.sp_get_version(*[ctypes.byref(x) for x in v]))
    return (v[0].value, v[1].value, v[2].value)


# Finalizers: module-level functions over plain integers, so they keep no object alive and run
# correctly in any order. A failure cannot be raised from a finalizer; it is reported instead.
def _report(what, status):
    if status != _capi.SUCCESS:
        msg = _lib.sp_last_error_message().decode("utf-8", "replace")
        print(f"streampool: {what} failed in a finalizer: {msg}", file=sys.stderr)


def _destroy_device(handle):
    _report("sp_device_destroy", _lib.sp_device_destroy(handle))


def _destroy_stream(handle, release):
    if release[0]:  # a wrapper, or release(): a last marker, no wait
        _report("sp_stream_release", _lib.sp_stream_release(handle))
    else:
        _report("sp_stream_destroy", _lib.sp_stream_destroy(handle))


def _destroy_pool(handle, hook_ids):
    _report("sp_pool_destroy", _lib.sp_pool_destroy(handle))  # removes its hooks in C first
    for _, key in hook_ids:
        _hooks.pop(key, None)


def _free(ptr):
    # No pool, no stream: the finaliser form. Never blocks on the device.
    _report("sp_pool_deallocate", _lib.sp_pool_deallocate(None, ptr, None))


def _give_back(ptr, registered, managed, deleter):
    # An Array over a DLPack producer's memory: streampool's work on it ends first (a host wait,
    # as the producer may reuse the memory at once), then the producer gets it back.
    if registered:
        _report("sp_memory_unregister", _lib.sp_memory_unregister(ptr))
    elif ptr:
        # Known through another range (imported twice, or streampool's own memory coming back).
        # If that range is gone, its end already waited for everything streampool did here.
        _lib.sp_memory_synchronize(ptr)
    _dlpack.release(managed, deleter)


class Device:
    """A device: the CPU as a device (``Device.host()``), a CUDA GPU (``Device.cuda(0)``), an OpenCL
    device (``Device.opencl(0)``) or a Level Zero device (``Device.level_zero(0)``).

    close() drops the handle: later calls on the Device, and passing it to Stream, Pool or Array,
    raise InvalidArgument. Its streams, pools and memory keep working (include/streampool.h,
    "Lifetimes"), but arrays then need an explicit live ``stream=``: the default stream is the
    device's.
    """

    _dead_verb = "closed"

    def __init__(self, handle: int, ordinal: int = 0) -> None:
        self._handle = handle
        self._ordinal = ordinal  # the runtime's device number (DLPack's device_id)
        self._life = _Life(weakref.finalize(self, _destroy_device, handle))
        self._locals = threading.local()  # this thread's default Stream
        # Asked once, while the handle is live, so that a message about a closed device names it.
        v, s = ctypes.c_uint64(), ctypes.c_char_p()
        _check(_lib.sp_device_id(handle, ctypes.byref(v)))
        _check(_lib.sp_device_backend_name(handle, ctypes.byref(s)))
        self._id, self._backend = v.value, (s.value or b"").decode()

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

    def __repr__(self):
        return self._describe() + (" (closed)" if self.closed else "")

    @property
    def closed(self) -> bool:
        return self._life.closed

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
            return Pool._from_handle(h.value, self)

    def default_stream(self) -> Stream:
        """The calling thread's stream on this device; destroyed when the thread exits. A new
        one replaces it if it was closed."""
        with _Using("Device.default_stream", self):
            s = getattr(self._locals, "stream", None)
            if s is None or s.closed:
                s = self._locals.stream = Stream(self)
            return s

    def close(self) -> None:
        """Drops the handle (idempotent); streams, pools and memory made from it keep working."""
        self._life.close()


class Stream:
    """An in-order queue of work on a device. Closing (or collecting) it waits for its work;
    close() is idempotent, and a closed Stream raises InvalidArgument wherever it is used."""

    _dead_verb = "closed"

    def __init__(self, device: Device) -> None:
        _instance(device, Device, "Stream: device")
        with _Using("Stream", device):
            h = ctypes.c_void_p()
            _check(_lib.sp_stream_create(device._handle, ctypes.byref(h)))
        self._init(h.value, device)

    @classmethod
    def wrap(cls, device: Device, native: int) -> Stream:
        """Wraps a native stream (an int: a CUstream) that streampool will never destroy. The
        wrapper must go first: close() it (waits for the stream's work), release() it (does not
        wait), or drop it (its finalizer releases it) before the stream's owner destroys it."""
        _instance(device, Device, "Stream.wrap: device")
        native = _integer(native, "Stream.wrap: native",
                          (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1)
        self = cls.__new__(cls)
        with _Using("Stream.wrap", device):
            h = ctypes.c_void_p()
            _check(_lib.sp_stream_wrap(device._handle, native, ctypes.byref(h)))
        self._init(h.value, device, release=True)
        return self

    def _init(self, handle, device, release=False):
        self._handle, self.device = handle, device
        # How the finalizer ends the stream: released (no wait) or destroyed (waits); a cell, so
        # that close() and release() can choose after the finalizer was made.
        self._release = [release]
        # Collection goes through the _Life too (unlike the other objects'): others hold a
        # stream's _Life without the Stream (streampool.cupy's blocks free on it while it lives),
        # and must see it closed once the handle is gone, at interpreter exit too.
        self._life = _Life(functools.partial(_destroy_stream, handle, self._release))
        weakref.finalize(self, self._life.close)

    def _describe(self):
        return f"Stream {self._handle:#x} on {self.device._describe()}"

    def __repr__(self):
        return self._describe() + (" (closed)" if self.closed else "")

    @property
    def closed(self) -> bool:
        return self._life.closed

    def synchronize(self) -> None:
        with _Using("Stream.synchronize", self):
            _check(_lib.sp_stream_synchronize(self._handle))

    def wait(self, other: Stream) -> None:
        """Makes this stream wait (on the device) for the work submitted so far to ``other``."""
        _instance(other, Stream, "Stream.wait: other")
        with _Using("Stream.wait", self, other):
            _check(_lib.sp_stream_wait_stream(self._handle, other._handle))

    @property
    def native(self) -> int:
        with _Using("Stream.native", self):
            v = ctypes.c_void_p()
            _check(_lib.sp_stream_native(self._handle, ctypes.byref(v)))
            return v.value or 0

    def close(self) -> None:
        """Waits for the stream's work and retires it (idempotent)."""
        self._end(release=False)

    def release(self) -> None:
        """Ends the stream without waiting for its work (idempotent): for a wrapped stream that
        its owner is about to destroy. A last marker is recorded on it and streampool never
        touches it again once this returns (a call using it on another thread finishes first);
        memory it used is reused elsewhere only after that marker. A stream streampool created
        is destroyed as by close() (it waits). Not from inside a reclaim hook of a call on this
        stream."""
        self._end(release=True, wait_for_users=True)

    def _end(self, release, wait_for_users=False):
        """close() or release(); with wait_for_users, returns only once the handle is gone
        (a call in flight on another thread ends first)."""
        with self._life.lock:
            if not self._life.closed:
                self._release[0] = release
        if wait_for_users:
            self._life.close_and_wait()
        else:
            self._life.close()


def _stream_for(stream, device, what):
    """``stream``, checked to be a Stream on ``device``, or the thread's default stream there."""
    if stream is None:
        if device is None:
            raise _invalid(f"{what}: no device to take a default stream from; pass stream=")
        if device.closed:  # its memory still works, but the default stream is the device's
            raise _invalid(f"{what}: {device._describe()} was closed; pass a live stream=")
        return device.default_stream()
    _instance(stream, Stream, f"{what}: stream")
    if device is not None and stream.device._id != device._id:
        raise _invalid(f"{what}: {stream!r} is not on {device._describe()}")
    return stream


# Reclaim hooks: one C trampoline for the life of the process (so no ctypes callback is ever freed
# while C might call it), dispatching on an integer key to the Python callable.
_hooks: dict[int, Callable[[int], object]] = {}
_hook_keys = iter(range(1, 1 << 62))


@_capi.RECLAIM_FN
def _trampoline(user, nbytes):
    fn = _hooks.get(user or 0)
    if fn is not None:
        fn(nbytes)  # ctypes reports (and swallows) an exception raised here


class Pool:
    """A stream-ordered sub-allocating pool: ``Pool(device, memory_limit=...)`` or
    ``device.default_pool()``.

    close() drops this handle (idempotent): the Pool then raises InvalidArgument wherever it is
    used, but arrays allocated from it keep working until they are freed.

    share_between_streams: False (the default) keeps the memory each live stream frees for that
    stream until growth would be refused, so that threads on their own streams scale; True lets
    every stream reuse it behind device-side waits, for the tightest memory (docs/threads.md).

    large_cache_bytes: how many bytes of large blocks (up to 16 MiB) each stream keeps after
    freeing them, for its next request of their size class or of one a little smaller (default
    96 MiB; 0: none; docs/large-blocks.md, "The shelf").
    """

    _dead_verb = "closed"

    def __init__(self, device: Device, memory_limit: int = 0, small_max: Optional[int] = None,
                 stream_cache_bytes: Optional[int] = None, poison_on_free: bool = False,
                 share_between_streams: bool = False,
                 large_cache_bytes: Optional[int] = None) -> None:
        _instance(device, Device, "Pool: device")
        o = _capi.PoolOptions()  # struct_size set: the library fills the fields it covers
        _check(_lib.sp_pool_options_set_defaults(ctypes.byref(o)))
        o.memory_limit = _integer(memory_limit, "Pool: memory_limit")
        if small_max is not None:
            o.small_max = _integer(small_max, "Pool: small_max")
        if stream_cache_bytes is not None:
            o.stream_cache_bytes = _integer(stream_cache_bytes, "Pool: stream_cache_bytes")
        o.poison_on_free = _flag(poison_on_free, "Pool: poison_on_free")
        o.share_between_streams = _flag(share_between_streams, "Pool: share_between_streams")
        if large_cache_bytes is not None:
            o.large_cache_bytes = _integer(large_cache_bytes, "Pool: large_cache_bytes")
        h = ctypes.c_void_p()
        with _Using("Pool", device):
            _check(_lib.sp_pool_create(device._handle, ctypes.byref(o), ctypes.byref(h)))
        self._init(h.value, device)

    @classmethod
    def _from_handle(cls, handle, device):
        self = cls.__new__(cls)
        self._init(handle, device)
        return self

    def _init(self, handle, device):
        self._handle = handle
        self.device = device  # None for the PyTorch plug-in's pools (streampool.torch.pool())
        self._hook_ids = []  # (C hook id, _hooks key) of each hook added through this handle
        self._life = _Life(weakref.finalize(self, _destroy_pool, handle, self._hook_ids))

    def _describe(self):
        where = self.device._describe() if self.device is not None else "the PyTorch plug-in"
        return f"Pool {self._handle:#x} on {where}"

    def __repr__(self):
        return self._describe() + (" (closed)" if self.closed else "")

    @property
    def closed(self) -> bool:
        return self._life.closed

    def allocate(self, nbytes: int, stream: Optional[Stream] = None) -> int:
        """Raw stream-ordered allocation; returns the address. Free with deallocate()."""
        nbytes = _integer(nbytes, "Pool.allocate: nbytes")
        with _Using("Pool.allocate", self):
            stream = _stream_for(stream, self.device, "Pool.allocate")
            with _Using("Pool.allocate", stream):
                p = ctypes.c_void_p()
                _check(_lib.sp_pool_allocate(self._handle, nbytes, stream._handle,
                                             ctypes.byref(p)))
                return p.value or 0

    def deallocate(self, ptr: int, stream: Optional[Stream] = None) -> None:
        """Frees an address from allocate(); with no stream, after the work of every stream
        that used it. The C layer refuses addresses it did not hand out, and double frees."""
        ptr = _address(ptr, "Pool.deallocate: ptr")
        if stream is None:
            with _Using("Pool.deallocate", self):
                _check(_lib.sp_pool_deallocate(self._handle, ptr, None))
            return
        _stream_for(stream, self.device, "Pool.deallocate")  # a Stream of the pool's device
        with _Using("Pool.deallocate", self, stream):
            _check(_lib.sp_pool_deallocate(self._handle, ptr, stream._handle))

    def record_use(self, ptr: int, stream: Stream) -> None:
        ptr = _address(ptr, "Pool.record_use: ptr")
        _instance(stream, Stream, "Pool.record_use: stream")  # None is no stream here
        _stream_for(stream, self.device, "Pool.record_use")
        with _Using("Pool.record_use", self, stream):
            _check(_lib.sp_pool_record_use(self._handle, ptr, stream._handle))

    def statistics(self) -> dict[str, int]:
        with _Using("Pool.statistics", self):
            st = _capi.PoolStatistics()
            _check(_lib.sp_pool_get_statistics(self._handle, ctypes.byref(st)))
            return {name: getattr(st, name) for name, _ in st._fields_ if name != "struct_size"}

    @property
    def memory_limit(self) -> int:
        with _Using("Pool.memory_limit", self):
            v = ctypes.c_size_t()
            _check(_lib.sp_pool_get_memory_limit(self._handle, ctypes.byref(v)))
            return v.value

    @memory_limit.setter
    def memory_limit(self, nbytes: int) -> None:
        nbytes = _integer(nbytes, "Pool.memory_limit")
        with _Using("Pool.memory_limit", self):
            _check(_lib.sp_pool_set_memory_limit(self._handle, nbytes))

    def snapshot(self) -> dict[str, Any]:
        """Every range and block of the pool, its stream caches and statistics, as the JSON of
        docs/snapshot.schema.json parsed (docs/memory-picture.md). ``streampool.report`` draws
        it; ``json.dump`` saves it."""
        return json.loads(self.snapshot_json())

    def snapshot_json(self) -> str:
        """snapshot() as the library's JSON text."""
        with _Using("Pool.snapshot", self):
            text, n = ctypes.c_void_p(), ctypes.c_size_t()
            _check(_lib.sp_pool_snapshot_json(self._handle, ctypes.byref(text), ctypes.byref(n)))
            return ctypes.string_at(text.value, n.value).decode() if text.value else ""

    def trim(self) -> int:
        with _Using("Pool.trim", self):
            v = ctypes.c_size_t()
            _check(_lib.sp_pool_trim(self._handle, ctypes.byref(v)))
            return v.value

    def reset_peak_statistics(self) -> None:
        """Starts ``peak_live_bytes`` and ``peak_reserved_bytes`` again from the live and reserved
        bytes of now (like ``torch.cuda.reset_peak_memory_stats``); the pool's growth is unchanged."""
        with _Using("Pool.reset_peak_statistics", self):
            _check(_lib.sp_pool_reset_peak_statistics(self._handle))

    def add_reclaim_hook(self, fn: Callable[[int], object]) -> tuple[int, int]:
        """``fn(bytes_needed)`` runs when an allocation would fail, on the allocating thread, with
        no pool lock held: it may free memory, e.g. by calling gc.collect(). Returns an id."""
        if not callable(fn):
            raise _wrong_type(f"Pool.add_reclaim_hook: {fn!r} is not callable")
        with _Using("Pool.add_reclaim_hook", self):
            key = next(_hook_keys)
            _hooks[key] = fn
            hid = ctypes.c_uint64()
            try:
                _check(_lib.sp_pool_add_reclaim_hook(self._handle, _trampoline, key,
                                                     ctypes.byref(hid)))
            except BaseException:
                del _hooks[key]
                raise
            self._hook_ids.append((hid.value, key))
            return (hid.value, key)

    def remove_reclaim_hook(self, hook_id: tuple[int, int]) -> None:
        with _Using("Pool.remove_reclaim_hook", self):
            if not (isinstance(hook_id, tuple) and len(hook_id) == 2):
                raise _wrong_type(f"Pool.remove_reclaim_hook: {hook_id!r} is not an id from "
                                  "add_reclaim_hook")
            # Both halves, and as the pair they were issued: halves of two hooks would remove
            # one hook in C and the other's callable here, leaving neither.
            hid = _integer(hook_id[0], f"Pool.remove_reclaim_hook: {hook_id!r}: id", (1 << 64) - 1)
            key = _integer(hook_id[1], f"Pool.remove_reclaim_hook: {hook_id!r}: key", None)
            if (hid, key) not in self._hook_ids:
                raise _invalid(f"Pool.remove_reclaim_hook: no hook {hook_id!r} on {self!r}")
            _check(_lib.sp_pool_remove_reclaim_hook(self._handle, hid))
            _hooks.pop(key, None)
            self._hook_ids.remove((hid, key))

    def close(self) -> None:
        """Drops this handle (idempotent); memory still allocated keeps the pool alive."""
        self._life.close()

    # The allocation log (docs/python.md, "Recording a live program").

    def start_recording(self, path: Union[str, os.PathLike[str]]) -> None:
        """Writes every allocation and free of this pool from now on to ``path`` (created or
        truncated) in the trace format of tools/replay: ``alloc <id> <size> <stream>`` with the
        requested size, ``free_completed <id> <size> <stream>`` at the free. Blocks allocated
        before are written neither at their allocation nor at their free. A recording in progress
        is closed first. InvalidArgument naming the path and the reason when it cannot be opened
        (a recording in progress then goes on)."""
        raw = _path(path, "Pool.start_recording: path")
        with _Using("Pool.start_recording", self):
            _check(_lib.sp_pool_record_start(self._handle, raw))

    def stop_recording(self) -> int:
        """Ends the recording and closes its file; returns the alloc and free lines written (0
        when nothing was recording)."""
        with _Using("Pool.stop_recording", self):
            n = ctypes.c_uint64()
            _check(_lib.sp_pool_record_stop(self._handle, ctypes.byref(n)))
            return n.value

    def record_phase(self, name: str) -> None:
        """Writes a phase line ``# name`` (tools/replay reports per phase the names
        ``step k begin`` and one-word names) and flushes the file. Nothing when not recording."""
        if not isinstance(name, str):
            raise _wrong_type(f"Pool.record_phase: name {name!r} is not a str")
        if "\0" in name:
            raise _invalid(f"Pool.record_phase: name {name!r} contains a NUL character")
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 for it
            raise _invalid(f"Pool.record_phase: name {name!r} is not valid Unicode text "
                           f"({e.reason} at {e.start})") from None
        with _Using("Pool.record_phase", self):
            _check(_lib.sp_pool_record_phase(self._handle, raw))

    def recording(self, path: Union[str, os.PathLike[str]]) -> Recording:
        """``with pool.recording(path) as rec:`` records the block's allocations and frees to
        ``path``; on leaving it (also by an exception) the recording stops and ``rec.events`` is
        the number of lines written."""
        _path(path, "Pool.recording: path")
        return Recording(self, path)


def _path(path, what):
    """A file path for C: bytes of a str or os.PathLike, refused when empty or with a NUL."""
    try:
        raw = os.fsencode(path)
    except TypeError:
        raise _wrong_type(f"{what}: {path!r} is a {type(path).__name__}, not a str or "
                          "os.PathLike") from None
    except UnicodeEncodeError as e:  # a lone surrogate that the file system encoding refuses
        raise _invalid(f"{what}: {path!r} has no file system encoding ({e.reason} at "
                       f"{e.start})") from None
    if not raw:
        raise _invalid(f"{what}: the path is empty")
    if b"\0" in raw:
        raise _invalid(f"{what}: {path!r} contains a NUL character")
    return raw


class Recording:
    """What ``Pool.recording(path)`` returns: a context manager that starts the pool's
    allocation log on entry and stops it on exit. ``events`` is None until then."""

    def __init__(self, pool: Pool, path: Union[str, os.PathLike[str]]) -> None:
        self.pool = pool
        self.path = path
        self.events: Optional[int] = None

    def __enter__(self) -> Recording:
        self.pool.start_recording(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.events = self.pool.stop_recording()
        except StreampoolError:
            if exc[0] is None:
                raise  # else the body's exception goes on, not the stop's


# The array module's typecodes that struct packs the same way ('u' and 'w' are characters, not
# numbers, and sp_fill has no pattern for them). Integer ranges come from the item size.
_itemsizes = {c: _array.array(c).itemsize for c in "bBhHiIlLqQfd"}


def _typecode(typecode, what):
    if not isinstance(typecode, str):
        raise _wrong_type(f"{what}: typecode {typecode!r} is not a str")
    if typecode not in _itemsizes:
        raise _invalid(f"{what}: typecode {typecode!r} is not one of "
                       f"{''.join(_itemsizes)!r}")
    return typecode


def _pattern(typecode, value, what):
    """The fill pattern for ``value``: the little-endian integer of its bytes as one element."""
    if isinstance(value, bool):
        raise _wrong_type(f"{what}: {value!r} is a bool, not a number for typecode {typecode!r}")
    if typecode in "fd":
        if not isinstance(value, numbers.Real):
            raise _wrong_type(f"{what}: {value!r} is a {type(value).__name__}, not a number")
        try:
            # Standard size (the same as native for 'f' and 'd'): native packing would turn a
            # double too big for a float into inf without a word.
            raw = struct.pack("=" + typecode, float(value))
        except OverflowError:  # an int too big for a double, or a double too big for a float
            raise _invalid(f"{what}: {value!r} is out of range for typecode {typecode!r}") from None
        except (TypeError, ValueError) as e:  # a numbers.Real whose __float__ fails
            raise _invalid(f"{what}: {value!r} does not convert to a float: {e}") from e
    else:
        try:
            v = operator.index(value)  # 3.0 is refused: an int array holds no fractions
        except TypeError:
            raise _wrong_type(f"{what}: {value!r} is a {type(value).__name__}, not an int for "
                              f"typecode {typecode!r}") from None
        bits = 8 * _itemsizes[typecode]
        lo, hi = (0, (1 << bits) - 1) if typecode.isupper() else (-(1 << (bits - 1)),
                                                                   (1 << (bits - 1)) - 1)
        if not lo <= v <= hi:
            raise _invalid(f"{what}: {v} is out of range for typecode {typecode!r} "
                           f"({lo} to {hi})")
        # Native sizes, as array.array has them: "=l" would pack 4 bytes for an 8-byte 'l'.
        raw = struct.pack(typecode, v)
    return int.from_bytes(raw, sys.byteorder)


def _buffer(data, what):
    try:
        return memoryview(data)
    except TypeError:
        raise _wrong_type(f"{what}: a {type(data).__name__} is not a buffer (array.array, bytes, "
                          "bytearray, memoryview, numpy array...)") from None
    except (ValueError, BufferError) as e:  # a released memoryview; an exporter that refuses
        raise _invalid(f"{what}: the {type(data).__name__} gives no buffer: {e}") from e


class Array:
    """``n`` elements of ``typecode`` (the array module's codes: 'f', 'd', 'i', 'q', 'B', ...) in
    device memory from ``pool``. Freed by its finalizer, in any order relative to its stream and
    pool, or by free(): after that every method raises InvalidArgument naming the array (its
    address may already hold another array), while ``size``, ``typecode``, ``nbytes`` and
    ``freed`` stay readable."""

    _dead_verb = "freed"

    def __init__(self, n: int, typecode: str = "f", pool: Optional[Pool] = None,
                 device: Optional[Device] = None, stream: Optional[Stream] = None) -> None:
        typecode = _typecode(typecode, "Array")
        n = _integer(n, "Array: size", maximum=None)  # the byte count is checked below
        itemsize = _itemsizes[typecode]
        nbytes = n * itemsize  # exact: a Python int never wraps, so the check below is sound
        if nbytes > MAX_ALLOCATION_BYTES:
            raise _invalid(f"Array: {n} elements of typecode {typecode!r} are {nbytes} bytes, "
                           f"beyond the most any device can hold ({MAX_ALLOCATION_BYTES} bytes)")
        if pool is None:
            if device is None:
                raise _invalid("Array: give a pool or a device")
            pool = _instance(device, Device, "Array: device").default_pool()
        else:
            _instance(pool, Pool, "Array: pool")
            if device is not None and (pool.device is None or
                                       _instance(device, Device, "Array: device")._id
                                       != pool.device._id):
                raise _invalid(f"Array: {pool!r} is not on {device!r}")
        self.pool = pool
        self.device = pool.device
        self.typecode = typecode
        self.itemsize = itemsize
        self.size = n
        self.nbytes = nbytes
        self._ptr = pool.allocate(max(nbytes, 1), stream)
        self._life = _Life(weakref.finalize(self, _free, self._ptr))

    @classmethod
    def from_buffer(cls, data: Any, pool: Optional[Pool] = None, device: Optional[Device] = None,
                    stream: Optional[Stream] = None, typecode: Optional[str] = None) -> Array:
        """An upload of ``data`` (array.array, memoryview, bytes, numpy array...)."""
        mv = _buffer(data, "Array.from_buffer")
        if typecode is None:
            typecode = getattr(data, "typecode", None) or _format_to_typecode(mv.format)
        typecode = _typecode(typecode, "Array.from_buffer")
        n, rest = divmod(mv.nbytes, _itemsizes[typecode])
        if rest:
            raise _invalid(f"Array.from_buffer: {mv.nbytes} bytes are not a whole number of "
                           f"typecode {typecode!r} elements ({_itemsizes[typecode]} bytes each)")
        a = cls(n, typecode, pool=pool, device=device, stream=stream)
        a.upload(mv, stream=stream)
        return a

    def _describe(self):
        return f"Array of {self.size} {self.typecode!r} at {self._ptr:#x}"

    def __repr__(self):
        return self._describe() + (" (freed)" if self.freed else "")

    def __len__(self) -> int:
        return self.size

    @property
    def freed(self) -> bool:
        return self._life.closed

    @property
    def ptr(self) -> int:
        """The device address; InvalidArgument once freed (it may hold another array by then)."""
        with _Using("Array.ptr", self):
            return self._ptr

    def _use(self, stream, what, *others):
        """Marks this array, ``others`` and the stream in use (raising for the first one freed or
        closed, this array first); returns the context manager and the stream."""
        if self._life.closed:
            raise _invalid(f"{what}: {self._describe()} was freed")
        stream = _stream_for(stream, self.device, what)
        return _Using(what, self, *others, stream), stream

    def upload(self, data: Any, stream: Optional[Stream] = None) -> None:
        """Copies host data in; returns once it is staged (``data`` may be reused at once)."""
        mv = _buffer(data, "Array.upload")
        using, stream = self._use(stream, "Array.upload")
        with using:
            if mv.nbytes != self.nbytes:
                raise _invalid(f"Array.upload: {mv.nbytes} bytes of host data for {self!r} "
                               f"({self.nbytes} bytes)")
            if self.nbytes == 0:
                return
            buf, keep = _host_pointer(mv, writable=False)
            _check(_lib.sp_memcpy_to_device(stream._handle, self._ptr, buf, self.nbytes))
            del keep

    def download(self, out: Any = None, stream: Optional[Stream] = None) -> Any:
        """Copies the array to host memory: into ``out`` (a writable buffer), or a new
        array.array. Returns once the data is there."""
        given = None if out is None else _buffer(out, "Array.download")
        using, stream = self._use(stream, "Array.download")
        with using:
            if given is None:
                out = _array.array(self.typecode, bytes(self.nbytes))
                mv = memoryview(out)
            else:
                mv = given
            if mv.nbytes != self.nbytes:
                raise _invalid(f"Array.download: a host buffer of {mv.nbytes} bytes for {self!r} "
                               f"({self.nbytes} bytes)")
            if self.nbytes:
                buf, keep = _host_pointer(mv, writable=True)
                _check(_lib.sp_memcpy_to_host(stream._handle, buf, self._ptr, self.nbytes))
                del keep
            return out

    def fill(self, value: Union[int, float], stream: Optional[Stream] = None) -> None:
        """Sets every element to ``value`` (an int for integer typecodes, any real number for
        'f' and 'd'); out of range is InvalidArgument, a wrong type InvalidType."""
        using, stream = self._use(stream, "Array.fill")
        pattern = _pattern(self.typecode, value, "Array.fill")
        with using:
            _check(_lib.sp_fill(stream._handle, self._ptr, pattern, self.itemsize, self.size))

    def copy_from(self, other: Array, stream: Optional[Stream] = None) -> None:
        """Copies ``other`` (an Array of the same typecode and length on the same device) in."""
        _instance(other, Array, "Array.copy_from")
        using, stream = self._use(stream, "Array.copy_from", other)
        with using:
            if other.typecode != self.typecode or other.size != self.size:
                raise _invalid(f"Array.copy_from: {other!r} into {self!r}: the typecodes and "
                               "lengths must match")
            if other.device._id != self.device._id:
                raise _invalid(f"Array.copy_from: {other!r} is on {other.device._describe()}, "
                               f"{self!r} on {self.device._describe()}")
            # From itself: nothing changes (and the backend's memcpy must not see overlap).
            if self.nbytes and other is not self:
                _check(_lib.sp_memcpy_device(stream._handle, self._ptr, other._ptr, self.nbytes))

    def tolist(self, stream: Optional[Stream] = None) -> list[Any]:
        return self.download(stream=stream).tolist()

    def numpy(self, stream: Optional[Stream] = None) -> Any:
        """A numpy copy (needs numpy)."""
        import numpy as np
        return np.frombuffer(self.download(stream=stream), dtype=self.typecode).copy()

    def free(self) -> None:
        """Frees now (otherwise the finalizer does); idempotent. A download or other use in
        flight on another thread finishes first, and so does every DLPack export still held by
        a consumer (the memory goes when the last one is deleted). An Array from from_dlpack
        gives the memory back to its producer."""
        self._life.close()

    # ---- interop: DLPack and the CUDA array interface (docs/python.md, "Interop") ----------

    def _dl_device(self, what):
        backend = self.device._backend if self.device is not None else None
        if backend == "host":
            return (_dlpack.CPU, 0)
        if backend == "cuda":
            return (_dlpack.CUDA, self.device._ordinal)
        raise BufferError(f"{what}: {self!r} is on "
                          f"{self.device._describe() if self.device else 'no device'}: DLPack "
                          "covers the host and CUDA devices")

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0) on the host device, (kDLCUDA, ordinal) on a CUDA device."""
        with _Using("Array.__dlpack_device__", self):
            return self._dl_device("Array.__dlpack_device__")

    def __dlpack__(self, *, stream: Optional[int] = None,
                   max_version: Optional[tuple[int, int]] = None,
                   dl_device: Optional[tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule of this array's memory, without a copy (the Python array API's
        protocol). ``stream``: the consumer's CUDA stream (an int; None is the legacy default
        stream, -1 asks for no ordering), which is ordered after every write streampool knows of
        and becomes a user of the memory: streampool's later work on it and its free wait for
        what the consumer submits there. On the host device the call waits for that work
        instead. The array stays alive, and free() waits, until the consumer deletes the
        tensor. Malformed arguments raise InvalidType/InvalidArgument; well-formed requests that
        streampool cannot meet (a copy, another device, a stream on the host) BufferError."""
        # The consumer's arguments, checked before anything is done (issue 45).
        if copy is not None:
            copy = _flag(copy, "Array.__dlpack__: copy")
        if max_version is not None:
            max_version = _dl_pair(max_version, "Array.__dlpack__: max_version",
                                   ("major", "minor"), (1 << 32) - 1)
        if dl_device is not None:
            dl_device = _dl_pair(dl_device, "Array.__dlpack__: dl_device",
                                 ("device type", "device id"), _INT32_MAX)
        if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int)):
            raise _wrong_type(f"Array.__dlpack__: stream {_shown(stream)} is not an int")
        with _Using("Array.__dlpack__", self):
            if copy:
                raise BufferError("Array.__dlpack__: copy=True: streampool exports its memory "
                                  "itself, never a copy")
            where = self._dl_device("Array.__dlpack__")
            if dl_device is not None and dl_device != where:
                raise BufferError(f"Array.__dlpack__: dl_device {dl_device} asks for a "
                                  f"copy; {self!r} is on {where}")
            if where[0] == _dlpack.CUDA:
                if stream is None:
                    stream = 1  # the protocol's default: CUDA's legacy default stream
                if stream != -1 and self.nbytes:
                    if "cupy" in sys.modules:  # the stream may be CuPy's, destroyed unawaited
                        from .cupy import hook_streams
                        hook_streams()
                    with _Using("Array.__dlpack__", self.device):
                        _check(_lib.sp_memory_acquire_native(
                            self.device._handle, self._ptr,
                            _address(stream or 1, "Array.__dlpack__: stream")))
            else:
                if stream not in (None, -1):
                    raise BufferError(f"Array.__dlpack__: stream {stream!r} on the host device, "
                                      "which has no streams for a consumer: pass None")
                if self.nbytes:
                    _check(_lib.sp_memory_synchronize(self._ptr))
            versioned = max_version is not None and max_version[0] >= _dlpack.VERSION[0]
            self._life.enter("Array.__dlpack__", self)  # left by the consumer's deleter
            try:
                return _dlpack.export(self._ptr, where[0], where[1], self.typecode, self.size,
                                      versioned, _exported(self))
            except BaseException:
                self._life.leave()
                raise

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface, version 3, on a CUDA device (AttributeError elsewhere). Its
        ``stream`` is this thread's default stream, ordered after every write streampool knows
        of: the consumer waits for it. What the consumer then does is its own to order."""
        if self.device is None or self.device._backend != "cuda":
            raise AttributeError("__cuda_array_interface__: only on a CUDA device; "
                                 f"{self!r} is on "
                                 f"{self.device._describe() if self.device else 'no device'}")
        using, stream = self._use(None, "Array.__cuda_array_interface__")
        with using:
            if self.nbytes:
                _check(_lib.sp_memory_acquire(stream._handle, self._ptr))
            return {"shape": (self.size,), "typestr": _typestrs[self.typecode],
                    "data": (self._ptr, False), "version": 3, "strides": None,
                    "stream": stream.native}

    @classmethod
    def from_dlpack(cls, obj: Any, device: Optional[Device] = None,
                    stream: Optional[Stream] = None) -> Array:
        """An Array over the memory of ``obj`` (a torch tensor, a CuPy or NumPy array: anything
        with ``__dlpack__``), without a copy: its elements, flattened, as one dimension. ``obj``
        must be compact (C-contiguous) and writable, of an integer or float dtype that has a
        typecode. ``device``: the streampool device the memory is on (on CUDA, default
        ``Device.cuda(ordinal)``; host memory needs ``Device.host(...)``). The producer orders
        ``stream`` (default: this thread's) after its writes. Freeing the Array waits (on the
        host) for streampool's work on the memory, then gives it back to the producer.

        The producer is not trusted: a malformed ``__dlpack_device__`` answer or capsule, or an
        exception raised by either method (its ``__cause__``), is InvalidArgument naming it
        (InvalidType for a wrong type), and nothing is taken."""
        what = f"Array.from_dlpack: {type(obj).__name__}"
        try:
            protocol = hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
        except Exception as e:  # a property that raises something other than AttributeError
            raise _invalid(f"{what}.__dlpack__: looking it up raised {_raised(e)}") from e
        if not protocol:
            raise _wrong_type(f"Array.from_dlpack: a {type(obj).__name__} has no __dlpack__")
        kind, ordinal = _dlpack_device_of(obj, what)
        if kind == _dlpack.CUDA:
            if device is None:
                device = _import_device(ordinal)
            wanted = ("cuda", ordinal)
        else:
            if device is None:
                raise _invalid("Array.from_dlpack: host memory: pass device=Device.host(...)")
            wanted = ("host", 0)
        _instance(device, Device, "Array.from_dlpack: device")
        with _Using("Array.from_dlpack", device):
            if (device._backend, device._ordinal if device._backend == "cuda" else 0) != wanted:
                raise _invalid(f"Array.from_dlpack: {type(obj).__name__} is on "
                               f"{wanted[0]} device {wanted[1]}, not on {device._describe()}")
            stream = _stream_for(stream, device, "Array.from_dlpack")
            with _Using("Array.from_dlpack", stream):
                capsule = _take_capsule(obj, stream.native if kind == _dlpack.CUDA else None,
                                        what)
                try:
                    imported = _dlpack.Imported(capsule, (kind, ordinal))
                except _dlpack.Malformed as e:  # not taken: the capsule is still the producer's
                    raise (_wrong_type if e.wrong_type else _invalid)(
                        f"{what}.__dlpack__() returned {e}") from None
                try:
                    return cls._over(imported, device, stream)
                except BaseException:
                    _dlpack.release(imported.managed, imported.deleter)
                    raise

    @classmethod
    def _over(cls, imported, device, stream):
        """The Array over an imported tensor (the caller gives it back if this raises)."""
        typecode, dtype = _dlpack.typecode_of(imported.dtype)
        if typecode is None:
            raise _wrong_type(f"Array.from_dlpack: dtype {dtype} has no array typecode")
        if not imported.compact:
            raise _invalid(f"Array.from_dlpack: a tensor of shape {imported.shape} with strides "
                           "is not compact: make it contiguous first")
        if imported.read_only:
            raise _invalid("Array.from_dlpack: the tensor is read-only; streampool arrays are "
                           "writable")
        nbytes = imported.size * _itemsizes[typecode]  # exact: a Python int
        if nbytes > MAX_ALLOCATION_BYTES:
            raise _invalid(f"Array.from_dlpack: a tensor of shape {imported.shape} and dtype "
                           f"{dtype} is {nbytes} bytes, beyond the most any device can hold "
                           f"({MAX_ALLOCATION_BYTES} bytes)")
        if nbytes and imported.data + nbytes > _dlpack.ADDRESS_END:
            raise _invalid(f"Array.from_dlpack: {nbytes} bytes at {imported.data:#x} run past "
                           "the end of the address space")
        self = cls.__new__(cls)
        self.pool, self.device, self.typecode = None, device, typecode
        self.itemsize = _itemsizes[typecode]
        self.size = imported.size
        self.nbytes = nbytes
        self._ptr = imported.data if self.nbytes else 0
        registered = False
        if self.nbytes:
            status = _lib.sp_memory_register(device._handle, self._ptr, self.nbytes)
            if status == _capi.SUCCESS:
                registered = True
            elif b"overlaps" not in _lib.sp_last_error_message():
                _check(status)
            # else: streampool knows this memory already (its own, exported and coming back, or
            # imported twice): the known range's streams order it.
            try:
                _check(_lib.sp_memory_acquire(stream._handle, self._ptr))
            except BaseException:
                if registered:
                    _lib.sp_memory_unregister(self._ptr)
                raise
        self._life = _Life(weakref.finalize(self, _give_back, self._ptr, registered,
                                            imported.managed, imported.deleter))
        return self


_import_devices: dict[int, Device] = {}
_import_devices_lock = threading.Lock()


def _import_device(ordinal: int) -> Device:
    """The Device that Array.from_dlpack uses for CUDA memory of ``ordinal`` when given none: one
    per GPU, so that imports of the same memory agree on it."""
    with _import_devices_lock:
        d = _import_devices.get(ordinal)
        if d is None or d.closed:
            d = _import_devices[ordinal] = Device.cuda(ordinal)
        return d


def _exported(a):
    # What a DLPack export's deleter runs: the use that __dlpack__ entered ends (and with it the
    # reference that kept the array alive).
    return lambda: a._life.leave()


_INT32_MAX = (1 << 31) - 1  # DLDevice's fields are int32


def _dl_pair(value, what, names, maximum):
    """A pair of DLPack's (max_version, dl_device, __dlpack_device__'s answer): a tuple (or a
    list) of two non-negative ints up to ``maximum``, returned as a tuple of ints."""
    if not isinstance(value, (tuple, list)):
        raise _wrong_type(f"{what} {_shown(value)}: a {type(value).__name__}, not a tuple "
                          f"({names[0]}, {names[1]})")
    if len(value) != 2:
        raise _invalid(f"{what} {_shown(value)}: {len(value)} items, not a pair ({names[0]}, "
                       f"{names[1]})")
    out = []
    for item, name in zip(value, names):
        if isinstance(item, bool):
            raise _wrong_type(f"{what} {_shown(value)}: the {name} {item!r} is a bool, not an int")
        try:
            v = operator.index(item)
        except Exception:  # noqa: BLE001 - TypeError, or whatever a foreign __index__ raises
            raise _wrong_type(f"{what} {_shown(value)}: the {name} {_shown(item)} is a "
                              f"{type(item).__name__}, not an int") from None
        if not 0 <= v <= maximum:
            raise _invalid(f"{what} {_shown(value)}: the {name} {v} is outside 0 to {maximum}")
        out.append(v)
    return tuple(out)


def _dlpack_device_of(obj, what):
    """obj.__dlpack_device__(), checked: (kDLCPU, 0) or (kDLCUDA, id) as ints. A producer's
    exception becomes the cause of an InvalidArgument; a streampool error (a freed Array's) goes
    on as it is."""
    try:
        got = obj.__dlpack_device__()
    except StreampoolError:
        raise
    except Exception as e:  # noqa: BLE001 - the producer's code: any failure is reported
        raise _invalid(f"{what}.__dlpack_device__() raised {_raised(e)}") from e
    where = f"{what}.__dlpack_device__() returned"
    if not isinstance(got, tuple):  # the protocol's type: a list here is a producer's bug
        raise _wrong_type(f"{where} {_shown(got)}, a {type(got).__name__}, not a tuple "
                          "(device type, device id)")
    kind, ordinal = _dl_pair(got, where, ("device type", "device id"), _INT32_MAX)
    if kind not in (_dlpack.CPU, _dlpack.CUDA):
        raise _invalid(f"{where} {_shown(got)}: device type {_dlpack.device_name(kind)}; "
                       f"streampool imports {_dlpack.device_name(_dlpack.CPU)} and "
                       f"{_dlpack.device_name(_dlpack.CUDA)} memory")
    if kind == _dlpack.CPU and ordinal != 0:
        raise _invalid(f"{where} {_shown(got)}: host memory (kDLCPU) has device id 0, not "
                       f"{ordinal}")
    return kind, ordinal


def _take_capsule(obj, stream, what):
    """obj.__dlpack__ for our stream, asking for DLPack 1.0 where the producer knows it. The
    producer's exception becomes the cause of an InvalidArgument, as in _dlpack_device_of."""
    try:
        try:
            return obj.__dlpack__(stream=stream, max_version=_dlpack.VERSION)
        except TypeError:  # a producer older than max_version
            return obj.__dlpack__(stream=stream)
    except StreampoolError:
        raise
    except Exception as e:  # noqa: BLE001 - the producer's code: any failure is reported
        raise _invalid(f"{what}.__dlpack__() raised {_raised(e)}") from e


# The CUDA array interface's typestr of each typecode: little-endian, '|' for single bytes.
_typestrs = {c: ("|" if n == 1 else "<") + ("f" if c in "fd" else "u" if c.isupper() else "i")
             + str(n) for c, n in _itemsizes.items()}

_format_codes = {"f": "f", "d": "d", "i": "i", "I": "I", "l": "l", "L": "L", "q": "q", "Q": "Q",
                 "b": "b", "B": "B", "h": "h", "H": "H", "<f": "f", "<d": "d", "<i": "i",
                 "<q": "q", "<l": "l"}


def _format_to_typecode(fmt):
    try:
        return _format_codes[fmt]
    except KeyError:
        raise _invalid(f"buffer format {fmt!r} has no array typecode; pass typecode=") from None


def _host_pointer(mv, writable):
    """An address for a contiguous view of ``mv``, and an object to keep alive meanwhile."""
    if not mv.c_contiguous:
        if writable:
            raise _invalid("Array.download: the buffer is not contiguous")
        mv = memoryview(mv.tobytes())
    if mv.format != "B" or mv.ndim != 1:
        try:
            mv = mv.cast("B")
        except (TypeError, ValueError):  # a format that cast() refuses ('<f', structs)
            if writable:
                raise _invalid(f"Array.download: a buffer of format {mv.format!r} cannot be "
                               "written as bytes; pass a bytearray or array.array") from None
            mv = memoryview(mv.tobytes())
    if mv.readonly:
        if writable:
            raise _invalid("Array.download: the buffer is read-only")
        copy = ctypes.create_string_buffer(mv.tobytes(), mv.nbytes)
        return ctypes.addressof(copy), copy
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(c), (c, mv)
