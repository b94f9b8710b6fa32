"""streampool as CuPy's allocator.

    import streampool.cupy
    streampool.cupy.enable()        # CuPy's device memory now comes from streampool's pools

Each allocation is made on CuPy's current stream (``cupy.cuda.get_current_stream()``), through a
streampool wrapper of that stream, and freed on it when CuPy drops the memory: same-stream reuse
costs nothing, and memory reused on another stream waits for the first one on the device (CuPy's
own pool leaves that to the user).

CuPy destroys a stream in its finalizer, without waiting, possibly while memory allocated on it
is still alive. A wrapper must never outlive its stream, so enable() hooks ``cupy.cuda.Stream``'s
finalizer: before CuPy destroys the stream, its wrappers are released (a last marker is recorded
on it; nothing waits), and so is any handle DLPack handed to streampool. Memory that the stream
used is then freed and reused behind that marker, in any order. A stream destroyed some other way
(``cupy.cuda.runtime.streamDestroy`` by hand) must be released first: ``release_stream(s)``.

The pool is the default pool of a streampool device of its own per GPU (``Device.cuda(ordinal)``);
``pool(ordinal)`` returns it, for statistics and trim.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from . import _capi
from ._capi import lib as _lib
from ._checks import _integer, _shown
from ._device import Device
from ._errors import _check, _report, _wrong_type
from ._pool import Pool
from ._stream import Stream, release_native_stream

__all__ = ["enable", "disable", "enabled", "pool", "release_stream", "hook_streams"]

_lock = threading.Lock()
_state: dict[str, Any] = {"enabled": False, "previous": None}
_devices: dict[int, tuple[Device, Pool]] = {}  # CUDA ordinal -> (Device, its default Pool)
_per_thread = threading.local()  # wrappers of the per-thread default stream, by ordinal

# CuPy's special stream handles: the legacy default stream (0 or 1) and the per-thread one (2).
_LEGACY = (0, 1)
_PER_THREAD = 2


def enable() -> None:
    """Makes streampool CuPy's allocator (cupy.cuda.set_allocator), on CuPy's current stream.
    Memory CuPy allocated before stays where it is."""
    import cupy  # type: ignore[import-not-found]
    with _lock:
        if _state["enabled"]:
            return
        _hook_stream_finalizer(cupy.cuda.Stream)
        _state["previous"] = cupy.cuda.get_allocator()
        _state["cupy"] = cupy
        cupy.cuda.set_allocator(_malloc)
        _state["enabled"] = True


def disable() -> None:
    """Gives CuPy back the allocator it had before enable(). Memory from streampool stays valid
    until CuPy frees it, and the stream hook stays, for the streams that memory used."""
    with _lock:
        if not _state["enabled"]:
            return
        _state["cupy"].cuda.set_allocator(_state["previous"])
        _state["enabled"] = False


def enabled() -> bool:
    return _state["enabled"]


def pool(ordinal: int = 0) -> Pool:
    """The streampool pool behind CuPy on CUDA device ``ordinal`` (statistics(), trim())."""
    # Checked here: the ordinal is a key of _devices before Device.cuda sees it.
    return _device(_integer(ordinal, "streampool.cupy.pool: ordinal", (1 << 31) - 1))[1]


def hook_streams() -> None:
    """Hooks cupy.cuda.Stream's finalizer (what enable() does besides the allocator): before CuPy
    destroys a stream, streampool lets go of it. Array.__dlpack__ calls it when CuPy is loaded, as a
    CuPy stream it is handed becomes a user of the memory. Idempotent."""
    import cupy  # type: ignore[import-not-found]
    with _lock:
        _hook_stream_finalizer(cupy.cuda.Stream)


def release_stream(stream: Any) -> None:
    """Releases streampool's hold on the CuPy stream ``stream`` before it is destroyed by hand;
    the finalizer hook does this for streams CuPy destroys itself. Idempotent."""
    ptr = getattr(stream, "ptr", None)
    if isinstance(ptr, bool) or not isinstance(ptr, int) or not hasattr(stream, "__dict__"):
        raise _wrong_type(f"streampool.cupy.release_stream: {_shown(stream)} is not a CuPy stream "
                          "(an object with an int ptr)")
    wrappers = stream.__dict__.pop("_streampool", None) or {}
    for w in wrappers.values():
        # A last marker on the stream, no wait for its work; but a free on another thread that
        # is using the wrapper right now ends first, as the stream goes right after this.
        w._end(release=True, wait_for_users=True)
    if stream.ptr not in _LEGACY and stream.ptr != _PER_THREAD:
        release_native_stream(stream.ptr)  # a handle DLPack's __dlpack__(stream=) handed over


def _hook_stream_finalizer(cls):
    original = cls.__del__
    if getattr(original, "_streampool_original", None) is not None:
        return

    def __del__(self, *args, **kwargs):
        try:
            release_stream(self)
        finally:
            original(self, *args, **kwargs)

    __del__._streampool_original = original
    cls.__del__ = __del__


def _device(ordinal):
    found = _devices.get(ordinal)
    if found is None:
        with _lock:
            found = _devices.get(ordinal)
            if found is None:
                device = Device.cuda(ordinal)
                found = _devices[ordinal] = (device, device.default_pool())
    return found


def _wrapper(cupy_stream, device, ordinal):
    """streampool's wrapper of a CuPy stream on device ``ordinal`` (made on first use)."""
    ptr = cupy_stream.ptr
    if ptr == _PER_THREAD:
        # The calling thread's own default stream: a wrapper (and a timeline) per thread, with
        # markers on the legacy stream, which every blocking stream, this one too, is ordered with.
        wrappers = _per_thread.__dict__.setdefault("wrappers", {})
        native = 0
    else:
        wrappers = cupy_stream.__dict__.get("_streampool")
        if wrappers is None:
            wrappers = cupy_stream.__dict__.setdefault("_streampool", {})
        native = ptr
    w = wrappers.get(ordinal)
    if w is None or w.closed:
        with _lock:
            w = wrappers.get(ordinal)
            if w is None or w.closed:
                w = wrappers[ordinal] = Stream.wrap(device, native)
    return w


class _Block:
    """The owner of one allocation in CuPy's UnownedMemory: freed when CuPy drops it, on its
    stream while that stream's wrapper lives, else behind the wrapper's last marker."""

    __slots__ = ("ptr", "life", "handle")

    def __init__(self, ptr, stream):
        self.ptr, self.life, self.handle = ptr, stream._life, stream._handle

    def __del__(self):
        if self.life.try_enter():
            try:
                status = _lib.sp_pool_deallocate(None, self.ptr, self.handle)
            finally:
                self.life.leave()
        else:  # the stream is gone: wait for what it (and anyone else) did with the memory
            status = _lib.sp_pool_deallocate(None, self.ptr, None)
        if status != _capi.SUCCESS:
            _report("sp_pool_deallocate (streampool.cupy)", status)


def _malloc(size):
    cupy = _state["cupy"]
    ordinal = cupy.cuda.runtime.getDevice()
    device, p = _device(ordinal)
    stream = _wrapper(cupy.cuda.get_current_stream(), device, ordinal)
    ptr = ctypes.c_void_p()
    _check(_lib.sp_pool_allocate(p._handle, max(size, 1), stream._handle, ctypes.byref(ptr)))
    memory = cupy.cuda.UnownedMemory(ptr.value, size, _Block(ptr.value, stream), ordinal)
    return cupy.cuda.MemoryPointer(memory, 0)
