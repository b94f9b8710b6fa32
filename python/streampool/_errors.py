"""Errors: the exceptions of the binding, and how a C status becomes one.

Every error is a StreampoolError carrying the C status code: InvalidArgument (a ValueError) for a
bad value, InvalidType (an InvalidArgument and a TypeError) for a bad type, OutOfDeviceMemory (a
MemoryError), NotAvailable and BackendError. A finalizer cannot raise, so it reports a failing
call on stderr instead (_report).
"""

from __future__ import annotations

import sys

from . import _capi
from ._capi import lib as _lib


class StreampoolError(Exception):
    """A failing streampool call. ``status`` is the C status code; the message names the values."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class InvalidArgument(StreampoolError, ValueError):
    """A broken precondition: a freed or closed object, a negative or overflowing size, a wrong
    length, an out-of-range value. Nothing changed."""


class InvalidType(InvalidArgument, TypeError):
    """An argument of the wrong type (a float or bool size, a string fill value, a non-buffer).
    An InvalidArgument, so one ``except`` catches every misuse, and a TypeError, as Python's own
    functions raise."""


class OutOfDeviceMemory(StreampoolError, MemoryError):
    pass


class NotAvailable(StreampoolError):
    pass


class BackendError(StreampoolError):
    pass


_errors = {_capi.INVALID_ARGUMENT: InvalidArgument, _capi.OUT_OF_DEVICE_MEMORY: OutOfDeviceMemory,
           _capi.NOT_AVAILABLE: NotAvailable, _capi.BACKEND_ERROR: BackendError}


def _check(status):
    if status != _capi.SUCCESS:
        message = _lib.sp_last_error_message().decode("utf-8", "replace")
        raise _errors.get(status, StreampoolError)(status, message)


def _invalid(message):
    return InvalidArgument(_capi.INVALID_ARGUMENT, message)


def _wrong_type(message):
    return InvalidType(_capi.INVALID_ARGUMENT, message)


def _report(what, status):
    """A failure in a finalizer, where nothing can be raised: written to stderr."""
    if status != _capi.SUCCESS:
        msg = _lib.sp_last_error_message().decode("utf-8", "replace")
        print(f"streampool: {what} failed in a finalizer: {msg}", file=sys.stderr)
