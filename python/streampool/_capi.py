"""ctypes declarations of include/streampool.h, and the library loader.

The library is found, in order, at $STREAMPOOL_LIBRARY, next to this package (the wheel's
libstreampool.so, or one copied in), in a build tree of this repository
(build/*/libstreampool.so.0.2, the file named by the SONAME this binding declares), then on the
system search path (that SONAME first).

The struct layouts below are copied from the header by hand, so the loader checks them against
the library before anything else runs: its version must be the ABI version this binding declares
(MAJOR_VERSION, and while that is 0, MINOR_VERSION too), and each struct's ctypes size what
sp_struct_size reports. A mismatch raises ImportError naming the struct and both sizes (or both
versions), instead of letting a wrong layout pass a field at another field's offset.
"""

import ctypes
import ctypes.util
import glob
import os

# The version of the C ABI this module declares. While the major version is 0, each minor version
# is an ABI of its own (the library's SONAME carries it), so both must match the library's.
MAJOR_VERSION = 0
MINOR_VERSION = 2
# The library's SONAME, libstreampool.so.<major> (libstreampool.so.0.<minor> while the major is 0):
# the file name a build tree and the system's loader know this ABI by.
SONAME = ("libstreampool.so." + str(MAJOR_VERSION)
          + (f".{MINOR_VERSION}" if MAJOR_VERSION == 0 else ""))

SUCCESS = 0
INVALID_ARGUMENT = 1
OUT_OF_DEVICE_MEMORY = 2
NOT_AVAILABLE = 3
BACKEND_ERROR = 4
INTERNAL = 5

# sp_backend_kind_t: a device's backend by kind (sp_device_backend_kind), not by its name.
BACKEND_OTHER = 0
BACKEND_HOST = 1
BACKEND_CUDA = 2
BACKEND_OPENCL = 3
BACKEND_LEVEL_ZERO = 4


def _candidates():
    """Library paths to try, in order: $STREAMPOOL_LIBRARY alone when set; else the library in
    this package's folder (where `pip install .` and the wheel put it, or a libstreampool.so
    copied into python/streampool/); else, when this package is the source tree's python/, that
    tree's build/*/SONAME (release first, then debug, then the others, but never the sanitizer,
    fuzz or fault builds, which a plain interpreter cannot load or which are wrong on purpose; a
    build of another ABI has no file of this name); else the system search path: SONAME, then
    whatever ctypes.util.find_library finds."""
    env = os.environ.get("STREAMPOOL_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield from sorted(glob.glob(os.path.join(here, "libstreampool.so*")))
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "CMakeLists.txt")) and os.path.isfile(
            os.path.join(root, "include", "streampool.h")):
        builds = {os.path.basename(os.path.dirname(path)): path
                  for path in glob.glob(os.path.join(root, "build", "*", SONAME))}
        order = {"release": 0, "debug": 1}
        for preset in sorted(builds, key=lambda name: (order.get(name, 2), name)):
            if preset not in ("asan", "tsan", "fuzz", "fault"):
                yield builds[preset]
    yield SONAME
    found = ctypes.util.find_library("streampool")
    if found and found != SONAME:
        yield found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise OSError(f"streampool: cannot load libstreampool, {SONAME} (install the package with "
                  "`pip install .`, build this tree, or set STREAMPOOL_LIBRARY to the library's "
                  "path); tried: " + ("; ".join(errors) or "nothing found"))


lib = _load()

c_size = ctypes.c_size_t
c_u64 = ctypes.c_uint64
c_ptr = ctypes.c_void_p
status = ctypes.c_int


class _Versioned(ctypes.Structure):
    """A struct of the C ABI: it starts with struct_size, which every instance sets to its own
    size (include/streampool.h, "versioned structs"). _c_name_ is the C typedef's name."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)


class HostOptions(_Versioned):
    _c_name_ = "sp_host_options_t"
    _fields_ = [("struct_size", c_size), ("checking", ctypes.c_int),
                ("max_delay_us", ctypes.c_uint), ("seed", c_u64), ("total_memory", c_size),
                ("granularity", c_size), ("device_wait", ctypes.c_int),
                ("virtual_memory", ctypes.c_int)]


class PoolOptions(_Versioned):
    _c_name_ = "sp_pool_options_t"
    _fields_ = [("struct_size", c_size), ("memory_limit", c_size), ("small_max", c_size),
                ("stream_cache_bytes", c_size), ("poison_on_free", ctypes.c_int),
                ("virtual_memory", ctypes.c_int), ("release_threshold", c_size),
                ("share_between_streams", ctypes.c_int), ("large_cache_bytes", c_size),
                ("keep_memory", ctypes.c_int)]


class PoolStatistics(_Versioned):
    _c_name_ = "sp_pool_statistics_t"
    _fields_ = [(name, c_size) for name in (
        "struct_size", "live_bytes", "cached_bytes", "reserved_bytes", "peak_live_bytes",
        "peak_reserved_bytes", "memory_limit")] + [(name, c_u64) for name in (
            "allocations", "deallocations", "fresh_allocations", "same_stream_reuses",
            "ready_reuses", "waited_reuses", "device_waits", "host_waits",
            "upstream_allocations", "upstream_deallocations", "reclaim_calls")] + [
        ("stream_caches", c_size)] + [(name, c_u64) for name in (
            "upstream_reserves", "upstream_creates", "upstream_releases", "upstream_maps",
            "upstream_unmaps", "upstream_calls", "alloc_retries")]


STRUCTS = (HostOptions, PoolOptions, PoolStatistics)

RECLAIM_FN = ctypes.CFUNCTYPE(None, c_ptr, c_size)

_P = ctypes.POINTER
_signatures = {
    "sp_last_error_message": (ctypes.c_char_p, []),
    "sp_status_string": (ctypes.c_char_p, [status]),
    "sp_get_version": (status, [_P(ctypes.c_int)] * 3),
    "sp_max_allocation_bytes": (c_u64, []),
    "sp_struct_size": (status, [ctypes.c_char_p, _P(c_size)]),
    "sp_host_options_set_defaults": (status, [_P(HostOptions)]),
    "sp_device_create_host": (status, [_P(HostOptions), _P(c_ptr)]),
    "sp_device_create_cuda": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_cuda_device_count": (status, [_P(ctypes.c_int)]),
    "sp_device_create_opencl": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_opencl_device_count": (status, [_P(ctypes.c_int)]),
    "sp_device_create_level_zero": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_level_zero_device_count": (status, [_P(ctypes.c_int)]),
    "sp_device_destroy": (status, [c_ptr]),
    "sp_device_id": (status, [c_ptr, _P(c_u64)]),
    "sp_device_backend_name": (status, [c_ptr, _P(ctypes.c_char_p)]),
    "sp_device_backend_kind": (status, [c_ptr, _P(ctypes.c_int)]),
    "sp_device_violation_count": (status, [c_ptr, _P(c_size)]),
    "sp_device_violation_message": (status, [c_ptr, c_size, _P(ctypes.c_char_p)]),
    "sp_device_upstream_bytes": (status, [c_ptr, _P(c_size)]),
    "sp_stream_create": (status, [c_ptr, _P(c_ptr)]),
    "sp_stream_wrap": (status, [c_ptr, c_ptr, _P(c_ptr)]),
    "sp_stream_destroy": (status, [c_ptr]),
    "sp_stream_release": (status, [c_ptr]),
    "sp_stream_synchronize": (status, [c_ptr]),
    "sp_stream_wait_stream": (status, [c_ptr, c_ptr]),
    "sp_stream_native": (status, [c_ptr, _P(c_ptr)]),
    "sp_pool_options_set_defaults": (status, [_P(PoolOptions)]),
    "sp_device_default_pool": (status, [c_ptr, _P(c_ptr)]),
    "sp_pool_create": (status, [c_ptr, _P(PoolOptions), _P(c_ptr)]),
    "sp_pool_destroy": (status, [c_ptr]),
    "sp_pool_allocate": (status, [c_ptr, c_size, c_ptr, _P(c_ptr)]),
    "sp_pool_deallocate": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_record_use": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_block_size": (status, [c_ptr, c_ptr, _P(c_size)]),
    "sp_pool_statistics_set_defaults": (status, [_P(PoolStatistics)]),
    "sp_pool_get_statistics": (status, [c_ptr, _P(PoolStatistics)]),
    "sp_pool_set_memory_limit": (status, [c_ptr, c_size]),
    "sp_pool_get_memory_limit": (status, [c_ptr, _P(c_size)]),
    "sp_pool_trim": (status, [c_ptr, _P(c_size)]),
    "sp_pool_reset_peak_statistics": (status, [c_ptr]),
    "sp_pool_snapshot_json": (status, [c_ptr, _P(c_ptr), _P(c_size)]),
    "sp_pool_add_reclaim_hook": (status, [c_ptr, RECLAIM_FN, c_ptr, _P(c_u64)]),
    "sp_pool_remove_reclaim_hook": (status, [c_ptr, c_u64]),
    "sp_memcpy_to_device": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_memcpy_to_host": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_memcpy_device": (status, [c_ptr, c_ptr, c_ptr, c_size]),
    "sp_fill": (status, [c_ptr, c_ptr, c_u64, c_size, c_size]),
    "sp_pool_allocate_native": (status, [c_ptr, c_size, c_ptr, _P(c_ptr)]),
    "sp_pool_deallocate_native": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_pool_record_use_native": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_native_stream_release": (status, [c_ptr, _P(c_size)]),
    "sp_memory_register": (status, [c_ptr, c_ptr, c_size]),
    "sp_memory_unregister": (status, [c_ptr]),
    "sp_memory_acquire": (status, [c_ptr, c_ptr]),
    "sp_memory_acquire_native": (status, [c_ptr, c_ptr, c_ptr]),
    "sp_memory_synchronize": (status, [c_ptr]),
    "sp_torch_install_hooks": (status, [ctypes.c_char_p, _P(ctypes.c_int)]),
    "sp_torch_set_conservative": (status, [ctypes.c_int]),
    "sp_torch_pool": (status, [ctypes.c_int, _P(c_ptr)]),
    "sp_torch_empty_cache": (None, []),
    "sp_torch_trace_phase": (None, [ctypes.c_char_p]),
    "sp_pool_record_start": (status, [c_ptr, ctypes.c_char_p]),
    "sp_pool_record_stop": (status, [c_ptr, _P(c_u64)]),
    "sp_pool_record_phase": (status, [c_ptr, ctypes.c_char_p]),
    "sp_torch_record_start": (status, [ctypes.c_int, ctypes.c_char_p]),
}


# libstreampool_report's functions (the memory picture: src/report/), declared when it is loaded.
_report_signatures = {
    "sp_snapshot_html": (status, [ctypes.c_char_p, c_size, ctypes.c_char_p, _P(c_ptr), _P(c_size)]),
}


_every_signature = {**_signatures, **_report_signatures}


def _declare(library, name):
    f = getattr(library, name)
    f.restype, f.argtypes = _every_signature[name]
    return f


_report = None


def report_lib():
    """libstreampool_report, loaded on first use: the memory picture is a library of its own so
    that the allocator does not carry it. Looked for beside the libstreampool this module loaded
    (the same build tree, or the package folder), then on the system search path."""
    global _report
    if _report is None:
        names = []
        here = library_path()
        if here:
            folder = os.path.dirname(here)
            names += [os.path.join(folder, "libstreampool_report" + SONAME[len("libstreampool"):]),
                      os.path.join(folder, "libstreampool_report.so")]
        names += ["libstreampool_report" + SONAME[len("libstreampool"):], "libstreampool_report.so"]
        errors = []
        for name in names:
            try:
                found = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(f"{name}: {e}")
        else:
            raise OSError("streampool: cannot load libstreampool_report (the memory picture); "
                          "tried: " + "; ".join(errors))
        for name in _report_signatures:
            _declare(found, name)
        _report = found
    return _report


def library_path(library=None):
    """The file the library was loaded from: its name when that is a path, else the path the
    dynamic loader found for it (/proc/self/maps); None when neither says."""
    name = _where(library if library is not None else lib)
    if os.path.isabs(name):
        return name
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path).startswith(os.path.basename(name)):
                    return path
    except OSError:
        pass
    return None


def _where(library):
    return getattr(library, "_name", None) or "libstreampool"


def check_version(library, major=MAJOR_VERSION, minor=MINOR_VERSION):
    """Raises ImportError unless the library's major version is `major` and, while that is 0, its
    minor version is `minor`: before 1.0 the ABI may change from one minor version to the next."""
    v = [ctypes.c_int() for _ in range(3)]
    if _declare(library, "sp_get_version")(*[ctypes.byref(x) for x in v]) != SUCCESS:
        raise ImportError(f"streampool: sp_get_version failed in {_where(library)}")
    found = tuple(x.value for x in v)
    if found[0] != major:
        raise ImportError(
            f"streampool: this binding declares the C ABI of major version {major}, but "
            f"{_where(library)} is version {'.'.join(map(str, found))}")
    if major == 0 and found[1] != minor:
        raise ImportError(
            f"streampool: this binding declares the C ABI of version {major}.{minor} (before "
            f"1.0 each minor version is an ABI of its own), but {_where(library)} is version "
            f"{'.'.join(map(str, found))}")


def check_struct_sizes(library, structs=STRUCTS):
    """Raises ImportError naming the struct and both sizes unless each ctypes struct in `structs`
    (each with _c_name_, the C typedef) is at most the size the library reports for it."""
    struct_size = _declare(library, "sp_struct_size")
    for cls in structs:
        n = c_size()
        if struct_size(cls._c_name_.encode(), ctypes.byref(n)) != SUCCESS:
            message = _declare(library, "sp_last_error_message")().decode("utf-8", "replace")
            raise ImportError(f"streampool: {_where(library)} does not know struct "
                              f"{cls._c_name_} (ctypes class {cls.__name__}): {message}")
        # A library whose struct grew serves ours as an older version (docs/c-api.md); one whose
        # struct is smaller than ours cannot read it.
        if ctypes.sizeof(cls) > n.value:
            raise ImportError(
                f"streampool: struct {cls._c_name_} is {ctypes.sizeof(cls)} bytes in this "
                f"binding (ctypes class {cls.__name__}) but {n.value} bytes in "
                f"{_where(library)}: the layouts in {__name__} do not match the library's "
                "include/streampool.h")


def declare_all(library):
    """Declares every function of the binding, or raises ImportError naming the first one the
    library lacks (a library older than this binding, of the same ABI version)."""
    for name in _signatures:
        try:
            _declare(library, name)
        except AttributeError:
            v = [ctypes.c_int() for _ in range(3)]
            _declare(library, "sp_get_version")(*[ctypes.byref(x) for x in v])
            raise ImportError(
                f"streampool: {_where(library)} (version {'.'.join(str(x.value) for x in v)}) has "
                f"no {name}: it is older than this binding; use the library built with it") from None


# The version first: another ABI version may lack the functions declared above.
check_version(lib)
check_struct_sizes(lib)
declare_all(lib)
