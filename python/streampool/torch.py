"""streampool as PyTorch's CUDA allocator.

    import streampool.torch
    streampool.torch.enable()          # before the first CUDA allocation
    ...                                # every CUDA tensor now lives in streampool's pools

enable() installs the plug-in (``torch.cuda.memory.CUDAPluggableAllocator`` over the library's
``sp_torch_malloc``/``sp_torch_free``), then reaches into PyTorch's C++ allocator object for what
its Python API does not forward: ``tensor.record_stream`` and ``torch.cuda.empty_cache()``. Without
the record-stream hook, a plug-in reuses memory that another stream may still read (PyTorch's API
gives the free only the allocation stream); where the hook cannot be installed, streampool is
conservative instead: a free waits for every stream it knows. docs/torch.md says what stays
uncovered.

PyTorch's own statistics (``torch.cuda.memory_stats``) are not available under a pluggable
allocator; ``memory_stats()`` here gives the pool's, under PyTorch's key names where they exist.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from typing import Any, Optional, Union

from . import _capi
from ._checks import _path
from ._errors import _check, _invalid, _wrong_type
from ._pool import Pool

__all__ = ["enable", "enabled", "native", "memory_stats", "empty_cache", "pool", "record_stream_hook",
           "start_recording", "stop_recording", "record_phase"]

_lib = _capi.lib
_state: dict[str, Any] = {"enabled": False, "hooks": 0}

RECORD_STREAM = 1
EMPTY_CACHE = 2


# What PyTorch programs lose where the plug-in stands in for the native allocator (docs/torch.md).
_PLUGIN_LOSES = ("CUDA graphs, torch.compile(mode='reduce-overhead'), torch.cuda.memory_stats() "
                 "and memory snapshots, and sharing CUDA tensors between processes")


def enable(conservative: Optional[bool] = None, native: Optional[bool] = None) -> None:
    """Makes streampool PyTorch's CUDA allocator. Call it before the first CUDA allocation.

    native: None (default) installs the native allocator (streampool behind PyTorch's own
    allocator interface: src/torch/, built on first use for the imported torch and cached), and
    falls back to the plug-in with a RuntimeWarning that says why and what is lost when it cannot
    be built or loaded; True raises instead of falling back; False installs the plug-in.
    STREAMPOOL_TORCH_NATIVE=0 in the environment means False, a path names a built
    libstreampool_torch.so.

    conservative (the plug-in only): None uses the record-stream hook when it can be installed
    and falls back to conservative frees otherwise; True forces conservative frees (every free
    waits for every stream the plug-in knows); False refuses to run without the hook.
    """
    if _state["enabled"]:
        return
    import torch  # type: ignore[import-not-found]

    if native is None and os.environ.get("STREAMPOOL_TORCH_NATIVE", "").lower() in ("0", "off"):
        native = False
    if native is not False and not conservative:
        from . import _torch_native

        try:
            _install_native(_torch_native.library())
            return
        except (_torch_native.Unavailable, OSError) as e:
            if native:
                raise RuntimeError(f"streampool.torch: the native allocator is unavailable: {e}") from e
            warnings.warn(f"streampool.torch: the native allocator is unavailable ({e}); using "
                          f"the plug-in, without {_PLUGIN_LOSES}", RuntimeWarning, stacklevel=2)

    alloc = torch.cuda.memory.CUDAPluggableAllocator(_lib._name, "sp_torch_malloc", "sp_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    _state["allocator"] = alloc  # PyTorch keeps its own reference; this one is for inspection
    installed = ctypes.c_int(0)
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib").encode()
    status = _lib.sp_torch_install_hooks(lib_dir, ctypes.byref(installed))
    hooks = installed.value if status == _capi.SUCCESS else 0
    _state["hooks"] = hooks
    _state["enabled"] = True
    if conservative or not hooks & RECORD_STREAM:
        if conservative is False:
            raise RuntimeError("streampool.torch: the record-stream hook could not be installed: "
                               + _lib.sp_last_error_message().decode())
        if not conservative:
            warnings.warn("streampool.torch: PyTorch's record-stream hook is out of reach ("
                          + _lib.sp_last_error_message().decode()
                          + "); every free now waits for every stream streampool knows",
                          RuntimeWarning, stacklevel=2)
        _check(_lib.sp_torch_set_conservative(1))


def _install_native(path: str) -> None:
    lib = ctypes.CDLL(path)
    message = ctypes.create_string_buffer(1024)
    if lib.sp_torch_native_install(message, len(message)) != 0:
        raise RuntimeError("streampool.torch: the native allocator refused: "
                           + message.value.decode())
    _state["native"] = lib
    _state["hooks"] = RECORD_STREAM | EMPTY_CACHE
    _state["enabled"] = True


def native() -> bool:
    """True when the native allocator is PyTorch's (enable() installed it), False for the plug-in
    or before enable()."""
    return "native" in _state


def enabled() -> bool:
    return _state["enabled"]


def record_stream_hook() -> bool:
    """True when tensor.record_stream reaches streampool (the precise mode)."""
    return bool(_state["hooks"] & RECORD_STREAM)


def pool(device: int = 0) -> Pool:
    """The plug-in's pool on CUDA device ``device`` (a streampool.Pool handle)."""
    h = ctypes.c_void_p()
    _check(_lib.sp_torch_pool(int(device), ctypes.byref(h)))
    return Pool._from_handle(h.value, None)


def memory_stats(device: int = 0) -> dict[str, int]:
    """The pool's statistics: PyTorch's key names where they mean the same, and streampool's."""
    st = pool(device).statistics()
    out = {
        "allocated_bytes.all.current": st["live_bytes"],
        "allocated_bytes.all.peak": st["peak_live_bytes"],
        "reserved_bytes.all.current": st["reserved_bytes"],
        "reserved_bytes.all.peak": st["peak_reserved_bytes"],
        "num_alloc_retries": st["alloc_retries"],
    }
    out.update({"streampool." + k: v for k, v in st.items()})
    return out


def empty_cache(device: Optional[int] = None) -> None:
    """Gives free memory back to the device (torch.cuda.empty_cache() does the same when the
    hook is installed)."""
    if device is None:
        _lib.sp_torch_empty_cache()
    else:
        pool(device).trim()


def start_recording(path: Union[str, os.PathLike[str]], device: int = 0) -> None:
    """Records the plug-in pool's allocations and frees on CUDA device ``device`` to ``path`` in
    tools/replay's trace format, as STREAMPOOL_TORCH_TRACE does (CUDA's legacy default stream is
    stream 0); a recording in progress there (the variable's too) is closed first."""
    raw = _path(path, "streampool.torch.start_recording: path")
    _check(_lib.sp_torch_record_start(int(device), raw))


def stop_recording(device: int = 0) -> int:
    """Ends the recording of the plug-in's pool on ``device``; returns the lines written."""
    return pool(device).stop_recording()


def record_phase(name: str) -> None:
    """A phase line ``# name`` in every plug-in pool's recording (``step k begin`` lines give
    tools/replay its per-phase counts)."""
    if not isinstance(name, str):
        raise _wrong_type(f"streampool.torch.record_phase: name {name!r} is not a str")
    if "\0" in name:
        raise _invalid(f"streampool.torch.record_phase: name {name!r} contains a NUL character")
    _lib.sp_torch_trace_phase(name.encode("utf-8"))
