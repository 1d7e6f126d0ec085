"""autoshard.replay: a lowered step priced on the simulator's streams, on hand-made graphs
(exact times) and on a planned LLaMA lowered with the fake process group (replay vs plan)."""
import json
import os
import tempfile
import unittest
from types import SimpleNamespace

import _paths

try:
    import torch
    import torch.fx
    import torch.distributed  # noqa: F401  (registers _c10d_functional)
except ImportError:  # pragma: no cover
    torch = None


def _stamped(g, target, args, node, edge=None):
    n = g.call_function(target, args)
    n.meta["autoshard"] = {"node": node, **({"edge": edge} if edge else {})}
    return n


def _graph(wait_early: bool):
    """x -> all_gather (edge b:1) ... a(x) ... wait -> b(a, gathered)."""
    aten, ops = torch.ops.aten, torch.ops._c10d_functional
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4, 4)
    ag = _stamped(g, ops.all_gather_into_tensor.default, (x, 2, "g0"), "b", "b:1")
    ag.meta["val"] = torch.empty(8, 4)
    if wait_early:
        w = _stamped(g, ops.wait_tensor.default, (ag,), "b", "b:1")
        a = _stamped(g, aten.relu.default, (x,), "a", "a:op")
    else:
        a = _stamped(g, aten.relu.default, (x,), "a", "a:op")
        w = _stamped(g, ops.wait_tensor.default, (ag,), "b", "b:1")
    b = _stamped(g, aten.add.Tensor, (a, w), "b", "b:op")
    g.output(b)
    return g


MESH = SimpleNamespace(ndim=1, get_group=lambda d: SimpleNamespace(group_name="g0"))


@unittest.skipIf(torch is None, "PyTorch not installed")
class Streams(unittest.TestCase):
    def setUp(self):
        from autoshard.replay import Simulation

        self.sim = Simulation(step_us=0, comm_model="nccl", mesh_shape=[2], mesh_dims=["dp"],
                              hardware="h100",
                              compute_us={("a", "forward"): [10.0], ("b", "forward"): [5.0]})
        self.priced = []

        def price(kind, nbytes, dim):
            self.priced.append((kind, nbytes, dim))
            return 7.0
        self.price = price

    def test_a_collective_waited_after_compute_overlaps_it(self):
        from autoshard.replay import replay_step

        r = replay_step([_graph(wait_early=False)], MESH, self.sim, self.price)
        self.assertEqual(r.step_us, 15.0)          # max(10, 7) + 5
        self.assertEqual((r.compute_us, r.comm_us, r.hidden), (15.0, 7.0, 1))
        self.assertEqual(self.priced, [("all_gather", 8 * 4 * 4.0, 0)])  # the gathered bytes

    def test_a_wait_before_the_compute_exposes_the_collective(self):
        from autoshard.replay import replay_step

        r = replay_step([_graph(wait_early=True)], MESH, self.sim, self.price)
        self.assertEqual(r.step_us, 22.0)          # 7, then 10 + 5
        self.assertEqual((r.exposed_comm_us, r.hidden), (7.0, 0))
        self.assertEqual([e[:3] for e in r.events], [("b:1", "all_gather", 0)])

    def test_a_trace_without_the_plans_figures_is_refused(self):
        from autoshard.replay import read_simulation

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"traceEvents": [], "otherData": {"step_us": 1.0}}, f)
        try:
            with self.assertRaisesRegex(ValueError, "otherData has no mesh_shape"):
                read_simulation(f.name)
        finally:
            os.unlink(f.name)


REPLAY_SCRIPT = r"""
import json, os, subprocess, sys, tempfile
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from autoshard.apply import apply_placement, trace_for_apply
from autoshard.replay import read_simulation, replay_step
from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss
from autoshard.tracer.export import to_graph_dict

shape, names, algo = json.loads(sys.argv[1])
world = 1
for s in shape:
    world *= s
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=tuple(names))
cfg = LlamaConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=512, vocab_size=1024,
                  max_seq_len=256)
with torch.device("meta"):
    model = Transformer(cfg)
tokens = torch.zeros(4, 256, dtype=torch.long, device="meta")
traced = trace_for_apply(model, (tokens,), cross_entropy_loss, (tokens,))
out = tempfile.mkdtemp(prefix="replay-test-")
json.dump(to_graph_dict(traced), open(f"{out}/g.json", "w"))
subprocess.run([os.environ["AUTOSHARD_BIN"], "plan", "--graph", f"{out}/g.json", "--mesh",
                "x".join(map(str, shape)), "--mesh-dims", ",".join(names), "-o", f"{out}/p",
                *(["--algo", algo] if algo else [])], check=True, capture_output=True)
doc = json.load(open(f"{out}/p/placements.json"))
sim = read_simulation(f"{out}/p/trace.json")
result = {"sim": sim.step_us}
sched = doc["schedule"]
uses = sched["prefetch"] + sched["issue"]
result["wait_points"] = [sum(e["wait_before"] == e["edge"].rsplit(":", 1)[0] for e in uses),
                         len(uses), sum(e["wait_before"] is None for e in sched["reduce"]),
                         len(sched["reduce"])]
variants = [("schedule", doc), ("none", {k: v for k, v in doc.items() if k != "schedule"})]
if algo == "fsdp":
    # every prefetched gather waited where it is issued (its wait point moved in the file)
    moved = json.loads(json.dumps(doc))
    for e in moved["schedule"]["prefetch"]:
        if e["issue_before"] is not None:
            e["wait_before"] = e["issue_before"]
    variants.append(("moved", moved))
for label, d in variants:
    step = apply_placement(model, d, mesh, traced=traced)
    r = replay_step([step.split.forward.graph, step.split.backward.graph], mesh, sim)
    result[label] = r.step_us
    result[label + "_waited"] = step.split.waited
print(json.dumps(result))
"""


@unittest.skipIf(torch is None, "PyTorch not installed")
class ReplayOnAPlan(unittest.TestCase):
    """A tiny LLaMA planned, lowered for rank 0 on the fake process group and replayed: the
    runtime's own order and collectives give the plan's simulated step within 3 %; without
    the plan's schedule (an older file: every collective at its use) they do not."""

    def _replay(self, shape, names, algo):
        return _paths.run_planned_script(self, REPLAY_SCRIPT, json.dumps([shape, names, algo]))

    def test_fsdp_on_two_ranks(self):
        res = self._replay([2], ["dp"], "fsdp")
        self.assertLess(abs(res["schedule"] / res["sim"] - 1), 0.03, res)
        self.assertGreater(res["none"], res["schedule"] * 1.01, res)
        # The file's wait points moved to the issue points: the lowered graphs wait there,
        # so the gathers no longer overlap the layer before (the replay sees them exposed).
        self.assertGreater(res["moved_waited"], 0, res)
        # as written: every use waited before its consumer, every reduction at the step's end
        uses_at_consumer, uses, reductions_at_end, reductions = res["wait_points"]
        self.assertEqual((uses_at_consumer, reductions_at_end), (uses, reductions), res)
        self.assertGreater(reductions, 0, res)
        self.assertGreater(res["moved"], res["schedule"] * 1.01, res)

    def test_the_default_plan_on_2x2(self):
        res = self._replay([2, 2], ["dp", "tp"], None)
        self.assertLess(abs(res["schedule"] / res["sim"] - 1), 0.03, res)
        self.assertGreaterEqual(res["none"], res["schedule"], res)


if __name__ == "__main__":
    unittest.main()
