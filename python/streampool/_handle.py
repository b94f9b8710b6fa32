"""The lifetime of an object over a C handle or memory (a Device, Stream, Pool or Array).

Each object knows when it was closed (close() of a Stream, Pool or Device) or freed
(Array.free()): any later use of it, or passing it as an argument, raises InvalidArgument naming
it. This check is the binding's own, not the C layer's: a freed address may already hold another
array, which no check in C can tell from the old one. A free or close while another thread is in a
call on the same object takes effect when that call returns (_Life); _Using marks the objects of a
call in use; _Handle is the base class with what every such object shares: its repr, its
``closed`` state, and the message for a use after the end.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from ._errors import InvalidArgument, _invalid


class _Life:
    """Whether an object's C handle (or memory) is still there, and who is using it right now.

    close() marks the object dead at once, so that every later use raises; the C handle itself
    goes when the last use in flight (on another thread, or further up this thread's stack: a
    reclaim hook that closes the pool that is allocating) has finished. The C ABI leaves
    destroying a handle while another thread uses it to the caller, so the caller here makes sure
    it never happens. The lock guards ``users`` and ``closed``; it is never held across a C call.
    """

    __slots__ = ("lock", "users", "closed", "finalizer", "finished", "idle")

    def __init__(self, finalizer):
        self.lock = threading.Lock()
        self.users = 0
        self.closed = False
        self.finalizer = finalizer
        self.finished = False  # the finalizer has run to its end
        self.idle = None  # a Condition on lock, made by the first close_and_wait()

    def enter(self, what, owner):
        with self.lock:
            if not self.closed:
                self.users += 1
                return
        raise owner._gone(what)

    def try_enter(self):
        """enter() for a caller with a fallback: False (and no use) when closed."""
        with self.lock:
            if self.closed:
                return False
            self.users += 1
            return True

    def leave(self):
        with self.lock:
            self.users -= 1
            last = self.closed and self.users == 0
        if last:
            self._finalize()

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            now = self.users == 0
        if now:
            self._finalize()

    def close_and_wait(self):
        """close(), then wait until the handle is gone: uses in flight on other threads end
        first. For a caller that must not go on while the handle lives (a stream's owner about
        to destroy it); never from inside a use of this object on the same thread."""
        self.close()
        with self.lock:
            if self.idle is None:
                self.idle = threading.Condition(self.lock)
            while not self.finished:
                self.idle.wait()

    def _finalize(self):
        try:
            self.finalizer()
        finally:  # a waiter in close_and_wait must never hang on a finalizer that raised
            with self.lock:
                self.finished = True
                if self.idle is not None:
                    self.idle.notify_all()


class _Using:
    """``with _Using(what, a, b):`` marks a and b (Arrays, Streams, Pools, Devices) in use for the
    call ``what``, raising InvalidArgument naming the first one that was freed or closed."""

    __slots__ = ("what", "objs", "entered")

    def __init__(self, what, *objs):
        self.what = what
        self.objs = objs
        self.entered = []

    def __enter__(self):
        try:
            for o in self.objs:
                o._life.enter(self.what, o)
                self.entered.append(o)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        while self.entered:
            self.entered.pop()._life.leave()


class _Handle:
    """The base of Device, Stream, Pool and Array. A subclass names itself in messages with
    ``_describe()``, says what ends it in ``_dead_verb`` ("closed", or "freed" for an Array), and
    sets ``_life`` when it is made: with ``_own``, or (a Stream) a _Life of its own making."""

    _dead_verb = "closed"
    _life: _Life

    def _describe(self) -> str:
        raise NotImplementedError

    def _own(self, end: Callable[..., Any], *args: Any) -> None:
        """Makes ``end(*args)`` what frees this object's handle or memory: at close() (free() for
        an Array) once no call uses it any more, or when the object is collected. ``args`` are
        plain values (handles, addresses), never the object itself, so it can be collected."""
        self._life = _Life(weakref.finalize(self, end, *args))

    def _gone(self, what: str) -> InvalidArgument:
        """The error for a use of this object in the call ``what`` after its end."""
        return _invalid(f"{what}: {self._describe()} was {self._dead_verb}")

    def __repr__(self) -> str:
        return self._describe() + (f" ({self._dead_verb})" if self._life.closed else "")

    @property
    def closed(self) -> bool:
        return self._life.closed
