"""streampool.torch.enable()'s choice of allocator (docs/torch.md, "Which path"): the native
allocator built on first use for the imported torch and cached, or the plug-in with a warning
that names why and what is lost. Needs a torch that imports (its CUDA libraries; no GPU: the
allocator is installed, not used) and a compiler with CUDA's runtime headers; skips otherwise.
Each enable() runs in a child process: an allocator is installed once per process."""

import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except Exception:  # ImportError, or OSError for a wheel without its CUDA libraries
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_child(code, **env):
    """Runs `code` in a fresh interpreter with this package and `env` added; (rc, stdout, stderr)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env)
    p = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


@unittest.skipIf(torch is None, "torch does not import here")
class NativeBuild(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = tempfile.mkdtemp(prefix="streampool-torch-native-")

    def test_built_once_then_reused(self):
        code = ("from streampool import _torch_native as t; import os, time\n"
                "t0 = time.time(); p = t.library(); t1 = time.time(); q = t.library()\n"
                "print(p); print(q); print(os.path.isfile(p))\n")
        rc, out, err = run_child(code, STREAMPOOL_TORCH_NATIVE_CACHE=self.cache)
        self.assertEqual(rc, 0, err)
        first, second, exists = out.split()[-3:]
        self.assertEqual(first, second)
        self.assertTrue(first.startswith(self.cache), first)
        self.assertEqual(exists, "True")
        # A second process finds the build in the cache.
        rc, out2, err = run_child(code, STREAMPOOL_TORCH_NATIVE_CACHE=self.cache)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out2.split()[-3], first)

    def test_enable_installs_the_native_allocator(self):
        code = ("import torch, streampool.torch as st\n"
                "st.enable()\n"
                "print(st.native(), torch.cuda.get_allocator_backend())\n")
        rc, out, err = run_child(code, STREAMPOOL_TORCH_NATIVE_CACHE=self.cache,
                                 STREAMPOOL_TORCH_BACKEND="host")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split()[-2:], ["True", "streampool"])

    def test_falls_back_to_the_plugin_with_a_warning_that_names_why(self):
        code = ("import warnings, streampool.torch as st\n"
                "with warnings.catch_warnings(record=True) as w:\n"
                "    warnings.simplefilter('always')\n"
                "    st.enable()\n"
                "print(st.native()); print([str(x.message) for x in w])\n")
        rc, out, err = run_child(code, STREAMPOOL_TORCH_NATIVE="/nonexistent/libstreampool_torch.so",
                                 STREAMPOOL_TORCH_BACKEND="host")
        self.assertEqual(rc, 0, err)
        self.assertIn("False", out)
        self.assertIn("/nonexistent/libstreampool_torch.so is not a file", out)
        self.assertIn("CUDA graphs", out)

    def test_native_true_raises_instead(self):
        code = ("import streampool.torch as st\n"
                "try:\n    st.enable(native=True)\nexcept RuntimeError as e:\n    print('raised', e)\n")
        rc, out, err = run_child(code, STREAMPOOL_TORCH_NATIVE="/nonexistent/x.so",
                                 STREAMPOOL_TORCH_BACKEND="host")
        self.assertEqual(rc, 0, err)
        self.assertIn("raised streampool.torch: the native allocator is unavailable", out)

    def test_native_false_and_the_environment_choose_the_plugin(self):
        code = ("import warnings, torch, streampool.torch as st\n"
                "warnings.filterwarnings('error', message='streampool.torch: the native')\n"
                "st.enable(native=False)\nprint(st.native())\n")
        rc, out, err = run_child(code, STREAMPOOL_TORCH_BACKEND="host")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split()[-1], "False")
        code = "import streampool.torch as st\nst.enable()\nprint(st.native())\n"
        rc, out, err = run_child(code, STREAMPOOL_TORCH_NATIVE="0", STREAMPOOL_TORCH_BACKEND="host")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split()[-1], "False")


if __name__ == "__main__":
    unittest.main()
