"""The allocation log from Python (docs/python.md, "Recording a live program"):
Pool.start_recording / stop_recording / record_phase and the Pool.recording(path) context manager
write the trace format of tools/replay (bench/traces/README.md)."""

import gc
import os
import pathlib
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The package in python/, unless the installed one is under test (scripts/run-tests.sh, stage
# python; tests/python/test_install.py).
if os.environ.get("STREAMPOOL_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import streampool as sp  # noqa: E402


def read_trace(path):
    """(comment lines without '# ', events as (action, id, size, stream) tuples)."""
    comments, events = [], []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                comments.append(line[2:])
            else:
                action, *numbers = line.split()
                events.append((action, *map(int, numbers)))
    return comments, events


class Recording(unittest.TestCase):
    def setUp(self):
        self.device = sp.Device.host(checking=True)
        self.pool = sp.Pool(self.device)
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "trace.txt")

    def tearDown(self):
        gc.collect()
        self.assertEqual(self.device.violations(), [])
        self.dir.cleanup()

    def test_the_context_manager_records_raw_blocks_arrays_and_phases(self):
        a, b = sp.Stream(self.device), sp.Stream(self.device)
        before = self.pool.allocate(5000, stream=a)  # before the start: never written
        with self.pool.recording(self.path) as rec:
            self.assertIsNone(rec.events)
            self.pool.record_phase("step 0 begin")
            x = self.pool.allocate(1000, stream=a)      # alloc 0 1000 0
            y = self.pool.allocate(300 << 10, stream=b)  # alloc 1 307200 1 (a large block)
            self.pool.deallocate(x, stream=a)           # free_completed 0 1000 0
            arr = sp.Array(10, "d", pool=self.pool, stream=b)  # alloc 0 80 1: id 0 again
            self.pool.record_phase("step 1 begin")
            arr.free()                                  # free_completed 0 80 1
            self.pool.deallocate(y)                     # free_completed 1 307200 1: its stream
            self.pool.deallocate(before, stream=a)      # not written
        self.assertEqual(rec.events, 6)
        self.assertEqual(self.pool.stop_recording(), 0)  # the with block stopped it
        comments, events = read_trace(self.path)
        self.assertEqual(events, [("alloc", 0, 1000, 0), ("alloc", 1, 307200, 1),
                                  ("free_completed", 0, 1000, 0), ("alloc", 0, 80, 1),
                                  ("free_completed", 0, 80, 1),
                                  ("free_completed", 1, 307200, 1)])
        self.assertTrue(comments[0].startswith("streampool allocation trace: pool "), comments)
        self.assertIn("step 0 begin", comments)
        self.assertIn("step 1 begin", comments)
        a.close()
        b.close()

    def test_the_recording_stops_when_the_block_raises(self):
        with self.assertRaises(KeyError):
            with self.pool.recording(pathlib.Path(self.path)) as rec:
                self.pool.deallocate(self.pool.allocate(64))
                raise KeyError("inside")
        self.assertEqual(rec.events, 2)
        self.assertEqual(len(read_trace(self.path)[1]), 2)

    def test_start_stop_and_a_phase_without_a_recording(self):
        self.pool.record_phase("nothing records")  # no file, no error
        self.assertEqual(self.pool.stop_recording(), 0)
        self.pool.start_recording(self.path)
        p = self.pool.allocate(10)
        self.assertEqual(self.pool.stop_recording(), 1)
        self.pool.deallocate(p)  # after the stop: not written
        self.assertEqual(read_trace(self.path)[1], [("alloc", 0, 10, 0)])

    def test_bad_paths_and_names_raise_and_change_nothing(self):
        bad = os.path.join(self.dir.name, "no-such-dir", "trace.txt")
        self.pool.start_recording(self.path)
        with self.assertRaises(sp.InvalidArgument) as cm:
            self.pool.start_recording(bad)
        self.assertIn(bad, str(cm.exception))
        self.assertIn("No such file or directory", str(cm.exception))
        with self.assertRaises(sp.InvalidArgument):
            self.pool.start_recording("")
        with self.assertRaises(sp.InvalidArgument):
            self.pool.start_recording("a\0b")
        with self.assertRaises(sp.InvalidType):
            self.pool.start_recording(3)
        with self.assertRaises(sp.InvalidType):
            self.pool.recording(None)
        with self.assertRaises(sp.InvalidType):
            self.pool.record_phase(b"bytes")
        with self.assertRaises(sp.InvalidArgument):
            self.pool.record_phase("a\0b")
        # The recording in progress went on through all of it.
        self.pool.deallocate(self.pool.allocate(64))
        self.assertEqual(self.pool.stop_recording(), 2)

    def test_a_closed_pool_raises(self):
        self.pool.close()
        for call in (lambda: self.pool.start_recording(self.path), self.pool.stop_recording,
                     lambda: self.pool.record_phase("x")):
            with self.assertRaises(sp.InvalidArgument):
                call()


if __name__ == "__main__":
    unittest.main()
