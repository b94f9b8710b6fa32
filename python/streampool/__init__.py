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
device, which is destroyed when the thread exits. Handing an array to another thread or stream
needs nothing: the C layer orders each operation after earlier work on other streams.

Misuse raises, it never reaches C (docs/python.md, "Lifecycle and errors"). Each object
knows when it was freed (Array.free()) or closed (close() of a Stream, Pool or Device; both
idempotent): any later use of it, or passing it as an argument, raises InvalidArgument naming it.
This check is the binding's own, not the C layer's: a freed address may already hold another
array, which no check in C can tell from the old one. A free or close while another thread is in a
call on the same object takes effect when that call returns. Sizes, options and values are
checked before they reach ctypes, which would wrap -5 or 1 << 64 into a size_t without a word.
Every error is a StreampoolError: InvalidArgument (a ValueError) for a bad value, InvalidType
(an InvalidArgument and a TypeError) for a bad type.

The package is cut by concept; this file only gathers the public names:

* _errors: the exceptions, and how a C status becomes one;
* _checks: the argument checks, before anything reaches ctypes;
* _handle: the lifetime of an object over a C handle (closed or freed, in use), and its base class;
* _device, _stream, _pool, _array: the four objects;
* _interop: DLPack's producer and consumer checks around Array;
* _capi (the C ABI in ctypes, and the library loader) and _dlpack (DLPack's structs and capsules);
* _torch_native: the native PyTorch allocator's library, found or built for streampool.torch;
* streampool.torch, streampool.cupy, streampool.report: the integrations, imported by name.
"""

from __future__ import annotations

from . import _capi, _dlpack  # noqa: F401
from ._array import Array
from ._capi import lib as _lib  # noqa: F401
from ._checks import MAX_ALLOCATION_BYTES, SIZE_MAX, UINT_MAX  # noqa: F401
from ._device import Device, version
from ._errors import (BackendError, InvalidArgument, InvalidType, NotAvailable, OutOfDeviceMemory,
                      StreampoolError)
from ._pool import Pool, Recording
from ._stream import Stream, release_native_stream

# Internal helpers, importable from the package too, for code outside it that uses them.
from ._checks import _integer, _path, _shown  # noqa: F401
from ._errors import _check, _invalid, _report, _wrong_type  # noqa: F401

__all__ = ["Device", "Stream", "Pool", "Array", "StreampoolError", "InvalidArgument",
           "InvalidType", "OutOfDeviceMemory", "NotAvailable", "BackendError", "version",
           "release_native_stream", "Recording"]

# The public names are streampool's wherever they are defined: their repr, tracebacks and
# pickling by reference say streampool.Device, streampool.InvalidArgument...
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
