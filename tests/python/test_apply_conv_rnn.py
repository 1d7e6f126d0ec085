"""Applied numerics of convolution, group norm, LSTM, weight norm and upsample plans on gloo
(issue 40, item 4).

2 processes (mesh 2, dim dp) run the lowered step (autoshard.apply, as in test_apply.py) of a
2-layer nn.LSTM under data parallelism (the input pinned S(0), every parameter R), the LSTM also
under autoshard's optimum on the slow-compute toy device (its gate splits, unsafe_split, which
DTensor 2.13 lacks, run with DTensor's split strategy from autoshard.dtensor_rules), and a conv
net with GroupNorm whose convolution is pinned to the output-channel split (weight and bias
S(0), output S(1); the channel-split group norm after it), and a weight-normed conv whose
output is upsampled bicubically, under the optimum.  Each rank compares with the
single-process eager step: loss and every gradient within 1e-5 relative, and the parameters
after three AdamW steps; DTensor must have produced every planned output placement itself.

DTensor 2.13 on its own runs that convolution as if its output were Replicate (local
[4, 4, 8, 8] of a "replicated" [4, 8, 8, 8]) and fails its backward; autoshard.dtensor_rules
registers the planner's convolution rows instead.  The same launch checks those rows op by op
(forward and backward, batch / out-channel / in-channel, with and without bias, transposed,
1-d) and group norm (batch rows, and channel rows with whole groups a shard, the group count
rewritten by dtensor_rules) on DTensors against the full ops.
About 20-35 s on a loaded 2-core machine (one 2-rank launch).
"""
import functools
import os
import shutil
import tempfile
import unittest

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

try:
    import torch
    import _apply_worker as W
    import _dtensor_ref
except ImportError:  # pragma: no cover
    torch = None

TOL = 1e-5
TIMEOUT_S = 300


def _group_norm_ops(mesh) -> dict:
    """native_group_norm and its backward on DTensors (batch and whole-group channel shards,
    with and without the affine parameters) -> placements -> max relative error against the
    same ops on full tensors, and the output placements DTensor chose."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from autoshard.dtensor_rules import ensure_registered

    ensure_registered()
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(2)
    x, go = torch.randn(4, 8, 3, 3, generator=g), torch.randn(4, 8, 3, 3, generator=g)
    w, b = torch.randn(8, generator=g), torch.randn(8, generator=g)
    out = {}
    for act, per_channel in ((Shard(0), Replicate()), (Shard(1), Shard(0))):
        for affine in (True, False):
            mask = [True, affine, affine]
            ref = aten.native_group_norm(x, w if affine else None, b if affine else None,
                                         4, 8, 9, 4, 1e-5)
            ref += aten.native_group_norm_backward(go, x, ref[1], ref[2], w if affine else None,
                                                   4, 8, 9, 4, mask)
            d = lambda t, p: distribute_tensor(t, mesh, (p,)) if affine else None  # noqa
            dx, dgo = distribute_tensor(x, mesh, (act,)), distribute_tensor(go, mesh, (act,))
            fw = aten.native_group_norm(dx, d(w, per_channel), d(b, per_channel), 4, 8, 9, 4, 1e-5)
            got = list(fw) + list(aten.native_group_norm_backward(
                dgo, dx, fw[1], fw[2], d(w, per_channel), 4, 8, 9, 4, mask))
            errs = [W.rel_err(t.full_tensor(), r) for t, r in zip(got, ref) if r is not None]
            out[f"{act}/{affine}"] = [max(errs), [str(t.placements) for t in got if t is not None]]
    return out


def _conv_cases():
    """(name, input, weight, bias?, transposed, placements of input/weight/bias) of the conv
    op checks: every row the planner offers on plain, bias-free, transposed and 1-d convs."""
    from torch.distributed.tensor import Replicate as R, Shard as S

    g = torch.Generator().manual_seed(3)
    x2, x1 = torch.randn(4, 6, 5, 5, generator=g), torch.randn(4, 6, 7, generator=g)
    w2, wt, w1 = (torch.randn(8, 6, 3, 3, generator=g), torch.randn(6, 8, 3, 3, generator=g),
                  torch.randn(8, 6, 3, generator=g))
    b = torch.randn(8, generator=g)
    rows = {"batch": (S(0), R(), R()), "out": (R(), S(0), S(0)), "in": (S(1), S(1), R())}
    cases = [(f"2d/{k}", x2, w2, b, False, p) for k, p in rows.items()]
    cases.append(("2d-nobias/out", x2, w2, None, False, rows["out"]))
    cases.append(("2d-transposed/out", x2, wt, b, True, (R(), S(1), S(0))))
    cases.append(("2d-transposed/in", x2, wt, b, True, (S(1), S(0), R())))
    cases.append(("1d/out", x1, w1, b, False, rows["out"]))
    return cases


def _conv_ops(mesh) -> dict:
    """convolution and convolution_backward on DTensors for each _conv_cases row -> name ->
    [max relative error against the full ops, the output placements DTensor chose]."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    from autoshard.dtensor_rules import ensure_registered

    ensure_registered()
    aten = torch.ops.aten
    out = {}
    for name, x, w, b, transposed, places in _conv_cases():
        k = x.dim() - 2
        conf = ([1] * k, [1] * k, [1] * k, transposed, [0] * k, 1)
        sizes, mask = (None, [True, True, False]) if b is None else ([b.shape[0]], [True] * 3)
        ref = aten.convolution(x, w, b, *conf)
        go = torch.randn(ref.shape, generator=torch.Generator().manual_seed(4))
        refs = [ref, *aten.convolution_backward(go, x, w, sizes, *conf, mask)]
        dx, dw = (distribute_tensor(t, mesh, (p,)) for t, p in zip((x, w), places))
        db = None if b is None else distribute_tensor(b, mesh, (places[2],))
        fw = aten.convolution(dx, dw, db, *conf)
        # the gradient of a Partial output arrives replicated (what autograd gives it)
        dgo = distribute_tensor(go, mesh, fw.placements if fw.placements[0].is_shard()
                                else (Replicate(),))
        got = [fw, *aten.convolution_backward(dgo, dx, dw, sizes, *conf, mask)]
        errs = [W.rel_err(t.full_tensor(), r) for t, r in zip(got, refs) if r is not None]
        out[name] = [max(errs), [str(t.placements) for t in got if t is not None]]
    out["fake/out"] = _fake_out_channel_grads(mesh)
    return out


def _fake_out_channel_grads(mesh) -> list:
    """The local shapes of convolution_backward's gradients on the out-channel row under fake
    tensors (as the lowering traces it): grad_bias is the local channel count [4] of 8, not
    `bias_sizes` [8] (which dtensor_rules rewrites)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.tensor import DTensor, Replicate, Shard

    with FakeTensorMode():
        go, x, w = torch.empty(4, 4, 5, 5), torch.empty(4, 6, 5, 5), torch.empty(4, 6, 3, 3)
        args = [DTensor.from_local(t, mesh, (p,), run_check=False)
                for t, p in ((go, Shard(1)), (x, Replicate()), (w, Shard(0)))]
        got = torch.ops.aten.convolution_backward(*args, [8], [1, 1], [1, 1], [1, 1], False,
                                                  [0, 0], 1, [False, True, True])
        return [None if t is None else list(t.to_local().shape) for t in got]


def _run(mesh, jobs):
    return {"jobs": W.run_jobs(mesh, jobs), "ops": _group_norm_ops(mesh),
            "conv": _conv_ops(mesh)}


def _dp_pins(graph):
    """Data parallelism: the input split on the batch, every parameter replicated."""
    return W.input_pins(graph, "S(0)") + W.param_pins(graph, lambda n, s: "R")


def _conv_nodes(graph) -> list:
    return [n["name"] for n in graph["nodes"] if n.get("op", "").startswith("convolution")
            and n.get("phase", "forward") == "forward"]


def _out_channel_pins(graph):
    """The convolution split on its output channels: weight and bias S(0), output S(1), the
    input replicated (the rest is the planner's)."""
    conv = [f"{name}=S(1)" for name in _conv_nodes(graph)]
    params = W.param_pins(graph, lambda n, s: "S(0)" if n in ("0.weight", "0.bias") else None)
    return W.input_pins(graph, "R") + conv + params


@unittest.skipIf(torch is None, "PyTorch not installed")
class ConvRnnApply(unittest.TestCase):
    def test_conv_group_norm_and_lstm_on_2_ranks(self):
        binary = _dtensor_ref.autoshard_binary()
        if binary is None:
            self.skipTest("autoshard binary not built (set AUTOSHARD_BIN)")
        tmp = tempfile.mkdtemp(prefix="autoshard-conv-rnn-")
        try:
            jobs, graphs = [], {}
            for key, name, pins in [("lstm", "optimum", None), ("lstm", "dp", _dp_pins),
                                    ("group_norm", "out-channel", _out_channel_pins),
                                    ("weight_norm_upsample", "optimum", None)]:
                graph = graphs[key] = graphs.get(key) or W.trace(key)[1]
                d = os.path.join(tmp, f"{key}-{name}")
                os.makedirs(d)
                placements = W.plan(binary, graph, [2], ["dp"], pins(graph) if pins else [], d)
                jobs.append({"name": f"{key}/{name}", "model": key, "placements": placements})
            per_rank = W.launch(2, [2], ["dp"], functools.partial(_run, jobs=jobs), tmp,
                                TIMEOUT_S)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        by_name = {j["name"]: j["placements"]["placements"] for j in jobs}
        self.assertTrue(any(e["output"].startswith("S(") for n, e in by_name["lstm/dp"].items()
                            if n == "x" or n.startswith("input")))
        # The ops on DTensors: whole-group channel shards keep S(1) (2 groups a rank), the
        # batch rows give P(sum) weight gradients; equal to the full ops within 1e-5.
        for rank in per_rank:
            for key, (err, placements) in rank["ops"].items():
                self.assertLessEqual(err, TOL, key)
            self.assertEqual(rank["ops"]["S(1)/True"][1], ["(Shard(dim=1),)"] * 4
                             + ["(Shard(dim=0),)"] * 2)
            self.assertEqual(rank["ops"]["S(0)/True"][1], ["(Shard(dim=0),)"] * 4
                             + ["(Partial(sum),)"] * 2)
        # convolution rows op by op: equal to the full ops, DTensor keeps the planner's outputs
        rows = {"batch": ["(Shard(dim=0),)", "(Shard(dim=0),)", "(Partial(sum),)",
                          "(Partial(sum),)"],
                "out": ["(Shard(dim=1),)", "(Partial(sum),)", "(Shard(dim=0),)",
                        "(Shard(dim=0),)"],
                "in": ["(Partial(sum),)", "(Shard(dim=1),)", "(Shard(dim=1),)", "(Replicate(),)"]}
        for rank in per_rank:
            self.assertEqual(rank["conv"].pop("fake/out"), [None, [4, 6, 3, 3], [4]])
            self.assertEqual(len(rank["conv"]), 7)
            for key, (err, placements) in rank["conv"].items():
                self.assertLessEqual(err, TOL, key)
            for row, want in rows.items():
                self.assertEqual(rank["conv"][f"2d/{row}"][1], want, row)
            self.assertEqual(rank["conv"]["2d-nobias/out"][1], rows["out"][:3])
            self.assertEqual(rank["conv"]["2d-transposed/out"][1],
                             ["(Shard(dim=1),)", "(Partial(sum),)", "(Shard(dim=1),)",
                              "(Shard(dim=0),)"])
            self.assertEqual(rank["conv"]["1d/out"][1], rows["out"])
        # the whole step ran the out-channel row the pins asked for
        conv = by_name["group_norm/out-channel"]
        self.assertEqual([conv[n]["output"] for n in _conv_nodes(graphs["group_norm"])],
                         ["S(1)"])
        per_rank = [r["jobs"] for r in per_rank]
        # weight norm and the bicubic upsample ran on their own rules, no fallback
        wn = W.trace("weight_norm_upsample")[1]
        ops = {n.get("op", "").split(".")[0] for n in wn["nodes"]}
        self.assertTrue({"_weight_norm_interface", "_weight_norm_interface_backward",
                         "upsample_bicubic2d", "upsample_bicubic2d_backward"} <= ops, sorted(ops))
        gates = [n for n in by_name["lstm/optimum"] if n.startswith("unsafe_split")]
        self.assertEqual(len(gates), 12)
        for job in jobs:
            for rank, results in enumerate(per_rank):
                res = next(r for r in results if r["name"] == job["name"])
                where = f"{job['name']} rank {rank}"
                W.check_job(self, res, where, TOL)


if __name__ == "__main__":
    unittest.main()
