"""Arrays: elements of one typecode in device memory from a pool, with host copies, fills,
device copies, and the interop protocols (DLPack both ways, the CUDA array interface).

An Array frees its memory with no stream and no pool handle: the C layer waits for the work of
every stream that used it, so its stream and pool may already be gone. An Array over a DLPack
producer's memory gives it back to the producer instead.
"""

from __future__ import annotations

import array as _array
import sys
from typing import Any, Optional, Union

from . import _capi, _dlpack
from ._capi import lib as _lib
from ._checks import (MAX_ALLOCATION_BYTES, _address, _buffer, _flag, _format_to_typecode,
                      _host_pointer, _instance, _integer, _itemsizes, _pattern, _raised, _shown,
                      _typecode)
from ._device import Device
from ._errors import _check, _invalid, _report, _wrong_type
from ._handle import _Handle, _Using
from ._interop import (_INT32_MAX, _dl_pair, _dlpack_device_of, _exported, _import_device,
                       _take_capsule)
from ._pool import Pool
from ._stream import Stream, _stream_for


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


# The CUDA array interface's typestr of each typecode: little-endian, '|' for single bytes.
_typestrs = {c: ("|" if n == 1 else "<") + ("f" if c in "fd" else "u" if c.isupper() else "i")
             + str(n) for c, n in _itemsizes.items()}


def _dlpack_device(device):
    """The DLPack device (type, ordinal) of a streampool device, by its backend's kind; None for
    a backend DLPack has no type for here (or no device)."""
    kind = device._kind if device is not None else None
    if kind == _capi.BACKEND_HOST:
        return (_dlpack.CPU, 0)
    if kind == _capi.BACKEND_CUDA:
        return (_dlpack.CUDA, device._ordinal)
    return None


class Array(_Handle):
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
        self._own(_free, self._ptr)

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

    def __len__(self) -> int:
        return self.size

    @property
    def freed(self) -> bool:
        """Whether free() (or the finalizer) ran."""
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
            raise self._gone(what)
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
        dl = _dlpack_device(self.device)
        if dl is not None:
            return dl
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
        # The consumer's arguments, checked before anything is done: a malformed one changes
        # nothing.
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
        if self.device is None or self.device._kind != _capi.BACKEND_CUDA:
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
            wanted, name = (kind, ordinal), "cuda"
        else:
            if device is None:
                raise _invalid("Array.from_dlpack: host memory: pass device=Device.host(...)")
            wanted, name = (_dlpack.CPU, 0), "host"
        _instance(device, Device, "Array.from_dlpack: device")
        with _Using("Array.from_dlpack", device):
            if _dlpack_device(device) != wanted:
                raise _invalid(f"Array.from_dlpack: {type(obj).__name__} is on "
                               f"{name} device {wanted[1]}, not on {device._describe()}")
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
        self._own(_give_back, self._ptr, registered, imported.managed, imported.deleter)
        return self
