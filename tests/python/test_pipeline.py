"""apply_pipeline numerics on CPU with gloo: a 4-layer LLaMA on 2 pipeline stages x 2 (dp).

4 processes, mesh [2, 2] dims ["pp", "dp"].  The plan: `autoshard plan --mesh 2x2 --mesh-dims
pp,dp --microbatches 4 --schedule S` of ONE microbatch's graph (stages and each stage's
sharding on dp chosen by the planner), run with torch.distributed.pipelining's Schedule1F1B
(2 stages) and, in one launch of the 4 processes, ScheduleInterleaved1F1B and the zero-bubble
ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble and ScheduleDualPipeV (4 stages, 2 per pp
rank; the last three run each stage's backward as B and W, the V puts stage 3 back on pp
rank 0).
Each rank compares with one process running the full batch: the loss (mean of the microbatch
losses, last stage), every gradient of its stage's parameters after the first step, and the
parameters after three AdamW steps, within 1e-5 relative.  For 1F1B and
InterleavedZeroBubble the ranks also count the collectives a step runs, at M and M / 2
microbatches: the gradient reductions run once per step, as planned, not once per microbatch.
"""
import functools
import operator
import shutil
import tempfile
import unittest

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

try:
    import torch
    import _apply_worker as W
    import _dtensor_ref
    import _pipeline_worker as P
except ImportError:  # pragma: no cover
    torch = None

TOL = 1e-5
TIMEOUT_S = 240
#: schedules whose runs also count the collectives of a step (one plain, one zero bubble)
COUNTED = ("1F1B", "InterleavedZeroBubble")


@unittest.skipIf(torch is None, "PyTorch not installed")
class PipelinePlanFormat(unittest.TestCase):
    def test_bad_sections_are_refused(self):
        from autoshard.apply import PlanError
        from autoshard.pipeline import read_pipeline, stage_placements

        good = {"mesh_dim": "pp", "schedule": "1F1B", "microbatches": 2,
                "stages": [{"index": 0, "pp_rank": 0}, {"index": 1, "pp_rank": 1}]}
        self.assertEqual(read_pipeline({"pipeline": good}).schedule, "1F1B")
        with self.assertRaisesRegex(PlanError, "p.json: /pipeline/schedule: 'Fast'"):
            read_pipeline({"pipeline": {**good, "schedule": "Fast"}}, "p.json: ")
        with self.assertRaisesRegex(PlanError, "/pipeline/microbatches"):
            read_pipeline({"pipeline": {**good, "microbatches": 0}})
        with self.assertRaisesRegex(PlanError, "/pipeline: missing"):
            read_pipeline({})
        doc = {"mesh_shape": [2, 2], "mesh_dim_names": ["pp", "dp"],
               "placements": {"mm": {"output": "RS(0)", "inputs": ["RS(0)", "RR"]},
                              "sdpa": {"output": "(RS(0), RR)", "inputs": []}}}
        sub = stage_placements(doc, 0)
        self.assertEqual(sub["mesh_shape"], [2])
        self.assertEqual(sub["placements"]["mm"], {"output": "S(0)", "inputs": ["S(0)", "R"]})
        self.assertEqual(sub["placements"]["sdpa"]["output"], "(S(0), R)")
        import autoshard
        from autoshard.pipeline import apply_pipeline

        self.assertIs(autoshard.apply_pipeline, apply_pipeline)
        doc["placements"]["mm"]["output"] = "S(0)R"
        with self.assertRaisesRegex(PlanError, "/placements/mm: .* not Replicate on the pp"):
            stage_placements(doc, 0)


@unittest.skipIf(torch is None, "PyTorch not installed")
class BackwardSplit(unittest.TestCase):
    def test_weight_gradients_run_apart_with_the_same_numbers(self):
        import torch.fx

        from autoshard.backward_split import split_backward

        def bwd(x, w, gy):  # a linear's backward: (grad of w, grad of x)
            h = gy * 2.0                   # B: the input gradient needs it; W reads it too
            gx = torch.mm(h, w.t())        # B
            gw = torch.mm(x.t(), h)        # W
            return (gw + 1.0, gx)

        gm = torch.fx.symbolic_trace(bwd)
        parts = split_backward(gm, 1, {})  # no stamps: every node by the rule
        calls = lambda g: [n.target for n in g.graph.nodes if n.op == "call_function"]
        self.assertEqual(calls(parts.input).count(torch.mm), 1)
        self.assertEqual(calls(parts.weight).count(torch.mm), 1)  # (t() is a method call)
        self.assertEqual((parts.n_input_grads, parts.n_handoff, parts.weight_nodes), (1, 1, 2))
        g = torch.Generator().manual_seed(0)
        x, w, gy = (torch.randn(4, 3, generator=g), torch.randn(3, 5, generator=g),
                    torch.randn(4, 5, generator=g))
        gx, handoff = parts.run_input(x, w, gy)
        self.assertEqual(parts.weight_inputs, [0])  # W reads x (and B's h), not w nor gy
        (gw,) = parts.run_weight(*parts.weight_args((x, w, gy)), *handoff)
        want_gw, want_gx = bwd(x, w, gy)
        self.assertTrue(torch.equal(gx[0], want_gx) and torch.equal(gw, want_gw))
        # No input gradient (the first stage): everything is W, nothing handed over.
        first = split_backward(torch.fx.symbolic_trace(lambda x, gy: (torch.mm(x.t(), gy),)),
                               1, {})
        self.assertEqual((first.n_input_grads, first.n_handoff, first.weight_nodes), (0, 0, 1))

    def test_each_node_runs_in_the_part_the_plan_gives_its_planned_node(self):
        import torch.fx

        from autoshard.backward_split import BackwardSplitError, split_backward
        from autoshard.lower import META_KEY

        def bwd(x, w, gy):
            h = torch.mul(gy, 2.0)              # planned node "h": read by B and W
            gx = torch.mm(h, torch.t(w))        # "gx" ("wt": no part in the plan)
            s = torch.sum(gy, 0)                # "s": only W reads it (a bias gradient's sum)
            gw = torch.add(torch.mm(torch.t(x), h), s)  # "gw", "gw_add" ("xt": no part)
            return (gw, gx)

        def stamped():
            gm = torch.fx.symbolic_trace(bwd)
            names = iter(["h", "wt", "gx", "s", "xt", "gw", "gw_add"])
            for n in gm.graph.nodes:
                if n.op == "call_function":
                    n.meta[META_KEY] = {"node": next(names)}
            return gm

        g = torch.Generator().manual_seed(0)
        x, w, gy = (torch.randn(4, 3, generator=g), torch.randn(3, 5, generator=g),
                    torch.randn(4, 5, generator=g))
        want_gw, want_gx = bwd(x, w, gy)
        # The plan puts "s" in B (the rule alone would put it in W): B computes it and hands
        # it to W; the numbers are the same.
        plan = {"h": "input_grad", "gx": "input_grad", "s": "input_grad",
                "gw": "weight_grad", "gw_add": "weight_grad"}
        parts = split_backward(stamped(), 1, plan)
        b_ops = [n.meta[META_KEY]["node"] for n in parts.input.graph.nodes
                 if n.op == "call_function"]
        self.assertIn("s", b_ops)
        self.assertNotIn("gw", b_ops)
        gx, handoff = parts.run_input(x, w, gy)
        (gw,) = parts.run_weight(*parts.weight_args((x, w, gy)), *handoff)
        self.assertTrue(torch.allclose(gx[0], want_gx) and torch.allclose(gw, want_gw))
        self.assertEqual((parts.planned, parts.unplanned), (5, 2))  # wt (B), xt (W): the rule
        # Without a part for "s", the rule places it: nothing in B reads it, so W.
        ruled = split_backward(stamped(), 1, {k: v for k, v in plan.items() if k != "s"})
        self.assertNotIn("s", [n.meta[META_KEY]["node"] for n in ruled.input.graph.nodes
                               if n.op == "call_function"])
        self.assertEqual((ruled.planned, ruled.unplanned), (4, 3))
        # A node the input gradient reads, planned in W, cannot run after B: refused by name.
        with self.assertRaisesRegex(BackwardSplitError, r"\(planned h\) is planned in the "
                                    r"weight gradients, but node .* \(planned gx\) of the "
                                    r"input gradients reads it"):
            split_backward(stamped(), 1, {**plan, "h": "weight_grad"})
        with self.assertRaisesRegex(BackwardSplitError, "part 'backward'"):
            split_backward(stamped(), 1, {**plan, "gx": "backward"})


@unittest.skipIf(torch is None, "PyTorch not installed")
class DeferredReductions(unittest.TestCase):
    def test_reductions_are_cut_out_of_the_backward(self):
        import torch.fx

        from autoshard.deferred_grads import defer_reductions
        from autoshard.lower import META_KEY

        aten, c10d = torch.ops.aten, torch.ops._c10d_functional
        g = torch.fx.Graph()

        def op(target, *args, shape=None, edge=None):
            n = g.call_function(target, args)
            if shape is not None:
                n.meta["val"] = torch.empty(shape)
            if edge is not None:
                n.meta[META_KEY] = {"edge": edge}
            return n

        def reduce(x, kind="all_reduce", *extra):
            return op(c10d.wait_tensor.default, op(getattr(c10d, kind).default, x, *extra))

        x, w, gy = (g.placeholder(n) for n in ("x", "w", "gy"))
        # p0: Partial -> Replicate, then a scaling: cut at the matmul (its transpose moves)
        mm0 = op(aten.mm.default, x, gy, shape=(3, 4))
        t0 = op(aten.t.default, mm0, shape=(4, 3))
        g0 = op(aten.div.Tensor, reduce(t0, "all_reduce", "sum", "0"), 2)
        # p1: Partial over two dims (one after the other), then a scatter along dim 1
        m1 = op(aten.mm.default, gy, w, shape=(4, 8))
        r1 = reduce(reduce(m1, "all_reduce", "sum", "0"), "all_reduce", "avg", "1")
        s1 = op(aten.split.Tensor, r1, 4, 1)
        c1 = op(aten.cat.default, [op(operator.getitem, s1, 0), op(operator.getitem, s1, 1)])
        g1 = reduce(c1, "reduce_scatter_tensor", "sum", 2, "0")
        # p2: a cast after the reduction is not linear: kept, per microbatch
        g2 = op(aten._to_copy.default, reduce(op(aten.mm.default, x, w), "all_reduce", "sum",
                                              "0"))
        # p3: its reduction is read by the input gradient too: stays (stamped: reported)
        r3 = op(c10d.wait_tensor.default,
                op(c10d.all_reduce.default, op(aten.mm.default, w, gy), "sum", "0",
                   edge="grad:p3:-1"))
        gx = op(aten.add.Tensor, op(aten.mm.default, gy, w), r3)
        # p4: a gather of an activation-sized value before a sum: that stays per microbatch
        a4 = op(aten.mul.Tensor, x, gy, shape=(16, 4))
        v4 = op(aten.sum.dim_IntList, reduce(a4, "all_gather_into_tensor", 2, "0"), [0],
                shape=(4,))
        g4 = reduce(v4, "all_gather_into_tensor", 2, "0")
        # p5: an uneven Shard: padded to the group's multiple, scattered; x is the unpadded
        m5 = op(aten.mm.default, x, w, shape=(10, 4))
        pad5 = op(aten.constant_pad_nd.default, m5, [0, 0, 0, 2], shape=(12, 4))
        g5 = reduce(pad5, "reduce_scatter_tensor", "sum", 4, "0")
        g.output((g0, g1, g2, r3, g4, g5, gx))
        bwd = torch.fx.GraphModule(torch.nn.Module(), g)
        d = defer_reductions(bwd, 6, [12, 64, 12, 12, 8, 40])

        self.assertEqual(sorted(d.reductions), [0, 1, 4, 5])
        self.assertEqual(list(d.kept), [2])
        self.assertIn("not linear", d.kept[2])
        self.assertEqual(d.left, ["p3"])
        self.assertEqual(d.collectives, 1 + 3 + 1 + 1)
        outs = next(n for n in d.backward.graph.nodes if n.op == "output").args[0]
        self.assertEqual([outs[k].name for k in (0, 1, 4, 5)],
                         [mm0.name, m1.name, v4.name, m5.name])
        code = d.backward.code
        self.assertEqual(code.count("_c10d_functional.all_reduce"), 2)  # p2, p3
        self.assertEqual(code.count("all_gather_into_tensor.default"), 1)  # p4's first
        self.assertNotIn("reduce_scatter", code)
        self.assertIs(d.lowered, bwd)
        self.assertEqual(bwd.code.count("_c10d_functional.all_reduce"), 5)  # left as it was
        # one step graph: every first collective issued before the first wait
        step = [n for n in d.step.graph.nodes if n.op == "call_function"]
        names = [n.target._overloadpacket.__name__ if hasattr(n.target, "_overloadpacket")
                 else "getitem" for n in step]
        first_wait = names.index("wait_tensor")
        self.assertEqual(names[:first_wait], ["t", "all_reduce", "all_reduce",
                                              "all_gather_into_tensor", "constant_pad_nd",
                                              "reduce_scatter_tensor"])
        self.assertEqual(len([n for n in d.step.graph.nodes if n.op == "placeholder"]), 4)


@unittest.skipIf(torch is None, "PyTorch not installed")
class ApplyPipeline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = _dtensor_ref.autoshard_binary()
        if cls.binary is None:
            raise unittest.SkipTest("autoshard binary not built (set AUTOSHARD_BIN)")

    def check(self, schedules: list, stages_per_rank: int):
        """Plans the step for each schedule, runs them all in one launch of the 4 ranks."""
        traced, graph = P.trace_microbatch()
        tmp = tempfile.mkdtemp(prefix="autoshard-pipeline-")
        docs = []
        try:
            for schedule in schedules:
                extra = ["--microbatches", str(P.MICROBATCHES), "--schedule", schedule,
                         "--stages-per-rank", str(stages_per_rank)]
                sub = tempfile.mkdtemp(dir=tmp)
                doc = W.plan(self.binary, graph, [2, 2], ["pp", "dp"], [], sub, extra)
                pipe = doc["pipeline"]
                self.assertEqual((pipe["schedule"], pipe["microbatches"], len(pipe["stages"])),
                                 (schedule, P.MICROBATCHES, 2 * stages_per_rank))
                self.assertTrue(any("S(" in e["output"] for e in doc["placements"].values()))
                docs.append(doc)
            count = [s in COUNTED for s in schedules]
            per_rank = W.launch(4, [2, 2], ["pp", "dp"],
                                functools.partial(P.run_pipelines, plans=docs, count=count),
                                tmp, TIMEOUT_S * len(docs))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for k, doc in enumerate(docs):
            with self.subTest(schedule=schedules[k]):
                self.check_run(doc, [res["runs"][k] for res in per_rank], stages_per_rank)

    def check_run(self, doc: dict, per_rank: list, stages_per_rank: int):
        pipe = doc["pipeline"]
        n_params = len(list(P.make_llama4()[0].parameters()))
        n_stages = 2 * stages_per_rank
        seen = set()
        for rank, res in enumerate(per_rank):
            where = f"{pipe['schedule']}: rank {rank} (stages {res['stages']})"
            pp_rank = rank // 2  # pp is the outer mesh dim
            expected = [s["index"] for s in pipe["stages"] if s["pp_rank"] == pp_rank]
            self.assertEqual(res["stages"], expected, where)
            self.assertEqual(res["off_plan"], [], where)  # every op in its planned stage
            zero_bubble = pipe["schedule"] in ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
            for s, split in zip(res["stages"], res["split"]):
                if not zero_bubble:
                    self.assertIsNone(split, where)
                    continue
                # B and W as the plan's "part" of each node says: most backward ops are
                # placed by their planned node's part (those without one: recomputed
                # forward ops, gradient reductions)
                planned, unplanned = res["parts"][res["stages"].index(s)]
                self.assertGreater(planned, unplanned, f"{where}: stage {s}")
                # W really runs apart: weight-gradient ops deferred, and (but on the first
                # stage, which sends no gradient back) output gradients handed from B to W
                self.assertGreater(split[0], 0, f"{where}: stage {s}")
                if s > 0:
                    self.assertGreater(split[1], 0, f"{where}: stage {s}")
            if n_stages - 1 in expected:
                self.assertEqual(len(res["loss_err"]), 3, where)
                for k, e in enumerate(res["loss_err"]):
                    self.assertLessEqual(e, TOL, f"{where}: loss of step {k}")
            else:
                self.assertEqual(res["loss_err"], [], where)
            if pipe["schedule"] in COUNTED:
                self.check_reductions_once_per_step(res, where)
            for n, e in res["grad_err"].items():
                self.assertLessEqual(e, TOL, f"{where}: gradient of {n}")
            for n, e in res["param_err"].items():
                self.assertLessEqual(e, TOL, f"{where}: {n} after 3 AdamW steps")
            self.assertEqual(set(res["grad_err"]), set(res["param_err"]), where)
            seen |= set(res["grad_err"])
        self.assertEqual(len(seen), n_params)  # every parameter lives on some stage
        # The stages run the plan's schedule (the stages' prefetches and issue points, one
        # "schedule" section): each entry found in a stage's graph moves its collectives there.
        self.assertGreater(len(doc["schedule"]["prefetch"]) + len(doc["schedule"]["issue"]), 0)
        self.assertEqual(doc["schedule"]["reduce"], [])  # reduced once per step instead
        planned = {e[len("grad:"):-len(":-1")] for e in doc["schedule"]["once_per_step"]}
        self.assertGreater(len(planned), 0)
        for rank, res in enumerate(per_rank):  # the runtime defers exactly what the plan says
            pp_rank = rank // 2
            mine = {s["index"] for s in pipe["stages"] if s["pp_rank"] == pp_rank}
            want = {n for n in planned if doc["placements"][n]["stage"] in mine}
            self.assertEqual(set(res["deferred"]), want, f"{pipe['schedule']}: rank {rank}")
        for rank, res in enumerate(per_rank):
            self.assertTrue(all(moved > 0 for moved, _ in res["scheduled"]),
                            f"{pipe['schedule']}: rank {rank}: {res['scheduled']}")

    def check_reductions_once_per_step(self, res: dict, where: str):
        """A step of M microbatches runs a M + b collectives (a per microbatch: the stages'
        forward and backward; b once per step); b must be one reduction per reduced parameter
        (the planner prices them once per step), the rest scaling with M."""
        m, half = P.MICROBATCHES, P.MICROBATCHES // 2
        per_mb, rest = divmod(res["collectives"] - res["collectives_half"], m - half)
        self.assertEqual(rest, 0, where)
        once = res["collectives"] - m * per_mb
        self.assertGreater(res["reduced"], 0, where)
        self.assertEqual(once, res["reduced"],
                         f"{where}: {once} collectives once per step, {per_mb} per microbatch; "
                         f"{res['reduced']} parameters' gradients are reduced")

    def test_llama4_1f1b_two_stages_by_dp2(self):
        self.check(["1F1B"], 1)

    def test_llama4_interleaved_and_zero_bubble_four_stages_by_dp2(self):
        self.check(["Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"], 2)


if __name__ == "__main__":
    unittest.main()
