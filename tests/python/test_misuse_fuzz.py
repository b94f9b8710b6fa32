"""Misuse fuzzer of the Python binding (issue 9, "No misuse gets through").

Random sequences over the public API with a fixed seed: arrays made with every typecode and with
sizes and typecodes that are wrong (negative, huge, of the wrong type), freed, used after the free
(every method), uploaded, downloaded, filled and copied with valid and invalid arguments; streams,
pools and a second device made and closed and then passed as arguments; references dropped (some
in cycles) and gc.collect() at random points.

The fuzzer predicts each call: it must succeed, or raise InvalidArgument (InvalidType when the
only fault is a type), or OutOfDeviceMemory (a pool whose limit is 1 byte). Any other outcome, any
non-package exception, or a crash fails the test. After every step each live array is downloaded
and compared, byte for byte, with a Python-side shadow copy: a live array never changes behind
the caller's back (the use-after-free that returned and overwrote another array's data).

Longer runs: STREAMPOOL_FUZZ_OPS (default 10000 operations per variant), STREAMPOOL_FUZZ_SEED
(default 1). A failure prints the seed and the last operations.
"""

import array
import gc
import os
import random
import struct
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package in python/, unless the installed one is under test (scripts/run-tests.sh, stage
# python; tests/python/test_install.py).
if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import streampool as sp  # noqa: E402

OPS = int(os.environ.get("STREAMPOOL_FUZZ_OPS", "10000"))
SEED = int(os.environ.get("STREAMPOOL_FUZZ_SEED", "1"))

MAX_LIVE = 16  # live arrays: bounded so that checking all of them after every step stays cheap
MAX_N = 64  # elements per array
MAX_BYTES = sp.MAX_ALLOCATION_BYTES  # the library's sp_max_allocation_bytes()
TYPECODES = "bBhHiIlLqQfd"
VALID = set(TYPECODES)
BAD_TYPECODES = [("x", sp.InvalidArgument), ("u", sp.InvalidArgument), ("", sp.InvalidArgument),
                 ("ff", sp.InvalidArgument), (5, sp.InvalidType), (None, sp.InvalidType),
                 (b"f", sp.InvalidType)]
NOT_A_NUMBER = ["4", None, [1], object(), 2.5j]
NOT_A_BUFFER = ["abcd", 7, None, [1, 2], object()]

OK = None  # an expectation: the call succeeds


class Failure(AssertionError):
    pass


def expect_of(*faults):
    """The exception a call must raise given its faults (each InvalidArgument or InvalidType):
    InvalidType only when every fault is a type; none, success."""
    faults = [f for f in faults if f is not None]
    if not faults:
        return OK
    return sp.InvalidType if all(f is sp.InvalidType for f in faults) else sp.InvalidArgument


def int_range(typecode):
    bits = 8 * array.array(typecode).itemsize
    if typecode.isupper():
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


class Fuzzer:
    def __init__(self, rng, checking):
        self.rng = rng
        self.device = sp.Device.host(checking=checking, seed=rng.randrange(1 << 32))
        self.other = sp.Device.host()  # a second device: its streams and arrays are misuse here
        self.other_stream = sp.Stream(self.other)
        self.live = []  # [Array, shadow bytes or None (contents not yet defined)]
        self.freed = []  # freed Arrays, most recent last
        self.streams = [sp.Stream(self.device)]
        self.closed_streams = []
        self.pools = [self.device.default_pool(), sp.Pool(self.device, memory_limit=64 << 20)]
        self.tiny = sp.Pool(self.device, memory_limit=1)  # every allocation: OutOfDeviceMemory
        self.closed_pools = []
        self.closed_devices = []
        self.log = []
        self.calls = self.raised = self.verified = 0

    # -- the harness ---------------------------------------------------------------------------

    def call(self, expect, what, fn, *args, **kwargs):
        """Runs fn; it must succeed (expect OK) or raise ``expect``. Returns (ok, result)."""
        self.calls += 1
        self.log.append(what)
        del self.log[:-40]
        try:
            result = fn(*args, **kwargs)
        except sp.StreampoolError as e:
            self.raised += 1
            if expect is OK or not isinstance(e, expect):
                raise Failure(f"{what}: raised {type(e).__name__}: {e}; expected "
                              f"{'success' if expect is OK else expect.__name__}") from e
            if not str(e):
                raise Failure(f"{what}: {type(e).__name__} with an empty message")
            return False, None
        except Exception as e:
            raise Failure(f"{what}: raised {type(e).__name__} (not a StreampoolError): {e}") from e
        if expect is not OK:
            raise Failure(f"{what}: returned {result!r}; expected {expect.__name__}")
        return True, result

    def verify(self):
        """Every live array still holds exactly what the caller last put there."""
        for a, shadow in self.live:
            if a.freed:
                raise Failure(f"{a!r} is marked freed but was never freed")
            if shadow is not None:
                self.verified += 1
                got = a.download().tobytes()
                if got != shadow:
                    raise Failure(f"{a!r} changed behind the caller's back: {got.hex()} != "
                                  f"{shadow.hex()}")
        for a in self.freed:
            if not a.freed:
                raise Failure(f"{a!r} was freed but does not say so")

    # -- choices -------------------------------------------------------------------------------

    def pick_stream(self):
        """(stream argument, its fault)."""
        r = self.rng.random()
        if r < 0.45:
            return None, None
        if r < 0.8:
            return self.rng.choice(self.streams), None
        if r < 0.88 and self.closed_streams:
            return self.rng.choice(self.closed_streams), sp.InvalidArgument
        if r < 0.94:
            return self.other_stream, sp.InvalidArgument
        return self.rng.choice([self.device, 5, "s", self.pools[0]]), sp.InvalidType

    def pick_size(self, typecode):
        """(size, its fault)."""
        r = self.rng.random()
        if r < 0.85:
            sizes = [0, 1, 2, 3, 7, 8, 16, 63, MAX_N, self.rng.randint(0, MAX_N)]
            return self.rng.choice(sizes), None
        if r < 0.9:
            return self.rng.choice([-1, -MAX_N, -(1 << 70)]), sp.InvalidArgument
        if r < 0.95:
            size = array.array(typecode).itemsize if typecode in VALID else 1
            return self.rng.choice([MAX_BYTES // size + 1, 1 << 62, 1 << 64, 1 << 200]), \
                sp.InvalidArgument
        return self.rng.choice([3.0, 0.5, True, False] + NOT_A_NUMBER), sp.InvalidType

    def pick_typecode(self):
        if self.rng.random() < 0.93:
            return self.rng.choice(TYPECODES), None
        return self.rng.choice(BAD_TYPECODES)

    def pick_pool(self):
        """(keyword arguments for Array, their fault, whether the allocation must run out of
        memory)."""
        r = self.rng.random()
        if r < 0.55:
            return {"pool": self.rng.choice(self.pools)}, None, False
        if r < 0.75:
            return {"device": self.device}, None, False
        if r < 0.8:
            return {"pool": self.tiny}, None, True
        if r < 0.86 and self.closed_pools:
            return {"pool": self.rng.choice(self.closed_pools)}, sp.InvalidArgument, False
        if r < 0.9 and self.closed_devices:
            return {"device": self.rng.choice(self.closed_devices)}, sp.InvalidArgument, False
        if r < 0.93:
            return {"pool": self.pools[0], "device": self.other}, sp.InvalidArgument, False
        if r < 0.96:
            return {}, sp.InvalidArgument, False  # neither pool nor device
        return self.rng.choice([{"pool": self.device}, {"device": self.pools[0]},
                                {"pool": 3}]), sp.InvalidType, False

    def random_values(self, typecode, n):
        if typecode in "fd":
            return array.array(typecode, (self.rng.uniform(-1e6, 1e6) for _ in range(n)))
        lo, hi = int_range(typecode)
        return array.array(typecode, (self.rng.randint(lo, hi) for _ in range(n)))

    def pick_live(self):
        return self.rng.choice(self.live) if self.live else None

    def make_room(self):
        while len(self.live) >= MAX_LIVE:
            entry = self.live.pop(self.rng.randrange(len(self.live)))
            if self.rng.random() < 0.5:
                entry[0].free()
                self.remember_freed(entry[0])
            # else: dropped; its finalizer frees it (now, or at a gc.collect() when in a cycle)

    def remember_freed(self, a):
        self.freed.append(a)
        del self.freed[:-MAX_LIVE]

    # -- operations ----------------------------------------------------------------------------

    def op_create(self):
        self.make_room()
        typecode, f1 = self.pick_typecode()
        n, f2 = self.pick_size(typecode)
        pool_kw, f3, oom = self.pick_pool()
        stream, f4 = self.pick_stream()
        expect = expect_of(f1, f2, f3, f4)
        if expect is OK and oom:
            expect = sp.OutOfDeviceMemory
        ok, a = self.call(expect, f"Array({n!r}, {typecode!r}, {pool_kw!r}, stream={stream!r})",
                          sp.Array, n, typecode, stream=stream, **pool_kw)
        if ok:
            if (len(a), a.typecode, a.nbytes) != (n, typecode, n * array.array(typecode).itemsize):
                raise Failure(f"{a!r}: wrong size or typecode for Array({n}, {typecode!r})")
            self.live.append([a, None])

    def op_from_buffer(self):
        self.make_room()
        typecode = self.rng.choice(TYPECODES)
        data = self.random_values(typecode, self.rng.randint(0, MAX_N))
        pool_kw, fault, oom = self.pick_pool()
        stream, f2 = self.pick_stream()
        if self.rng.random() < 0.3:  # raw bytes with a typecode; sometimes not whole elements
            data = data.tobytes()[:self.rng.randint(0, len(data) * data.itemsize)]
            pool_kw["typecode"] = typecode
            f3 = sp.InvalidArgument if len(data) % array.array(typecode).itemsize else None
        else:
            f3 = None
        expect = expect_of(fault, f2, f3)
        if expect is OK and oom:
            expect = sp.OutOfDeviceMemory
        ok, a = self.call(expect, f"Array.from_buffer({len(data)} bytes, {pool_kw!r}, "
                                  f"stream={stream!r})",
                          sp.Array.from_buffer, data, stream=stream, **pool_kw)
        if ok:
            self.live.append([a, bytes(data)])

    def op_free(self):
        if self.live and self.rng.random() < 0.8:
            a, _ = self.live.pop(self.rng.randrange(len(self.live)))
            self.remember_freed(a)
        elif self.freed:
            a = self.rng.choice(self.freed)  # again: idempotent
        else:
            return
        self.call(OK, f"{a!r}.free()", a.free)

    def op_drop(self):
        if not self.live:
            return
        a, _ = self.live.pop(self.rng.randrange(len(self.live)))
        if self.rng.random() < 0.5:
            a.cycle = [a]  # only gc.collect() frees it
        self.log.append(f"drop {a!r}")

    def op_use_after_free(self):
        if not self.freed:
            return
        a = self.rng.choice(self.freed)
        other = self.pick_live()
        other = other[0] if other else a
        n = a.size
        calls = [
            ("upload", lambda: a.upload(bytes(a.nbytes))),
            ("download", a.download),
            ("download(out=)", lambda: a.download(out=bytearray(a.nbytes))),
            ("fill", lambda: a.fill(1)),
            ("fill('x')", lambda: a.fill("x")),
            ("copy_from(live)", lambda: a.copy_from(other)),
            ("live.copy_from", lambda: other.copy_from(a)),
            ("copy_from(self)", lambda: a.copy_from(a)),
            ("tolist", a.tolist),
            ("ptr", lambda: a.ptr),
            ("upload(wrong length)", lambda: a.upload(bytes(a.nbytes + 1))),
            ("fill(stream=closed)", lambda: a.fill(0, stream=self.rng.choice(
                self.closed_streams or self.streams))),
        ]
        name, fn = self.rng.choice(calls)
        self.call(sp.InvalidArgument, f"{a!r} (freed, {n} elements).{name}", fn)

    def op_upload(self):
        entry = self.pick_live()
        if entry is None:
            return
        a, _ = entry
        stream, fault = self.pick_stream()
        r = self.rng.random()
        if r < 0.5:
            data = self.random_values(a.typecode, a.size)
            shadow = data.tobytes()
        elif r < 0.65:
            shadow = bytes(self.rng.getrandbits(8) for _ in range(a.nbytes))
            data = shadow
        elif r < 0.75:  # a non-contiguous view: staged through a copy
            raw = bytes(self.rng.getrandbits(8) for _ in range(2 * a.nbytes))
            data = memoryview(raw)[::2]
            shadow = raw[::2]
        elif r < 0.9:
            data, shadow = bytes(a.nbytes + self.rng.choice([-1, 1, 8])) if a.nbytes else b"x", None
            fault = expect_of(fault, sp.InvalidArgument)
        else:
            data, shadow = self.rng.choice(NOT_A_BUFFER), None
            fault = expect_of(fault, sp.InvalidType)
        ok, _ = self.call(expect_of(fault), f"{a!r}.upload({type(data).__name__} "
                                            f"{getattr(data, 'nbytes', None)}, stream={stream!r})",
                          a.upload, data, stream=stream)
        if ok:
            entry[1] = shadow

    def op_download(self):
        entry = self.pick_live()
        if entry is None:
            return
        a, shadow = entry
        stream, fault = self.pick_stream()
        r = self.rng.random()
        if r < 0.4:
            out = None
        elif r < 0.6:
            out = bytearray(a.nbytes)
        elif r < 0.7:
            out = array.array(a.typecode, bytes(a.nbytes))
        elif r < 0.8:
            out = bytearray(a.nbytes + self.rng.choice([1, 4]))
            fault = expect_of(fault, sp.InvalidArgument)
        elif r < 0.85 and a.nbytes:
            out = bytes(a.nbytes)  # read-only
            fault = expect_of(fault, sp.InvalidArgument)
        elif r < 0.9 and a.nbytes > 1:  # (one byte with a stride is still contiguous)
            out = memoryview(bytearray(2 * a.nbytes))[::2]  # not contiguous
            fault = expect_of(fault, sp.InvalidArgument)
        else:
            out = self.rng.choice([b for b in NOT_A_BUFFER if b is not None])  # None: a new array
            fault = expect_of(fault, sp.InvalidType)
        ok, got = self.call(expect_of(fault), f"{a!r}.download(out={type(out).__name__}, "
                                              f"stream={stream!r})",
                            a.download, out=out, stream=stream)
        if ok and shadow is not None and bytes(memoryview(got).cast("B")) != shadow:
            raise Failure(f"{a!r}.download: {bytes(got).hex()} != {shadow.hex()}")

    def fill_value(self, typecode):
        """(value, its fault, the element's bytes when valid)."""
        r = self.rng.random()
        if typecode in "fd":
            if r < 0.7:
                v = self.rng.choice([0.0, 1.5, -2.25, float("inf"), float("nan"), 3,
                                     -(1 << 40), self.rng.uniform(-1e30, 1e30), 1e300])
                if typecode == "f" and v == 1e300:
                    return v, sp.InvalidArgument, None
                return v, None, struct.pack(typecode, float(v))
            if r < 0.8:
                return self.rng.choice([1 << 2000, -(1 << 1100)]), sp.InvalidArgument, None
            return self.rng.choice(NOT_A_NUMBER + [True, b"1"]), sp.InvalidType, None
        lo, hi = int_range(typecode)
        if r < 0.7:
            v = self.rng.choice([lo, hi, 0, 1, -1 if lo else 2, self.rng.randint(lo, hi)])
            return v, None, struct.pack(typecode, v)
        if r < 0.8:
            return self.rng.choice([lo - 1, hi + 1, 1 << 100]), sp.InvalidArgument, None
        return self.rng.choice(NOT_A_NUMBER + [3.0, 1.5, True, False]), sp.InvalidType, None

    def op_fill(self):
        entry = self.pick_live()
        if entry is None:
            return
        a, _ = entry
        stream, f1 = self.pick_stream()
        value, f2, element = self.fill_value(a.typecode)
        ok, _ = self.call(expect_of(f1, f2), f"{a!r}.fill({value!r}, stream={stream!r})",
                          a.fill, value, stream=stream)
        if ok:
            entry[1] = element * a.size

    def op_copy_from(self):
        entry = self.pick_live()
        if entry is None:
            return
        a, _ = entry
        stream, fault = self.pick_stream()
        r = self.rng.random()
        matching = [e for e in self.live if e[0].typecode == a.typecode and e[0].size == a.size]
        if r < 0.6:
            src_entry = self.rng.choice(matching)  # may be a itself
            src, shadow = src_entry
        elif r < 0.8 and self.live:
            src, shadow = self.rng.choice(self.live)
            if src.typecode != a.typecode or src.size != a.size:
                fault = expect_of(fault, sp.InvalidArgument)
        elif r < 0.9 and self.freed:
            src, shadow = self.rng.choice(self.freed), None
            fault = expect_of(fault, sp.InvalidArgument)
        else:
            src, shadow = self.rng.choice([a.download(), bytes(a.nbytes), None, 1]), None
            fault = expect_of(fault, sp.InvalidType)
        ok, _ = self.call(expect_of(fault), f"{a!r}.copy_from({src!r}, stream={stream!r})",
                          a.copy_from, src, stream=stream)
        if ok:
            entry[1] = shadow

    def op_stream(self):
        r = self.rng.random()
        if r < 0.3 and len(self.streams) < 4:
            ok, s = self.call(OK, "Stream(device)", sp.Stream, self.device)
            self.streams.append(s)
        elif r < 0.5 and len(self.streams) > 1:
            s = self.streams.pop(self.rng.randrange(len(self.streams)))
            self.call(OK, f"{s!r}.close()", s.close)
            self.closed_streams.append(s)
            del self.closed_streams[:-4]
        elif r < 0.55 and self.closed_streams:
            s = self.rng.choice(self.closed_streams)
            self.call(OK, f"{s!r}.close() again", s.close)
        elif r < 0.7:
            s, fault = self.pick_stream()
            if s is None:
                s = self.device.default_stream()
            if fault is sp.InvalidType:
                return
            # Another device's stream is a fine stream to synchronize.
            self.call(sp.InvalidArgument if s.closed else OK, f"{s!r}.synchronize()",
                      s.synchronize)
        elif r < 0.85:
            s = self.rng.choice(self.streams)
            other, fault = self.pick_stream()
            if other is None:
                other = self.device.default_stream()
            self.call(fault, f"{s!r}.wait({other!r})", s.wait, other)
        else:
            s = self.rng.choice(self.closed_streams or self.streams)
            self.call(sp.InvalidArgument if s.closed else OK, f"{s!r}.native", lambda: s.native)

    def op_pool(self):
        r = self.rng.random()
        if r < 0.2 and len(self.pools) < 4:
            kw = {}
            faults = []
            for key, good, bad in (
                    ("memory_limit", [0, 64 << 20, 1 << 62, (1 << 64) - 1], [(-5, sp.InvalidArgument),
                                                               (1 << 64, sp.InvalidArgument),
                                                               (1.5, sp.InvalidType)]),
                    ("small_max", [None, 0, 256, 4096, 1 << 20], [(-1, sp.InvalidArgument),
                                                                  ("4096", sp.InvalidType)]),
                    ("stream_cache_bytes", [None, 0, 1 << 16], [(-1, sp.InvalidArgument),
                                                                (True, sp.InvalidType)]),
                    ("poison_on_free", [False, True], [("yes", sp.InvalidType)])):
                if self.rng.random() < 0.1:
                    kw[key], f = self.rng.choice(bad)
                    faults.append(f)
                else:
                    kw[key] = self.rng.choice(good)
            ok, p = self.call(expect_of(*faults), f"Pool(device, **{kw!r})", sp.Pool,
                              self.device, **kw)
            if ok:
                self.pools.append(p)
        elif r < 0.3 and len(self.pools) > 2:
            p = self.pools.pop(self.rng.randrange(2, len(self.pools)))
            self.call(OK, f"{p!r}.close()", p.close)  # its arrays keep working
            self.closed_pools.append(p)
            del self.closed_pools[:-4]
        elif r < 0.6:
            closed = self.closed_pools and self.rng.random() < 0.3
            p = self.rng.choice(self.closed_pools if closed else self.pools)
            expect = sp.InvalidArgument if closed else OK
            name, fn = self.rng.choice([
                ("statistics", p.statistics), ("trim", p.trim),
                ("memory_limit", lambda: p.memory_limit),
                ("close again", p.close) if closed else ("trim", p.trim)])
            if name == "close again":
                expect = OK
            self.call(expect, f"{p!r}.{name}", fn)
        elif r < 0.75:
            p = self.rng.choice(self.pools[1:])  # not the default pool: its limit stays none
            value, fault = self.rng.choice([(64 << 20, None), (1 << 62, None), ((1 << 64) - 1, None),
                                            (-1, sp.InvalidArgument), (1 << 64, sp.InvalidArgument),
                                            (2.0, sp.InvalidType)])
            self.call(fault, f"{p!r}.memory_limit = {value!r}", setattr, p, "memory_limit", value)
        else:
            p = self.rng.choice(self.pools)
            stream, fault = self.pick_stream()
            nbytes, f2 = self.rng.choice([(0, None), (100, None), (4096, None),
                                          (-1, sp.InvalidArgument), (1 << 64, sp.InvalidArgument),
                                          (MAX_BYTES + 1, sp.InvalidArgument),
                                          (10.0, sp.InvalidType)])
            ok, ptr = self.call(expect_of(fault, f2), f"{p!r}.allocate({nbytes!r}, {stream!r})",
                                p.allocate, nbytes, stream)
            if ok:
                bad, f3 = self.rng.choice([(ptr, None), (0, sp.InvalidArgument),
                                           (-ptr, sp.InvalidArgument),
                                           (ptr + 1, sp.InvalidArgument),
                                           (float(ptr), sp.InvalidType)])
                self.call(f3, f"{p!r}.deallocate({bad!r})", p.deallocate, bad)
                if f3 is not None:
                    self.call(OK, f"{p!r}.deallocate({ptr:#x})", p.deallocate, ptr)
                self.call(sp.InvalidArgument, f"{p!r}.deallocate({ptr:#x}) again", p.deallocate,
                          ptr)

    def op_device(self):
        r = self.rng.random()
        if r < 0.3:
            d = sp.Device.host()
            s = sp.Stream(d)
            a = sp.Array(4, "i", device=d, stream=s)
            self.call(OK, f"{d!r}.close()", d.close)
            self.closed_devices.append(d)
            del self.closed_devices[:-2]
            # Its streams and memory keep working; the device itself does not.
            self.call(OK, f"{a!r}.fill(3, stream={s!r})", a.fill, 3, stream=s)
            ok, got = self.call(OK, f"{a!r}.tolist(stream={s!r})", a.tolist, stream=s)
            if got != [3] * 4:
                raise Failure(f"{a!r} on closed {d!r}: {got}")
            self.call(sp.InvalidArgument, f"{a!r}.fill(3) (default stream of a closed device)",
                      a.fill, 3)
        elif self.closed_devices:
            d = self.rng.choice(self.closed_devices)
            name, fn = self.rng.choice([("Stream", lambda: sp.Stream(d)),
                                        ("Pool", lambda: sp.Pool(d)),
                                        ("default_pool", d.default_pool),
                                        ("default_stream", d.default_stream),
                                        ("violations", d.violations),
                                        ("close again", d.close)])
            self.call(OK if name == "close again" else sp.InvalidArgument, f"{d!r}.{name}", fn)
        elif self.live:
            a, _ = self.pick_live()  # an array and another device's array
            b = sp.Array(a.size, a.typecode, device=self.other, stream=self.other_stream)
            self.call(sp.InvalidArgument, f"{a!r}.copy_from(other device's {b!r})",
                      a.copy_from, b)

    def op_collect(self):
        self.log.append("gc.collect()")
        gc.collect()

    def run(self, ops):
        table = [(self.op_create, 14), (self.op_from_buffer, 5), (self.op_free, 7),
                 (self.op_drop, 3), (self.op_use_after_free, 9), (self.op_upload, 10),
                 (self.op_download, 10), (self.op_fill, 10), (self.op_copy_from, 9),
                 (self.op_stream, 6), (self.op_pool, 6), (self.op_device, 1),
                 (self.op_collect, 2)]
        fns, weights = zip(*table)
        for _ in range(ops):
            self.rng.choices(fns, weights)[0]()
            self.verify()

    def finish(self):
        """Everything freed and collected: no bytes left live in any pool still open."""
        for a, _ in self.live:
            a.free()
        self.live.clear()
        gc.collect()
        for p in self.pools:
            live = p.statistics()["live_bytes"]
            if live:
                raise Failure(f"{p!r}: {live} bytes still live after everything was freed")
        return self.device.violations()


class MisuseFuzz(unittest.TestCase):
    def fuzz(self, checking, ops, seed):
        fuzzer = Fuzzer(random.Random(seed), checking)
        start = time.monotonic()
        try:
            fuzzer.run(ops)
            violations = fuzzer.finish()
        except Failure as e:
            trace = "\n  ".join(fuzzer.log)
            self.fail(f"seed {seed}, checking={checking}: {e}\nlast operations:\n  {trace}")
        self.assertEqual(violations, [])
        if os.environ.get("STREAMPOOL_FUZZ_VERBOSE"):
            print(f"\n{ops} operations (checking={checking}, seed {seed}): {fuzzer.calls} calls, "
                  f"{fuzzer.raised} raised as predicted, {fuzzer.verified} arrays compared with "
                  f"their shadows, {time.monotonic() - start:.1f} s",
                  file=sys.stderr)

    def test_misuse_fuzz(self):
        self.fuzz(checking=False, ops=OPS, seed=SEED)

    def test_misuse_fuzz_checking(self):
        # The host backend's race detector on: also no ordering violation among valid calls.
        self.fuzz(checking=True, ops=OPS, seed=SEED + 1)


if __name__ == "__main__":
    unittest.main()
