"""The installed package (`pip install .` or a wheel), as scripts/run-tests.sh's `python` stage
tests it: pytest run from outside the source tree, with STREAMPOOL_EXPECT_INSTALLED=1 and neither
STREAMPOOL_LIBRARY nor PYTHONPATH set. Skipped elsewhere (ctest and by-hand runs test python/).

Checks that `import streampool` is the installed package, not python/ of this tree; that the
library it loaded is the one file installed inside the package folder, found with no environment
variable; that py.typed (PEP 561) is shipped; and that the distribution's version is the
library's (both come from CMakeLists.txt's project()).
"""

import glob
import importlib.metadata
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INSTALLED = os.environ.get("STREAMPOOL_EXPECT_INSTALLED") == "1"


def real(path):
    return os.path.realpath(path)


def is_inside(path, folder):
    return os.path.commonpath([real(path), real(folder)]) == real(folder)


@unittest.skipUnless(INSTALLED, "tests the installed package: set STREAMPOOL_EXPECT_INSTALLED=1")
class InstalledPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import streampool

        cls.sp = streampool
        cls.package_dir = os.path.dirname(real(streampool.__file__))

    def test_no_environment_variable_points_at_the_tree(self):
        self.assertNotIn("STREAMPOOL_LIBRARY", os.environ)
        self.assertNotIn("PYTHONPATH", os.environ)

    def test_the_package_is_not_the_source_tree(self):
        source_package = os.path.join(ROOT, "python")
        self.assertFalse(is_inside(self.sp.__file__, source_package),
                         f"streampool was imported from {self.sp.__file__}, in {source_package}")

    def test_the_library_lies_in_the_package_folder(self):
        loaded = self.sp._capi.lib._name
        self.assertEqual(os.path.dirname(real(loaded)), self.package_dir, loaded)
        # One file each, no links: a wheel keeps none (CMakeLists.txt, SKBUILD). The memory
        # picture's library lies beside the allocator's, and is the one the package loads.
        files = sorted(os.path.basename(p)
                       for p in glob.glob(os.path.join(self.package_dir, "libstreampool*")))
        self.assertEqual(files, ["libstreampool.so", "libstreampool_report.so"])
        self.assertFalse(os.path.islink(loaded), loaded)
        report = self.sp._capi.report_lib()._name
        self.assertEqual(os.path.dirname(real(report)), self.package_dir, report)

    def test_the_native_torch_allocators_sources_are_shipped(self):
        # python/streampool/_torch_native.py builds them on first use: every source and header of
        # src/torch/, with streampool.h and the header it includes beside it.
        from streampool import _torch_native

        folder = os.path.join(self.package_dir, "_torch_native")
        names = [os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "src", "torch", "*.?pp"))]
        self.assertIn(_torch_native._MAIN, names)
        for name in names + ["streampool.h", os.path.join("streampool", "limits.h")]:
            self.assertTrue(os.path.isfile(os.path.join(folder, name)), f"no {name} in {folder}")
        self.assertEqual(_torch_native._source_dirs(), (folder, folder))

    def test_py_typed_is_shipped(self):
        self.assertTrue(os.path.isfile(os.path.join(self.package_dir, "py.typed")),
                        f"no py.typed in {self.package_dir}")

    def test_the_distribution_version_is_the_library_version(self):
        library = ".".join(map(str, self.sp.version()))
        self.assertEqual(importlib.metadata.version("streampool"), library)

    def test_an_allocation_on_the_host_device(self):
        device = self.sp.Device.host()
        a = self.sp.Array(4, "f", device=device)
        a.fill(1.0)
        self.assertEqual(a.tolist(), [1.0] * 4)


if __name__ == "__main__":
    unittest.main()
