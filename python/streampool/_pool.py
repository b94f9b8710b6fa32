"""Pools: stream-ordered sub-allocating pools of device memory, their reclaim hooks, and the
allocation log (Pool.start_recording, Pool.recording).
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Callable, Optional, Union

from . import _capi
from ._capi import lib as _lib
from ._checks import _address, _flag, _instance, _integer, _path
from ._device import Device
from ._errors import StreampoolError, _check, _invalid, _report, _wrong_type
from ._handle import _Handle, _Using
from ._stream import Stream, _stream_for


# Reclaim hooks: one C trampoline for the life of the process (so no ctypes callback is ever freed
# while C might call it), dispatching on an integer key to the Python callable.
_hooks: dict[int, Callable[[int], object]] = {}
_hook_keys = iter(range(1, 1 << 62))


@_capi.RECLAIM_FN
def _trampoline(user, nbytes):
    fn = _hooks.get(user or 0)
    if fn is not None:
        fn(nbytes)  # ctypes reports (and swallows) an exception raised here


def _destroy_pool(handle, hook_ids):
    _report("sp_pool_destroy", _lib.sp_pool_destroy(handle))  # removes its hooks in C first
    for _, key in hook_ids:
        _hooks.pop(key, None)


class Pool(_Handle):
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
        self._own(_destroy_pool, handle, self._hook_ids)

    def _describe(self):
        where = self.device._describe() if self.device is not None else "the PyTorch plug-in"
        return f"Pool {self._handle:#x} on {where}"

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
