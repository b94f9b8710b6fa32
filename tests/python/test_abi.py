"""The binding's load-time checks of the library (python/streampool/_capi.py): its ABI version
and the size of each struct whose layout the binding copies by hand (plain unittest); how the
loader names the library; and the bounds the binding reads from it.

Run: STREAMPOOL_LIBRARY=build/release/libstreampool.so PYTHONPATH=python \
     python3 -m unittest discover -s tests/python -v
"""

import ctypes
import os
import subprocess
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The package in python/, unless the installed one is under test (scripts/run-tests.sh, stage
# python; tests/python/test_install.py).
if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))

import streampool as sp  # noqa: E402
from streampool import _capi  # noqa: E402


class WrongPoolOptions(ctypes.Structure):
    """sp_pool_options_t with a field this library does not have: a layout copied wrongly (or from
    a newer header). A binding struct smaller than the library's is served as an older version,
    so only a larger one can be told apart by size."""
    _c_name_ = "sp_pool_options_t"
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "struct_size", "memory_limit", "small_max", "stream_cache_bytes")] + [
        ("poison_on_free", ctypes.c_int), ("virtual_memory", ctypes.c_int),
        ("release_threshold", ctypes.c_size_t), ("share_between_streams", ctypes.c_int),
        ("large_cache_bytes", ctypes.c_size_t), ("keep_memory", ctypes.c_int),
        ("no_such_field", ctypes.c_size_t)]


class NoSuchStruct(ctypes.Structure):
    _c_name_ = "sp_no_such_t"
    _fields_ = [("struct_size", ctypes.c_size_t)]


class AbiCheckTest(unittest.TestCase):
    def test_the_binding_matches_this_library(self):
        _capi.check_version(_capi.lib)
        _capi.check_struct_sizes(_capi.lib)
        self.assertEqual(sp.version()[0], _capi.MAJOR_VERSION)
        if _capi.MAJOR_VERSION == 0:
            self.assertEqual(sp.version()[1], _capi.MINOR_VERSION)

    def test_a_wrong_struct_size_is_named_with_both_sizes(self):
        real = ctypes.sizeof(_capi.PoolOptions)
        wrong = ctypes.sizeof(WrongPoolOptions)
        self.assertNotEqual(real, wrong)
        with self.assertRaises(ImportError) as caught:
            _capi.check_struct_sizes(_capi.lib, [_capi.HostOptions, WrongPoolOptions])
        message = str(caught.exception)
        for part in ("sp_pool_options_t", "WrongPoolOptions", f"{wrong} bytes in this binding",
                     f"but {real} bytes in"):
            self.assertIn(part, message)

    def test_a_struct_the_library_does_not_know(self):
        with self.assertRaises(ImportError) as caught:
            _capi.check_struct_sizes(_capi.lib, [NoSuchStruct])
        self.assertIn("sp_no_such_t", str(caught.exception))
        self.assertIn("sp_struct_size", str(caught.exception))  # the library's own message

    def test_another_major_version_is_refused(self):
        major = sp.version()[0]
        with self.assertRaises(ImportError) as caught:
            _capi.check_version(_capi.lib, major=major + 1)
        message = str(caught.exception)
        self.assertIn(f"major version {major + 1}", message)
        self.assertIn("is version " + ".".join(map(str, sp.version())), message)

    def test_another_minor_version_is_refused_while_the_major_is_0(self):
        major, minor, _ = sp.version()
        if major != 0:
            self.skipTest(f"version {major}.{minor}: from 1.0 on, minor versions share the ABI")
        for other in (minor - 1, minor + 1):
            with self.subTest(minor=other):
                with self.assertRaises(ImportError) as caught:
                    _capi.check_version(_capi.lib, major=0, minor=other)
                message = str(caught.exception)
                self.assertIn(f"C ABI of version 0.{other}", message)
                self.assertIn("is version " + ".".join(map(str, sp.version())), message)

    def test_the_loader_names_the_soname_of_this_abi(self):
        major, minor = _capi.MAJOR_VERSION, _capi.MINOR_VERSION
        self.assertEqual(_capi.SONAME, f"libstreampool.so.{major}.{minor}" if major == 0
                         else f"libstreampool.so.{major}")
        with mock.patch.dict(os.environ):
            os.environ.pop("STREAMPOOL_LIBRARY", None)
            tried = list(_capi._candidates())
        self.assertIn(_capi.SONAME, tried)  # the system search path, by SONAME
        builds = os.path.join(ROOT, "build") + os.sep
        for path in tried:
            if path.startswith(builds):  # a build tree of another ABI has no such file
                self.assertEqual(os.path.basename(path), _capi.SONAME, path)

    def test_the_allocation_bound_is_the_librarys(self):
        bound = _capi.lib.sp_max_allocation_bytes()
        self.assertEqual(sp.MAX_ALLOCATION_BYTES, bound)
        self.assertGreater(bound, 0)
        self.assertEqual(bound & (bound - 1), 0, bound)  # a power of two, not a wrapped value

    def test_an_older_library_is_named_with_the_missing_function(self):
        class Older:  # the real library, without one function a newer binding declares
            _name = "libstreampool-older.so"

            def __getattr__(self, name):
                if name == "sp_memory_acquire":
                    raise AttributeError(name)
                return getattr(_capi.lib, name)

        with self.assertRaises(ImportError) as caught:
            _capi.declare_all(Older())
        message = str(caught.exception)
        self.assertIn("sp_memory_acquire", message)
        self.assertIn("libstreampool-older.so (version " + ".".join(map(str, sp.version())),
                      message)

    def test_the_check_runs_when_the_binding_loads(self):
        # A fresh interpreter where ctypes reports PoolStatistics 8 bytes larger than it is: the
        # import itself must fail, naming the struct.
        code = ("import ctypes\n"
                "real = ctypes.sizeof\n"
                "ctypes.sizeof = lambda t: real(t) + (8 if getattr(t, '__name__', '') == "
                "'PoolStatistics' else 0)\n"
                "import streampool\n")
        env = dict(os.environ)
        if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
            env["PYTHONPATH"] = os.path.join(ROOT, "python")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120)
        self.assertNotEqual(done.returncode, 0, done.stdout)
        self.assertIn("ImportError", done.stderr)
        self.assertIn("sp_pool_statistics_t", done.stderr)

    def test_every_struct_carries_its_size(self):
        for cls in _capi.STRUCTS:
            self.assertEqual(cls().struct_size, ctypes.sizeof(cls), cls.__name__)
        self.assertNotIn("struct_size", sp.Pool(sp.Device.host()).statistics())


if __name__ == "__main__":
    unittest.main()
