"""Checks of the checked-in graph fixtures; pure Python (runs without torch)."""
import json
import os
import unittest

from _paths import FIXTURES  # noqa: F401  (sets sys.path)
from autoshard.tracer.opnames import op_counts
from autoshard.tracer.validate import validate_graph

FIXTURE_FILES = ["llama2l.graph.json", "resnet18_b2.graph.json", "vit_tiny.graph.json"]
MAX_BYTES = 1_500_000


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


class FixtureTest(unittest.TestCase):
    def test_fixtures_are_valid_and_small(self):
        for name in FIXTURE_FILES:
            with self.subTest(name=name):
                self.assertLess(os.path.getsize(os.path.join(FIXTURES, name)), MAX_BYTES)
                self.assertEqual(validate_graph(load(name)), [])

    def test_every_parameter_has_a_gradient(self):
        for name in FIXTURE_FILES:
            g = load(name)
            params = {n["name"] for n in g["nodes"] if n["kind"] == "parameter"}
            self.assertEqual({p["param"] for p in g["grad_pairs"]}, params, name)
            self.assertIsNotNone(g["loss"])

    def test_forward_then_backward(self):
        for name in FIXTURE_FILES:
            phases = [n["phase"] for n in load(name)["nodes"] if n["kind"] == "op"]
            first_bwd = phases.index("backward")
            self.assertNotIn("backward", phases[:first_bwd])
            self.assertNotIn("forward", phases[first_bwd:], name)

    def test_no_getitem_nodes(self):
        for name in FIXTURE_FILES:
            self.assertFalse([n for n in load(name)["nodes"] if n.get("op") == "getitem"])

    def test_llama_fixture_shape(self):
        g = load("llama2l.graph.json")
        byname = {n["name"]: n for n in g["nodes"]}
        wq = byname["layers.0.attention.wq.weight"]
        self.assertEqual(wq["outputs"], [{"shape": [256, 256], "dtype": "bf16"}])
        self.assertEqual(wq["module"], "layers.0.attention.wq")
        self.assertEqual(byname["layers.1.attention.wk.weight"]["outputs"][0]["shape"], [128, 256])
        self.assertEqual(byname["tokens"]["outputs"], [{"shape": [2, 64], "dtype": "i64"}])
        self.assertEqual(byname["rope_cos"]["kind"], "buffer")
        self.assertEqual(len([n for n in g["nodes"] if n["kind"] == "parameter"]), 21)
        mms = [n for n in g["nodes"] if n.get("op") == "mm"]
        fwd = [n for n in mms if n["phase"] == "forward"]
        self.assertEqual(len(fwd), 15)  # 7 per layer + output projection
        self.assertEqual(len(mms) - len(fwd), 30)  # two per forward mm

    def test_op_names_list_is_current(self):
        counts, _ = op_counts([os.path.join(FIXTURES, f) for f in FIXTURE_FILES])
        with open(os.path.join(FIXTURES, "op_names.txt"), encoding="utf-8") as f:
            listed = [line.split("\t")[0] for line in f if line.strip() and line[0] != "#"]
        self.assertEqual(listed, sorted(counts))


if __name__ == "__main__":
    unittest.main()
