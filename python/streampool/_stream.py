"""Streams: in-order queues of work on a device, created by streampool or wrapped (a native
stream that its owner destroys), and the stream an operation runs on when it is given none.
"""

from __future__ import annotations

import ctypes
import functools
import weakref

from ._capi import lib as _lib
from ._checks import ADDRESS_MAX, _instance, _integer
from ._device import Device
from ._errors import _check, _invalid, _report
from ._handle import _Handle, _Life, _Using


def release_native_stream(native: int) -> int:
    """Tells streampool that the native stream ``native`` (an int: a CUstream that streampool was
    given, e.g. by DLPack's ``__dlpack__(stream=...)``) is about to be destroyed by its owner: a
    last marker is recorded on it, and streampool never touches it again; nothing waits. Returns
    how many wrappers streampool had of it (0: it did not know the handle). streampool.cupy does
    this for every CuPy stream before CuPy destroys it."""
    native = _integer(native, "release_native_stream: native", ADDRESS_MAX)
    n = ctypes.c_size_t()
    _check(_lib.sp_native_stream_release(native, ctypes.byref(n)))
    return n.value


def _destroy_stream(handle, release):
    if release[0]:  # a wrapper, or release(): a last marker, no wait
        _report("sp_stream_release", _lib.sp_stream_release(handle))
    else:
        _report("sp_stream_destroy", _lib.sp_stream_destroy(handle))


class Stream(_Handle):
    """An in-order queue of work on a device. Closing (or collecting) it waits for its work;
    close() is idempotent, and a closed Stream raises InvalidArgument wherever it is used."""

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
        native = _integer(native, "Stream.wrap: native", ADDRESS_MAX)
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
