"""Pool.snapshot() (docs/memory-picture.md): its JSON validates against the versioned schema
docs/snapshot.schema.json, says where each block is, and a snapshot the schema refuses is refused
(so the validation can fail). jsonschema comes from Debian (python3-jsonschema) or PyPI; without
it these tests skip, except in CI (CI=true), where a skip would hide a schema that no longer
matches."""

import json
import os
import unittest

import streampool as sp

try:
    import jsonschema
except ImportError:
    jsonschema = None

SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "snapshot.schema.json")
MiB = 1 << 20


def validator():
    if jsonschema is None:
        if os.environ.get("CI") == "true":
            raise AssertionError("jsonschema is missing, and CI must validate snapshots")
        raise unittest.SkipTest("jsonschema is not installed")
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


class Snapshot(unittest.TestCase):

    def setUp(self):
        self.device = sp.Device.host()
        self.pool = sp.Pool(self.device)
        self.s1, self.s2 = sp.Stream(self.device), sp.Stream(self.device)
        self.held = [self.pool.allocate(n, s) for n, s in
                     [(300, self.s1), (5000, self.s2), (3 * MiB, self.s1), (9 * MiB, self.s2)]]
        cached = self.pool.allocate(300, self.s1)
        self.pool.deallocate(cached, self.s1)  # to s1's stream cache
        self.cached = cached

    def tearDown(self):
        for p, s in zip(self.held, [self.s1, self.s2, self.s1, self.s2]):
            self.pool.deallocate(p, s)

    def block_at(self, snap, address):
        for r in snap["ranges"]:
            if r["base"] <= address < r["base"] + r["bytes"]:
                for b in r["blocks"]:
                    if r["base"] + b["offset"] <= address < r["base"] + b["offset"] + b["size"]:
                        return r, b
        self.fail(f"{address:#x} is in no range of the snapshot")

    def test_validates_against_the_schema(self):
        v = validator()
        snap = self.pool.snapshot()
        v.validate(snap)
        self.assertEqual(snap["schema_version"], 1)
        self.assertEqual(snap["summary"]["live_bytes"], self.pool.statistics()["live_bytes"])

    def test_the_schema_refuses_what_it_should(self):
        v = validator()
        snap = self.pool.snapshot()
        bad = json.loads(json.dumps(snap))
        bad["ranges"][0]["blocks"][0]["status"] = "lively"
        with self.assertRaises(jsonschema.ValidationError):
            v.validate(bad)
        bad = json.loads(json.dumps(snap))
        del bad["summary"]["largest_free_block"]
        with self.assertRaises(jsonschema.ValidationError):
            v.validate(bad)
        bad = json.loads(json.dumps(snap))
        bad["schema_version"] = 2
        with self.assertRaises(jsonschema.ValidationError):
            v.validate(bad)

    def test_says_where_blocks_are(self):
        snap = self.pool.snapshot()
        r, b = self.block_at(snap, self.held[0])
        self.assertEqual((r["kind"], b["status"]), ("slab", "live"))
        r, cached = self.block_at(snap, self.cached)
        self.assertEqual((cached["status"], cached["place"]), ("free", "stream_cache"))
        s1 = cached["stream"]  # the chunk was freed on s1: its cache's timeline
        self.assertIn(s1, [c["timeline"] for c in snap["caches"]])
        r, b = self.block_at(snap, self.held[3])  # 9 MiB on s2
        self.assertEqual((r["kind"], b["status"], b["offset"] + r["base"]),
                         ("virtual_range", "live", self.held[3]))
        self.assertNotIn(b["stream"], (0, s1))
        r, b = self.block_at(snap, self.held[2])  # 3 MiB on s1
        self.assertEqual(b["stream"], s1)
        # Every range's blocks tile it.
        for r in snap["ranges"]:
            self.assertEqual(sum(b["size"] for b in r["blocks"]), r["bytes"])

    def test_a_closed_pool_refuses(self):
        p = sp.Pool(self.device)
        p.close()
        with self.assertRaises(sp.InvalidArgument):
            p.snapshot()


if __name__ == "__main__":
    unittest.main()
