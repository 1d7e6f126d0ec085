"""autoshard.schedule on hand-made stamped graphs: prefetches move to their planned point."""
import operator
import unittest

import _paths  # noqa: F401

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


def _two_layers():
    """x -> layer 0 (relu) -> layer 1 (mm with the weight gathered for edge mm1:1)."""
    aten, ops = torch.ops.aten, torch.ops._c10d_functional
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    h = _stamped(g, aten.relu.default, (x,), "relu0")
    h2 = _stamped(g, aten.mul.Tensor, (h, 2.0), "mul0")
    wt = _stamped(g, aten.t.default, (w,), "t1")
    ag = _stamped(g, ops.all_gather_into_tensor.default, (wt, 2, "1"), "mm1", "mm1:1")
    wait = _stamped(g, ops.wait_tensor.default, (ag,), "mm1", "mm1:1")
    view = _stamped(g, aten.view.default, (wait, [-1]), "mm1", "mm1:1")
    out = _stamped(g, aten.mm.default, (h2, view), "mm1")
    g.output(out)
    return g


def _order(g):
    return [n.target.__name__.split(".")[0] for n in g.nodes if n.op == "call_function"]


@unittest.skipIf(torch is None, "PyTorch not installed")
class Prefetch(unittest.TestCase):
    SCHEDULE = {"version": 1, "prefetch_layers": 1,
                "prefetch": [{"edge": "mm1:1", "issue_before": "relu0"}]}

    def test_the_gather_and_the_view_it_reads_move_to_the_issue_point(self):
        from autoshard.inflight import check_in_flight
        from autoshard.schedule import apply_prefetch

        g = _two_layers()
        self.assertEqual(apply_prefetch(g, self.SCHEDULE), 1)
        g.lint()
        self.assertEqual(_order(g), ["t", "all_gather_into_tensor", "relu", "mul", "wait_tensor",
                                     "view", "mm"])
        self.assertEqual(check_in_flight(g), [])
        self.assertEqual(apply_prefetch(g, self.SCHEDULE), 0)  # already there

    def test_null_issues_before_the_first_op_and_absent_points_leave_it(self):
        from autoshard.schedule import apply_prefetch

        g = _two_layers()
        start = {"version": 1, "prefetch": [{"edge": "mm1:1", "issue_before": None}]}
        self.assertEqual(apply_prefetch(g, start), 1)
        self.assertEqual(_order(g)[:2], ["t", "all_gather_into_tensor"])
        g2 = _two_layers()
        elsewhere = {"version": 1, "prefetch": [{"edge": "mm1:1", "issue_before": "gone"}]}
        self.assertEqual(apply_prefetch(g2, elsewhere), 0)
        self.assertEqual(apply_prefetch(g2, None), 0)

    def test_a_collective_reading_computed_values_does_not_move(self):
        from autoshard.schedule import apply_prefetch

        aten, ops = torch.ops.aten, torch.ops._c10d_functional
        g = torch.fx.Graph()
        x = g.placeholder("x")
        h = _stamped(g, aten.relu.default, (x,), "relu0")
        ag = _stamped(g, ops.all_gather_into_tensor.default, (h, 2, "1"), "mm1", "mm1:0")
        g.output(_stamped(g, ops.wait_tensor.default, (ag,), "mm1", "mm1:0"))
        before = _order(g)
        self.assertEqual(apply_prefetch(g, {"version": 1, "prefetch": [
            {"edge": "mm1:0", "issue_before": "relu0"}]}), 0)
        self.assertEqual(_order(g), before)

    def test_the_runtime_runs_the_files_op_order(self):
        import warnings

        from autoshard.plan_file import PlanError, planned_order

        aten = torch.ops.aten
        g = torch.fx.Graph()
        x = g.placeholder("x")
        a = g.call_function(aten.relu.default, (x,))
        b = g.call_function(aten.neg.default, (x,))
        pair = g.call_function(aten.split.Tensor, (b, 2))  # unnamed: runs with its reader
        half = g.call_function(operator.getitem, (pair, 0))
        c = g.call_function(aten.add.Tensor, (a, half))
        g.output(c)
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        names = {x: "x", a: "a", b: "b", pair: "split", c: "c"}
        order = planned_order(gm, names, {"version": 5, "order": ["b", "split", "a", "c"]})
        self.assertEqual(order, [x, b, pair, a, half, c, list(g.nodes)[-1]])
        with self.assertRaisesRegex(PlanError, r"^p: /schedule/order: c is run before its "
                                               r"input a$"):
            planned_order(gm, names, {"version": 5, "order": ["c", "a", "b", "split"]}, "p: ")
        self.assertIsNone(planned_order(gm, names, None))  # no schedule: the graph's order
        with warnings.catch_warnings(record=True) as w:  # an older writer's: said, not guessed
            warnings.simplefilter("always")
            self.assertIsNone(planned_order(gm, names, {"version": 4}, "p: "))
        self.assertIn("p: /schedule: version 4 has no op order", str(w[0].message))

    def test_bad_schedules_name_the_key(self):
        from autoshard.schedule import ScheduleError, prefetch_entries, reduce_entries

        with self.assertRaisesRegex(ScheduleError, "/schedule/version: 7"):
            prefetch_entries({"version": 7})
        with self.assertRaisesRegex(ScheduleError, "/schedule/prefetch/0"):
            prefetch_entries({"version": 1, "prefetch": [{"issue_before": "a"}]})
        with self.assertRaisesRegex(ScheduleError, "/schedule/prefetch/0/issue_before"):
            prefetch_entries({"version": 1, "prefetch": [{"edge": "a:0", "issue_before": 3}]})
        with self.assertRaisesRegex(ScheduleError, "/schedule/reduce/0"):
            reduce_entries({"version": 3, "prefetch": [], "reduce": [{"edge": "grad:w:-1"}]})
        self.assertEqual(reduce_entries({"version": 3, "reduce": [
            {"edge": "grad:w:-1", "bucket": 1}]}), [("grad:w:-1", 1)])
        with self.assertRaisesRegex(ScheduleError, "/schedule/prefetch/0/bucket"):
            prefetch_entries({"version": 2, "prefetch": [{"edge": "a:0", "issue_before": None}]})
        self.assertEqual(prefetch_entries({"version": 2, "prefetch": [
            {"edge": "a:0", "issue_before": None, "bucket": 3}]}), [("a:0", None, 3)])


def _ops_stamped(g):
    """Each op of a hand-made graph run under its own "<node>:op" edge, as the lowering stamps
    it (the wait points name those)."""
    for n in g.nodes:
        stamp = n.meta.get("autoshard", {})
        if n.op == "call_function" and "edge" not in stamp:
            stamp["edge"] = f"{stamp['node']}:op"
    return g


@unittest.skipIf(torch is None, "PyTorch not installed")
class WaitPoints(unittest.TestCase):
    """Version 6: each entry names the op before which a rank waits for its collectives."""

    @staticmethod
    def schedule(wait_before):
        return {"version": 6, "prefetch": [{"edge": "mm1:1", "issue_before": "relu0",
                                            "bucket": 0, "wait_before": wait_before}]}

    def test_the_wait_goes_where_the_file_says(self):
        from autoshard.inflight import check_in_flight
        from autoshard.schedule import apply_prefetch, apply_wait_points

        g = _ops_stamped(_two_layers())
        apply_prefetch(g, self.schedule("mm1"))
        # the consumer (the planner's default): the wait and the view of the arrived value
        # are already right before the matmul
        self.assertEqual(apply_wait_points(g, self.schedule("mm1")), 0)
        self.assertEqual(_order(g), ["t", "all_gather_into_tensor", "relu", "mul", "wait_tensor",
                                     "view", "mm"])
        # moved earlier in the file: the lowered graph waits before mul0 (the view stays)
        self.assertEqual(apply_wait_points(g, self.schedule("mul0")), 1)
        g.lint()
        self.assertEqual(_order(g), ["t", "all_gather_into_tensor", "relu", "wait_tensor", "mul",
                                     "view", "mm"])
        self.assertEqual(check_in_flight(g), [])
        # back to the consumer: the wait moves later, with the view that reads it
        self.assertEqual(apply_wait_points(g, self.schedule("mm1")), 1)
        self.assertEqual(_order(g), ["t", "all_gather_into_tensor", "relu", "mul", "wait_tensor",
                                     "view", "mm"])
        # the step's end (null): no later than the value's reader, the matmul
        self.assertEqual(apply_wait_points(g, self.schedule(None)), 0)
        # a point outside this graph leaves it; a file before version 6 has none
        self.assertEqual(apply_wait_points(g, self.schedule("gone")), 0)
        self.assertEqual(apply_wait_points(g, {"version": 5, "prefetch": []}), 0)

    def test_a_wait_before_the_issue_or_without_a_point_is_refused(self):
        from autoshard.schedule import ScheduleError, apply_wait_points, wait_entries

        g = _ops_stamped(_two_layers())  # not prefetched: the gather is issued after mul0
        with self.assertRaisesRegex(ScheduleError, r"^/schedule/prefetch/0/wait_before: "
                                                   r"'relu0' runs before the edge's collective"):
            apply_wait_points(g, self.schedule("relu0"))
        with self.assertRaisesRegex(ScheduleError, "/schedule/reduce/0/wait_before: missing"):
            wait_entries({"version": 6, "reduce": [{"edge": "grad:w:-1", "bucket": 0}]})
        with self.assertRaisesRegex(ScheduleError, "/schedule/issue/0/wait_before: a node name"):
            wait_entries({"version": 6, "issue": [{"edge": "a:0", "issue_after": "b",
                                                   "wait_before": 3}]})


def _bucket_graph(prefetched: bool = True):
    """Four weights gathered and used by one op each: w1 [4, 3], w2 [2, 3] and w3 [5] over
    group "1", w4 [2, 2] over group "2" (each 2 ranks); the result sums them.  prefetched:
    every gather issued first (as apply_prefetch leaves them), else each right before its use."""
    ops = torch.ops._c10d_functional
    aten = torch.ops.aten
    shapes = {"w1": (4, 3), "w2": (2, 3), "w3": (5,), "w4": (2, 2)}
    g = torch.fx.Graph()
    x = g.placeholder("x")
    ws = []
    for name, shape in shapes.items():
        ws.append(g.placeholder(name))
        ws[-1].meta["val"] = torch.empty(shape)
    total = _stamped(g, aten.relu.default, (x,), "relu0")

    def issue(k):
        group = "2" if k == 3 else "1"
        return _stamped(g, ops.all_gather_into_tensor.default, (ws[k], 2, group), f"use{k}",
                        f"use{k}:1")

    issued = [issue(k) for k in range(4)] if prefetched else []
    for k in range(4):
        ag = issued[k] if prefetched else issue(k)
        wait = _stamped(g, ops.wait_tensor.default, (ag,), f"use{k}", f"use{k}:1")
        scaled = _stamped(g, aten.mul.Tensor, (wait, float(k + 1)), f"use{k}")
        total = _stamped(g, aten.add.Tensor,
                         (total, _stamped(g, aten.sum.default, (scaled,), f"use{k}")), f"use{k}")
    g.output(total)
    return g, shapes


class _LocalGather(torch.fx.Interpreter if torch is not None else object):
    """Runs a graph with its 2-rank collectives simulated on rank 0: the other rank holds
    x + 100."""

    def call_function(self, target, args, kwargs):
        ops = torch.ops._c10d_functional
        if target is ops.all_gather_into_tensor.default:
            return torch.cat([args[0], args[0] + 100])
        if target is ops.reduce_scatter_tensor.default:
            return (2 * args[0] + 100)[:args[0].shape[0] // 2]
        if target is ops.all_reduce.default:
            return 2 * args[0] + 100
        if target is ops.wait_tensor.default:
            return args[0]
        return super().call_function(target, args, kwargs)


def _reduction_graph():
    """Three gradients (x times a weight of shape [4, 3], [2, 3], [6]) reduce-scattered and an
    [3, 2] one all-reduced over group "1" (2 ranks), each issued once computed and waited at
    the end, as overlap_gradient_reductions leaves them."""
    ops = torch.ops._c10d_functional
    aten = torch.ops.aten
    shapes = [(4, 3), (2, 3), (6,), (3, 2)]
    g = torch.fx.Graph()
    x = g.placeholder("x")
    issued = []
    for k, shape in enumerate(shapes):
        w = g.placeholder(f"w{k}")
        w.meta["val"] = torch.empty(shape)
        grad = _stamped(g, aten.mul.Tensor, (w, x), f"grad{k}")
        grad.meta["val"] = torch.empty(shape)
        edge = f"grad:w{k}:-1"
        if k < 3:
            c = _stamped(g, ops.reduce_scatter_tensor.default, (grad, "sum", 2, "1"), "w", edge)
        else:
            c = _stamped(g, ops.all_reduce.default, (grad, "sum", "1"), "w", edge)
        issued.append((c, edge))
    outs = [_stamped(g, ops.wait_tensor.default, (c,), "w", edge) for c, edge in issued]
    g.output(tuple(outs))
    return g, shapes


@unittest.skipIf(torch is None, "PyTorch not installed")
class Buckets(unittest.TestCase):
    def _schedule(self, buckets):
        return {"version": 2, "prefetch": [{"edge": f"use{k}:1", "issue_before": None,
                                            "bucket": b} for k, b in enumerate(buckets)]}

    def test_a_buckets_gathers_on_one_group_run_as_one_with_the_same_values(self):
        from autoshard.inflight import check_in_flight
        from autoshard.buckets import merge_buckets

        g, shapes = _bucket_graph()
        inputs = [torch.randn(2, 2)] + [torch.randn(s) for s in shapes.values()]
        before = _LocalGather(torch.fx.GraphModule(torch.nn.Module(), g)).run(*inputs)
        self.assertEqual(merge_buckets(g, self._schedule([0, 0, 0, 0])), 2)  # w4: other group
        g.lint()
        self.assertEqual(check_in_flight(g), [])
        self.assertEqual(_order(g).count("all_gather_into_tensor"), 2)
        after = _LocalGather(torch.fx.GraphModule(torch.nn.Module(), g)).run(*inputs)
        self.assertTrue(torch.equal(before, after))

    def test_separate_buckets_and_old_schedules_stay_apart(self):
        from autoshard.buckets import merge_buckets

        g, _ = _bucket_graph()
        self.assertEqual(merge_buckets(g, self._schedule([0, 1, 2, 3])), 0)
        self.assertEqual(merge_buckets(g, {"version": 1, "prefetch": [
            {"edge": f"use{k}:1", "issue_before": None} for k in range(4)]}), 0)
        self.assertEqual(merge_buckets(g, self._schedule([0, 1, 0, 1])), 1)
        self.assertEqual(_order(g).count("all_gather_into_tensor"), 3)

    def test_gradient_reductions_of_a_bucket_run_as_one_with_the_same_values(self):
        from autoshard.buckets import merge_buckets
        from autoshard.inflight import check_in_flight

        g, shapes = _reduction_graph()
        inputs = [torch.tensor(3.0)] + [torch.randn(s) for s in shapes]
        before = _LocalGather(torch.fx.GraphModule(torch.nn.Module(), g)).run(*inputs)
        schedule = {"version": 3, "prefetch": [], "reduce": [
            {"edge": f"grad:w{k}:-1", "bucket": 0} for k in range(4)]}
        # The three reduce-scatters become one; the all-reduce is another kind: apart.
        self.assertEqual(merge_buckets(g, schedule), 2)
        g.lint()
        self.assertEqual(check_in_flight(g), [])
        self.assertEqual(_order(g).count("reduce_scatter_tensor"), 1)
        after = _LocalGather(torch.fx.GraphModule(torch.nn.Module(), g)).run(*inputs)
        self.assertEqual(len(before), len(after))
        for a, b in zip(before, after):
            self.assertTrue(torch.equal(a, b))
        # Version 2 files carry no reduction buckets.
        g2, _ = _reduction_graph()
        self.assertEqual(merge_buckets(g2, {**schedule, "version": 2}), 0)

    def test_a_member_waited_before_another_is_issued_stays_apart(self):
        from autoshard.buckets import merge_buckets

        # Each gather right before its use: use0's wait comes before use1's issue, so a bucket
        # would wait for a collective not yet issued; nothing merges.
        g, _ = _bucket_graph(prefetched=False)
        self.assertEqual(merge_buckets(g, self._schedule([0, 0, 0, 0])), 0)
        self.assertEqual(_order(g).count("all_gather_into_tensor"), 4)

    def test_a_gathered_piece_is_contiguous_as_an_unbucketed_gather(self):
        from autoshard.buckets import bucket_flat, bucket_piece

        # two members gathered over 2 ranks: rank r's block holds r's shard of each, end to end
        a = [torch.arange(8.0).view(1, 4, 2) + 100 * r for r in range(2)]
        b = [torch.arange(6.0).view(3, 2) + 1000 * r for r in range(2)]
        out = torch.cat([bucket_flat(2, "all_gather", a[r], b[r]) for r in range(2)])
        piece = bucket_piece(out, 2, "all_gather", 0, (1, 4, 2))
        self.assertTrue(torch.equal(piece, torch.cat(a)))
        self.assertTrue(piece.is_contiguous())
        piece.view(8, 2)  # a view merging the gathered dim, as the graph's views do
        self.assertTrue(torch.equal(bucket_piece(out, 2, "all_gather", 8, (3, 2)), torch.cat(b)))


if __name__ == "__main__":
    unittest.main()


FSDP_SCRIPT = r"""
import json, os, subprocess, sys, tempfile
import torch, torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from autoshard.apply import apply_placement, trace_for_apply
from autoshard.inflight import check_in_flight, issue_wait_gaps
from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss
from autoshard.tracer.export import to_graph_dict

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
cfg = LlamaConfig(dim=64, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab_size=128,
                  max_seq_len=32)
torch.manual_seed(0)
model = Transformer(cfg)
tokens = torch.randint(0, 128, (4, 32))
traced = trace_for_apply(model, (tokens,), cross_entropy_loss, (tokens,))
out = tempfile.mkdtemp()
with open(os.path.join(out, "g.json"), "w") as f:
    json.dump(to_graph_dict(traced), f)
result = {}
for k, bucket in ((1, "layer"), (0, "layer"), (1, "none")):
    d = os.path.join(out, f"k{k}{bucket}")
    subprocess.run([os.environ["AUTOSHARD_BIN"], "plan", "--graph", os.path.join(out, "g.json"),
                    "--mesh", "2", "--mesh-dims", "dp", "--algo", "fsdp", "--comm-model", "dtensor",
                    "--prefetch-layers", str(k), "--bucket", bucket, "-o", d], check=True,
                   capture_output=True)
    doc = json.load(open(os.path.join(d, "placements.json")))
    step = apply_placement(model, doc, mesh, traced=traced)
    gaps = issue_wait_gaps(step.split.forward.graph)["all_gather"]
    assert check_in_flight(step.split.forward.graph) == []
    both = sum(len(v) for part in (step.split.forward, step.split.backward)
               for v in issue_wait_gaps(part.graph).values())
    result[f"{k}{bucket}"] = [step.split.prefetched, step.split.bucketed, both,
                              sum(g > 0 for g in gaps), doc["schedule"]["prefetch_layers"],
                              sum(gaps)]
doc.pop("schedule")  # an older writer's file: every collective at its use
step = apply_placement(model, doc, mesh, traced=traced)
gaps = issue_wait_gaps(step.split.forward.graph)["all_gather"]
both = sum(len(v) for part in (step.split.forward, step.split.backward)
           for v in issue_wait_gaps(part.graph).values())
result["none"] = [step.split.prefetched, step.split.bucketed, both, sum(g > 0 for g in gaps), None,
                  sum(gaps)]
print(json.dumps(result))
"""


@unittest.skipIf(torch is None, "PyTorch not installed")
class PrefetchOnAPlan(unittest.TestCase):
    def test_an_fsdp_plan_gathers_its_weights_a_layer_ahead(self):
        """The fsdp recipe's placements.json schedules every weight gather one layer ahead;
        the lowered forward issues them there (without the schedule, none overlaps)."""
        res = _paths.run_planned_script(self, FSDP_SCRIPT)
        # One layer ahead, no buckets: one gather per weight, most of them overlapped.
        # (gathers: every collective of the forward and the backward; overlapped: the forward's
        # all-gathers.)
        prefetched, bucketed, gathers, overlapped, k, _ = res["1none"]
        self.assertEqual((k, bucketed), (1, 0))
        self.assertGreater(prefetched, 0)
        self.assertGreaterEqual(overlapped, prefetched // 2)
        # Without a schedule (an older file): the same gathers, none overlapped.
        self.assertEqual(res["none"][:4], [0, 0, gathers, 0])
        # Buckets (the default): a layer's weights in one gather and its gradients in one
        # reduce-scatter, the same weights prefetched.
        prefetched_b, bucketed_b, gathers_b, overlapped_b, _, covered_b = res["1layer"]
        self.assertEqual(prefetched_b, prefetched)
        self.assertGreater(bucketed_b, 0)
        self.assertEqual(gathers_b, gathers - bucketed_b)
        self.assertGreaterEqual(overlapped_b, 3)  # a bucket per layer ahead of its use
        # At the use's own layer: less compute (ops between issue and wait) to hide behind.
        _, _, _, _, k0, covered0 = res["0layer"]
        self.assertEqual(k0, 0)
        self.assertLess(covered0, covered_b)
