"""DLPack around Array (docs/python.md, "Interop"): the checks of what a producer hands to
Array.from_dlpack and of what a consumer asks of Array.__dlpack__, and the device an import of
CUDA memory lands on when it is given none.

A producer is not trusted: a malformed answer, or an exception raised by its methods (kept as the
``__cause__``), becomes InvalidArgument naming it (InvalidType for a wrong type).
"""

from __future__ import annotations

import operator
import threading

from . import _dlpack
from ._checks import _raised, _shown
from ._device import Device
from ._errors import StreampoolError, _invalid, _wrong_type


_import_devices: dict[int, Device] = {}
_import_devices_lock = threading.Lock()


def _import_device(ordinal: int) -> Device:
    """The Device that Array.from_dlpack uses for CUDA memory of ``ordinal`` when given none: one
    per GPU, so that imports of the same memory agree on it."""
    with _import_devices_lock:
        d = _import_devices.get(ordinal)
        if d is None or d.closed:
            d = _import_devices[ordinal] = Device.cuda(ordinal)
        return d


def _exported(a):
    # What a DLPack export's deleter runs: the use that __dlpack__ entered ends (and with it the
    # reference that kept the array alive).
    return lambda: a._life.leave()


_INT32_MAX = (1 << 31) - 1  # DLDevice's fields are int32


def _dl_pair(value, what, names, maximum):
    """A pair of DLPack's (max_version, dl_device, __dlpack_device__'s answer): a tuple (or a
    list) of two non-negative ints up to ``maximum``, returned as a tuple of ints."""
    if not isinstance(value, (tuple, list)):
        raise _wrong_type(f"{what} {_shown(value)}: a {type(value).__name__}, not a tuple "
                          f"({names[0]}, {names[1]})")
    if len(value) != 2:
        raise _invalid(f"{what} {_shown(value)}: {len(value)} items, not a pair ({names[0]}, "
                       f"{names[1]})")
    out = []
    for item, name in zip(value, names):
        if isinstance(item, bool):
            raise _wrong_type(f"{what} {_shown(value)}: the {name} {item!r} is a bool, not an int")
        try:
            v = operator.index(item)
        except Exception:  # noqa: BLE001 - TypeError, or whatever a foreign __index__ raises
            raise _wrong_type(f"{what} {_shown(value)}: the {name} {_shown(item)} is a "
                              f"{type(item).__name__}, not an int") from None
        if not 0 <= v <= maximum:
            raise _invalid(f"{what} {_shown(value)}: the {name} {v} is outside 0 to {maximum}")
        out.append(v)
    return tuple(out)


def _dlpack_device_of(obj, what):
    """obj.__dlpack_device__(), checked: (kDLCPU, 0) or (kDLCUDA, id) as ints. A producer's
    exception becomes the cause of an InvalidArgument; a streampool error (a freed Array's) goes
    on as it is."""
    try:
        got = obj.__dlpack_device__()
    except StreampoolError:
        raise
    except Exception as e:  # noqa: BLE001 - the producer's code: any failure is reported
        raise _invalid(f"{what}.__dlpack_device__() raised {_raised(e)}") from e
    where = f"{what}.__dlpack_device__() returned"
    if not isinstance(got, tuple):  # the protocol's type: a list here is a producer's bug
        raise _wrong_type(f"{where} {_shown(got)}, a {type(got).__name__}, not a tuple "
                          "(device type, device id)")
    kind, ordinal = _dl_pair(got, where, ("device type", "device id"), _INT32_MAX)
    if kind not in (_dlpack.CPU, _dlpack.CUDA):
        raise _invalid(f"{where} {_shown(got)}: device type {_dlpack.device_name(kind)}; "
                       f"streampool imports {_dlpack.device_name(_dlpack.CPU)} and "
                       f"{_dlpack.device_name(_dlpack.CUDA)} memory")
    if kind == _dlpack.CPU and ordinal != 0:
        raise _invalid(f"{where} {_shown(got)}: host memory (kDLCPU) has device id 0, not "
                       f"{ordinal}")
    return kind, ordinal


def _take_capsule(obj, stream, what):
    """obj.__dlpack__ for our stream, asking for DLPack 1.0 where the producer knows it. The
    producer's exception becomes the cause of an InvalidArgument, as in _dlpack_device_of."""
    try:
        try:
            return obj.__dlpack__(stream=stream, max_version=_dlpack.VERSION)
        except TypeError:  # a producer older than max_version
            return obj.__dlpack__(stream=stream)
    except StreampoolError:
        raise
    except Exception as e:  # noqa: BLE001 - the producer's code: any failure is reported
        raise _invalid(f"{what}.__dlpack__() raised {_raised(e)}") from e
