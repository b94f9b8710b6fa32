"""Argument checks: every value is checked here before it reaches ctypes.

ctypes converts a Python int to size_t modulo 2**64 without a word (-5 becomes
18446744073709551611, 1 << 64 becomes 0), so every number is range-checked before it reaches C.
bool is refused where a number is meant: Array(True) is a bug, not a size. Typecodes, fill values,
host buffers and file paths are checked (and converted) here too. A bad value raises
InvalidArgument, a bad type InvalidType, each naming the call and the value.
"""

from __future__ import annotations

import array as _array
import ctypes
import numbers
import operator
import os
import struct
import sys

from ._capi import lib as _lib
from ._errors import _invalid, _wrong_type

SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
UINT_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_uint))) - 1
ADDRESS_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
# The most bytes one allocation may ask for (the library's STREAMPOOL_MAX_ALLOCATION_BYTES,
# include/streampool/limits.h): the pool refuses more as "beyond any device". Checked here too, so
# that an overflowing n * itemsize is reported with both numbers instead of as whatever the
# product wrapped to.
MAX_ALLOCATION_BYTES: int = _lib.sp_max_allocation_bytes()


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
    v = _integer(value, what, maximum=ADDRESS_MAX)
    if v == 0:
        raise _invalid(f"{what}: the null address")
    return v


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
