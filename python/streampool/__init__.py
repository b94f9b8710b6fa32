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
"""

import array as _array
import ctypes
import struct
import threading
import weakref

from . import _capi
from ._capi import lib as _lib

__all__ = ["Device", "Stream", "Pool", "Array", "StreampoolError", "InvalidArgument",
           "OutOfDeviceMemory", "NotAvailable", "BackendError", "version"]


class StreampoolError(Exception):
    """A failing streampool call. ``status`` is the C status code; the message names the values."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class InvalidArgument(StreampoolError, ValueError):
    pass


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


def version():
    """The library's version as (major, minor, patch)."""
    v = [ctypes.c_int() for _ in range(3)]
    _check(_lib.sp_get_version(*[ctypes.byref(x) for x in v]))
    return tuple(x.value for x in v)


# Finalizers: module-level functions over plain integers, so they keep no object alive and run
# correctly in any order. A failure cannot be raised from a finalizer; it is reported instead.
def _report(what, status):
    if status != _capi.SUCCESS:
        import sys
        msg = _lib.sp_last_error_message().decode("utf-8", "replace")
        print(f"streampool: {what} failed in a finalizer: {msg}", file=sys.stderr)


def _destroy_device(handle):
    _report("sp_device_destroy", _lib.sp_device_destroy(handle))


def _destroy_stream(handle):
    _report("sp_stream_destroy", _lib.sp_stream_destroy(handle))


def _destroy_pool(handle, hook_keys):
    _report("sp_pool_destroy", _lib.sp_pool_destroy(handle))  # removes its hooks in C first
    for key in hook_keys:
        _hooks.pop(key, None)


def _free(ptr):
    # No pool, no stream: the finaliser form. Never blocks on the device.
    _report("sp_pool_deallocate", _lib.sp_pool_deallocate(None, ptr, None))


class Device:
    """A device: the CPU as a device (``Device.host()``) or a CUDA GPU (``Device.cuda(0)``)."""

    def __init__(self, handle):
        self._handle = handle
        self._finalizer = weakref.finalize(self, _destroy_device, handle)
        self._locals = threading.local()  # this thread's default Stream

    @classmethod
    def host(cls, checking=False, max_delay_us=0, seed=1, total_memory=0, device_wait=True):
        o = _capi.HostOptions()
        _check(_lib.sp_host_options_init(ctypes.byref(o)))
        o.checking, o.max_delay_us, o.seed = int(checking), max_delay_us, seed
        o.total_memory, o.device_wait = total_memory, int(device_wait)
        h = ctypes.c_void_p()
        _check(_lib.sp_device_create_host(ctypes.byref(o), ctypes.byref(h)))
        return cls(h.value)

    @classmethod
    def cuda(cls, ordinal=0):
        """Raises NotAvailable without a driver or GPU."""
        h = ctypes.c_void_p()
        _check(_lib.sp_device_create_cuda(ordinal, ctypes.byref(h)))
        return cls(h.value)

    @staticmethod
    def cuda_count():
        n = ctypes.c_int()
        _check(_lib.sp_cuda_device_count(ctypes.byref(n)))
        return n.value

    @property
    def id(self):
        v = ctypes.c_uint64()
        _check(_lib.sp_device_id(self._handle, ctypes.byref(v)))
        return v.value

    @property
    def backend(self):
        s = ctypes.c_char_p()
        _check(_lib.sp_device_backend_name(self._handle, ctypes.byref(s)))
        return s.value.decode()

    def violations(self):
        """Host backend in checking mode: the ordering violations seen (should be empty)."""
        n = ctypes.c_size_t()
        _check(_lib.sp_device_violation_count(self._handle, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            s = ctypes.c_char_p()
            _check(_lib.sp_device_violation_message(self._handle, i, ctypes.byref(s)))
            out.append(s.value.decode("utf-8", "replace"))
        return out

    def upstream_bytes(self):
        """Host backend: bytes held from the upstream (0 once everything is freed and gone)."""
        n = ctypes.c_size_t()
        _check(_lib.sp_device_upstream_bytes(self._handle, ctypes.byref(n)))
        return n.value

    def default_pool(self):
        """A new handle to the device's default pool."""
        h = ctypes.c_void_p()
        _check(_lib.sp_device_default_pool(self._handle, ctypes.byref(h)))
        return Pool._from_handle(h.value, self)

    def default_stream(self):
        """The calling thread's stream on this device; destroyed when the thread exits."""
        s = getattr(self._locals, "stream", None)
        if s is None:
            s = self._locals.stream = Stream(self)
        return s

    def close(self):
        self._finalizer()


class Stream:
    """An in-order queue of work on a device. Closing (or collecting) it waits for its work."""

    def __init__(self, device):
        h = ctypes.c_void_p()
        _check(_lib.sp_stream_create(device._handle, ctypes.byref(h)))
        self._handle = h.value
        self.device = device
        self._finalizer = weakref.finalize(self, _destroy_stream, self._handle)

    @classmethod
    def wrap(cls, device, native):
        """Wraps a native stream (an int: a CUstream) that streampool will never destroy."""
        self = cls.__new__(cls)
        h = ctypes.c_void_p()
        _check(_lib.sp_stream_wrap(device._handle, native, ctypes.byref(h)))
        self._handle, self.device = h.value, device
        self._finalizer = weakref.finalize(self, _destroy_stream, self._handle)
        return self

    def synchronize(self):
        _check(_lib.sp_stream_synchronize(self._handle))

    def wait(self, other):
        """Makes this stream wait (on the device) for the work submitted so far to ``other``."""
        _check(_lib.sp_stream_wait_stream(self._handle, other._handle))

    @property
    def native(self):
        v = ctypes.c_void_p()
        _check(_lib.sp_stream_native(self._handle, ctypes.byref(v)))
        return v.value

    def close(self):
        self._finalizer()


# Reclaim hooks: one C trampoline for the life of the process (so no ctypes callback is ever freed
# while C might call it), dispatching on an integer key to the Python callable.
_hooks = {}
_hook_keys = iter(range(1, 1 << 62))


@_capi.RECLAIM_FN
def _trampoline(user, nbytes):
    fn = _hooks.get(user or 0)
    if fn is not None:
        fn(nbytes)  # ctypes reports (and swallows) an exception raised here


class Pool:
    """A stream-ordered sub-allocating pool: ``Pool(device, memory_limit=...)`` or
    ``device.default_pool()``."""

    def __init__(self, device, memory_limit=0, small_max=None, stream_cache_bytes=None,
                 poison_on_free=False):
        o = _capi.PoolOptions()
        _check(_lib.sp_pool_options_init(ctypes.byref(o)))
        o.memory_limit = memory_limit
        if small_max is not None:
            o.small_max = small_max
        if stream_cache_bytes is not None:
            o.stream_cache_bytes = stream_cache_bytes
        o.poison_on_free = int(poison_on_free)
        h = ctypes.c_void_p()
        _check(_lib.sp_pool_create(device._handle, ctypes.byref(o), ctypes.byref(h)))
        self._init(h.value, device)

    @classmethod
    def _from_handle(cls, handle, device):
        self = cls.__new__(cls)
        self._init(handle, device)
        return self

    def _init(self, handle, device):
        self._handle = handle
        self.device = device
        self._hook_keys = []
        self._finalizer = weakref.finalize(self, _destroy_pool, handle, self._hook_keys)

    def allocate(self, nbytes, stream=None):
        """Raw stream-ordered allocation; returns the address. Free with deallocate()."""
        stream = stream or self.device.default_stream()
        p = ctypes.c_void_p()
        _check(_lib.sp_pool_allocate(self._handle, nbytes, stream._handle, ctypes.byref(p)))
        return p.value

    def deallocate(self, ptr, stream=None):
        _check(_lib.sp_pool_deallocate(self._handle, ptr, stream._handle if stream else None))

    def record_use(self, ptr, stream):
        _check(_lib.sp_pool_record_use(self._handle, ptr, stream._handle))

    def statistics(self):
        st = _capi.PoolStatistics()
        _check(_lib.sp_pool_get_statistics(self._handle, ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in st._fields_}

    @property
    def memory_limit(self):
        v = ctypes.c_size_t()
        _check(_lib.sp_pool_get_memory_limit(self._handle, ctypes.byref(v)))
        return v.value

    @memory_limit.setter
    def memory_limit(self, nbytes):
        _check(_lib.sp_pool_set_memory_limit(self._handle, nbytes))

    def trim(self):
        v = ctypes.c_size_t()
        _check(_lib.sp_pool_trim(self._handle, ctypes.byref(v)))
        return v.value

    def add_reclaim_hook(self, fn):
        """``fn(bytes_needed)`` runs when an allocation would fail, on the allocating thread, with
        no pool lock held: it may free memory, e.g. by calling gc.collect(). Returns an id."""
        key = next(_hook_keys)
        _hooks[key] = fn
        hid = ctypes.c_uint64()
        try:
            _check(_lib.sp_pool_add_reclaim_hook(self._handle, _trampoline, key,
                                                 ctypes.byref(hid)))
        except BaseException:
            del _hooks[key]
            raise
        self._hook_keys.append(key)
        return (hid.value, key)

    def remove_reclaim_hook(self, hook_id):
        hid, key = hook_id
        _check(_lib.sp_pool_remove_reclaim_hook(self._handle, hid))
        _hooks.pop(key, None)
        self._hook_keys.remove(key)

    def close(self):
        self._finalizer()


def _typecode_size(typecode):
    return _array.array(typecode).itemsize


class Array:
    """``n`` elements of ``typecode`` (the array module's codes: 'f', 'd', 'i', 'q', 'B', ...) in
    device memory from ``pool``. Freed by its finalizer, in any order relative to its stream and
    pool."""

    def __init__(self, n, typecode="f", pool=None, device=None, stream=None):
        if pool is None:
            if device is None:
                raise InvalidArgument(_capi.INVALID_ARGUMENT, "Array: give a pool or a device")
            pool = device.default_pool()
        self.pool = pool
        self.device = pool.device
        self.typecode = typecode
        self.itemsize = _typecode_size(typecode)
        self.size = n
        self.nbytes = n * self.itemsize
        self.ptr = pool.allocate(max(self.nbytes, 1), stream or self.device.default_stream())
        self._finalizer = weakref.finalize(self, _free, self.ptr)

    @classmethod
    def from_buffer(cls, data, pool=None, device=None, stream=None, typecode=None):
        """An upload of ``data`` (array.array, memoryview, bytes, numpy array...)."""
        mv = memoryview(data)
        if typecode is None:
            typecode = getattr(data, "typecode", None) or _format_to_typecode(mv.format)
        a = cls(mv.nbytes // _typecode_size(typecode), typecode, pool=pool, device=device,
                stream=stream)
        a.upload(mv, stream=stream)
        return a

    def __len__(self):
        return self.size

    def _stream(self, stream):
        return stream or self.device.default_stream()

    def upload(self, data, stream=None):
        """Copies host data in; returns once it is staged (``data`` may be reused at once)."""
        mv = memoryview(data)
        if mv.nbytes != self.nbytes:
            raise InvalidArgument(_capi.INVALID_ARGUMENT,
                                  f"upload: {mv.nbytes} bytes of host data for an array of "
                                  f"{self.nbytes} bytes")
        if self.nbytes == 0:
            return
        buf, keep = _host_pointer(mv, writable=False)
        _check(_lib.sp_memcpy_to_device(self._stream(stream)._handle, self.ptr, buf,
                                        self.nbytes))
        del keep

    def download(self, out=None, stream=None):
        """Copies the array to host memory: into ``out`` (a writable buffer), or a new
        array.array. Returns once the data is there."""
        if out is None:
            out = _array.array(self.typecode, bytes(self.nbytes))
        mv = memoryview(out)
        if mv.nbytes != self.nbytes:
            raise InvalidArgument(_capi.INVALID_ARGUMENT,
                                  f"download: a host buffer of {mv.nbytes} bytes for an array of "
                                  f"{self.nbytes} bytes")
        if self.nbytes:
            buf, keep = _host_pointer(mv, writable=True)
            _check(_lib.sp_memcpy_to_host(self._stream(stream)._handle, buf, self.ptr,
                                          self.nbytes))
            del keep
        return out

    def fill(self, value, stream=None):
        raw = struct.pack("=" + self.typecode, value)
        pattern = int.from_bytes(raw, "little")
        _check(_lib.sp_fill(self._stream(stream)._handle, self.ptr, pattern, self.itemsize,
                            self.size))

    def copy_from(self, other, stream=None):
        if other.nbytes != self.nbytes:
            raise InvalidArgument(_capi.INVALID_ARGUMENT,
                                  f"copy_from: {other.nbytes} bytes into {self.nbytes} bytes")
        if self.nbytes:
            _check(_lib.sp_memcpy_device(self._stream(stream)._handle, self.ptr, other.ptr,
                                         self.nbytes))

    def tolist(self, stream=None):
        return self.download(stream=stream).tolist()

    def numpy(self, stream=None):
        """A numpy copy (needs numpy)."""
        import numpy as np
        return np.frombuffer(self.download(stream=stream), dtype=self.typecode).copy()

    def free(self):
        """Frees now (otherwise the finalizer does)."""
        self._finalizer()


_format_codes = {"f": "f", "d": "d", "i": "i", "I": "I", "l": "l", "L": "L", "q": "q", "Q": "Q",
                 "b": "b", "B": "B", "h": "h", "H": "H", "<f": "f", "<d": "d", "<i": "i",
                 "<q": "q", "<l": "l"}


def _format_to_typecode(fmt):
    try:
        return _format_codes[fmt]
    except KeyError:
        raise InvalidArgument(_capi.INVALID_ARGUMENT,
                              f"buffer format {fmt!r} has no array typecode; pass typecode=")


def _host_pointer(mv, writable):
    """An address for a contiguous view of ``mv``, and an object to keep alive meanwhile."""
    if not mv.c_contiguous:
        if writable:
            raise InvalidArgument(_capi.INVALID_ARGUMENT, "download: the buffer is not contiguous")
        mv = memoryview(mv.tobytes())
    flat = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    if flat.readonly:
        if writable:
            raise InvalidArgument(_capi.INVALID_ARGUMENT, "download: the buffer is read-only")
        copy = ctypes.create_string_buffer(flat.tobytes(), flat.nbytes)
        return ctypes.addressof(copy), copy
    c = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(c), (c, flat)
