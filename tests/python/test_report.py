"""streampool.report (docs/memory-picture.md): a snapshot's page from Python and from the command
line, self-contained (no script, nothing fetched), and clear errors for what is not a snapshot.
That the page's charts really draw is checked in a browser by tests/report (headless Chromium)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import streampool as sp
import streampool.report

MiB = 1 << 20


class Report(unittest.TestCase):

    def setUp(self):
        self.device = sp.Device.host()
        self.pool = sp.Pool(self.device)
        self.stream = sp.Stream(self.device)
        self.held = [self.pool.allocate(n, self.stream) for n in (700, 3 * MiB, 20 * MiB)]

    def tearDown(self):
        for p in self.held:
            self.pool.deallocate(p, self.stream)

    def check_page(self, page):
        self.assertTrue(page.lstrip().lower().startswith("<!doctype html"))
        self.assertIn("<svg", page)
        self.assertIn('id="block-map"', page)
        self.assertIn('id="fragmentation"', page)
        self.assertNotIn("<script", page.lower())
        for scheme in ("http://", "https://"):
            rest = page.replace("http://www.w3.org/2000/svg", "")
            self.assertNotIn(scheme, rest, "the page must not fetch anything")

    def test_from_a_dict_and_from_text(self):
        snap = self.pool.snapshot()
        self.check_page(streampool.report.html(snap, title="a <test> & more"))
        page = streampool.report.html(self.pool.snapshot_json())
        self.check_page(page)
        self.assertNotIn("<test>", streampool.report.html(snap, title="a <test>"))

    def test_the_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snap.json")
            out = os.path.join(tmp, "snap.html")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.pool.snapshot(), f)
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            r = subprocess.run([sys.executable, "-m", "streampool.report", path, "-o", out],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out, encoding="utf-8") as f:
                self.check_page(f.read())
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"schema": "streampool.snapshot", "schema_version": ')
            r = subprocess.run([sys.executable, "-m", "streampool.report", path, "-o", out],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1)
            self.assertIn("at byte", r.stderr)

    def test_text_beyond_ascii(self):
        snap = self.pool.snapshot()
        snap["backend"] = "host \U0001F600"
        self.assertIn("host \U0001F600", streampool.report.html(snap))
        text = self.pool.snapshot_json().replace('"backend":"', '"backend":"\\ud83d\\ude00 ')
        self.assertIn("\U0001F600 ", streampool.report.html(text))

    def test_what_is_not_a_snapshot(self):
        with self.assertRaises(sp.InvalidArgument) as e:
            streampool.report.html('{"schema": "something else"}')
        self.assertIn("streampool.snapshot", str(e.exception))
        with self.assertRaises(TypeError):
            streampool.report.html(42)


if __name__ == "__main__":
    unittest.main()
