"""ctypes declarations of include/streampool.h, and the library loader.

The library is found, in order, at $STREAMPOOL_LIBRARY, next to this package (a libstreampool.so
copied in), in a build tree of this repository (build/*/libstreampool.so), then on the system
search path.
"""

import ctypes
import ctypes.util
import glob
import os

SUCCESS = 0
INVALID_ARGUMENT = 1
OUT_OF_DEVICE_MEMORY = 2
NOT_AVAILABLE = 3
BACKEND_ERROR = 4
INTERNAL = 5


def _candidates():
    env = os.environ.get("STREAMPOOL_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield from sorted(glob.glob(os.path.join(here, "libstreampool.so*")))
    root = os.path.dirname(os.path.dirname(here))
    yield from sorted(glob.glob(os.path.join(root, "build", "*", "libstreampool.so")))
    found = ctypes.util.find_library("streampool")
    if found:
        yield found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise OSError("streampool: cannot load libstreampool (set STREAMPOOL_LIBRARY to its path); "
                  "tried: " + ("; ".join(errors) or "nothing found"))


lib = _load()

c_size = ctypes.c_size_t
c_u64 = ctypes.c_uint64
c_ptr = ctypes.c_void_p
status = ctypes.c_int


class HostOptions(ctypes.Structure):
    _fields_ = [("checking", ctypes.c_int), ("max_delay_us", ctypes.c_uint),
                ("seed", c_u64), ("total_memory", c_size), ("granularity", c_size),
                ("device_wait", ctypes.c_int), ("virtual_memory", ctypes.c_int)]


class PoolOptions(ctypes.Structure):
    _fields_ = [("memory_limit", c_size), ("small_max", c_size),
                ("stream_cache_bytes", c_size), ("poison_on_free", ctypes.c_int),
                ("virtual_memory", ctypes.c_int), ("release_threshold", c_size)]


class PoolStatistics(ctypes.Structure):
    _fields_ = [(name, c_size) for name in (
        "live_bytes", "cached_bytes", "reserved_bytes", "peak_live_bytes",
        "peak_reserved_bytes", "memory_limit")] + [(name, c_u64) for name in (
            "allocations", "deallocations", "fresh_allocations", "same_stream_reuses",
            "ready_reuses", "waited_reuses", "device_waits", "host_waits",
            "upstream_allocations", "upstream_deallocations", "reclaim_calls")] + [
        ("stream_caches", c_size)] + [(name, c_u64) for name in (
            "upstream_reserves", "upstream_creates", "upstream_releases", "upstream_maps",
            "upstream_unmaps", "upstream_calls")]


RECLAIM_FN = ctypes.CFUNCTYPE(None, c_ptr, c_size)

_P = ctypes.POINTER
_signatures = {
    "sp_last_error_message": (ctypes.c_char_p, []),
    "sp_status_string": (ctypes.c_char_p, [status]),
    "sp_get_version": (status, [_P(ctypes.c_int)] * 3),
    "sp_host_options_init": (status, [_P(HostOptions)]),
    "sp_device_create_host": (status, [_P(HostOptions), _P(c_ptr)]),
    "sp_device_create_cuda": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_cuda_device_count": (status, [_P(ctypes.c_int)]),
    "sp_device_destroy": (status, [c_ptr]),
    "sp_device_id": (status, [c_ptr, _P(c_u64)]),
    "sp_device_backend_name": (status, [c_ptr, _P(ctypes.c_char_p)]),
    "sp_device_violation_count": (status, [c_ptr, _P(c_size)]),
    "sp_device_violation_message": (status, [c_ptr, c_size, _P(ctypes.c_char_p)]),
    "sp_device_upstream_bytes": (status, [c_ptr, _P(c_size)]),
    "sp_stream_create": (status, [c_ptr, _P(c_ptr)]),
    "sp_stream_wrap": (status, [c_ptr, c_ptr, _P(c_ptr)]),
    "sp_stream_destroy": (status, [c_ptr]),
    "sp_stream_synchronize": (status, [c_ptr]),
    "sp_stream_wait_stream": (status, [c_ptr, c_ptr]),
    "sp_stream_native": (status, [c_ptr, _P(c_ptr)]),
    "sp_pool_options_init": (status, [_P(PoolOptions)]),
    "sp_device_default_pool": (status, [c_ptr, _P(c_ptr)]),
    "sp_pool_create": (status, [c_ptr, _P(PoolOptions), _P(c_ptr)]),
    "sp_pool_destroy": (status, [c_ptr]),
    "sp_pool_allocate": (status, [c_ptr, c_size, c_ptr, _P(c_ptr)]),
    "sp_pool_deallocate": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_record_use": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_block_size": (status, [c_ptr, c_ptr, _P(c_size)]),
    "sp_pool_get_statistics": (status, [c_ptr, _P(PoolStatistics)]),
    "sp_pool_set_memory_limit": (status, [c_ptr, c_size]),
    "sp_pool_get_memory_limit": (status, [c_ptr, _P(c_size)]),
    "sp_pool_trim": (status, [c_ptr, _P(c_size)]),
    "sp_pool_add_reclaim_hook": (status, [c_ptr, RECLAIM_FN, c_ptr, _P(c_u64)]),
    "sp_pool_remove_reclaim_hook": (status, [c_ptr, c_u64]),
    "sp_memcpy_to_device": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_memcpy_to_host": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_memcpy_device": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_fill": (status, [c_ptr, c_ptr, c_u64, c_size, c_size]),
    "sp_pool_allocate_native": (status, [c_ptr, c_size, c_ptr, _P(c_ptr)]),
    "sp_pool_deallocate_native": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_record_use_native": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_torch_install_hooks": (status, [ctypes.c_char_p, _P(ctypes.c_int)]),
    "sp_torch_set_conservative": (status, [ctypes.c_int]),
    "sp_torch_pool": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_torch_empty_cache": (None, []),
    "sp_torch_trace_phase": (None, [ctypes.c_char_p]),
}
for _name, (_res, _args) in _signatures.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
