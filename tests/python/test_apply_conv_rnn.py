"""Applied numerics of group norm and LSTM plans on gloo (issue 40, item 4).

2 processes (mesh 2, dim dp) run the lowered step (autoshard.apply, as in test_apply.py) of a
2-layer nn.LSTM under data parallelism (the input pinned S(0), every parameter R), the LSTM also under autoshard's
optimum on the slow-compute toy device (its gate splits, unsafe_split, which DTensor 2.13
lacks, run with DTensor's split strategy from autoshard.dtensor_rules).  Each rank compares with the single-process
eager step: loss and every gradient within 1e-5 relative, and the parameters after three AdamW
steps; DTensor must have produced every planned output placement itself.

Group norm (batch rows, and channel rows with whole groups a shard, the group count rewritten
by dtensor_rules) runs as ops on DTensors in the same launch, not as a whole step: DTensor 2.13 runs a convolution
with an out-channel shard of its weight (Shard(0)) as if the output were Replicate (local
[4, 4, 8, 8] of a "replicated" [4, 8, 8, 8]), and its backward likewise, so a step whose conv
feeds a channel-split norm cannot run under DTensor (a runtime defect outside these rules).
About 35 s on a loaded 2-core machine (one 2-rank launch).
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


def _run(mesh, jobs):
    return {"jobs": W.run_jobs(mesh, jobs), "ops": _group_norm_ops(mesh)}


def _dp_pins(graph):
    """Data parallelism: the input split on the batch, every parameter replicated (and the
    conv's output on the batch: the slow-compute device would split its channels, which
    DTensor 2.13 cannot run, see above)."""
    conv = [f"{n['name']}=S(0)" for n in graph["nodes"] if n.get("op", "").startswith("convolution")
            and n.get("phase", "forward") == "forward"]
    return W.input_pins(graph, "S(0)") + conv + W.param_pins(graph, lambda n, s: "R")


@unittest.skipIf(torch is None, "PyTorch not installed")
class ConvRnnApply(unittest.TestCase):
    def test_group_norm_and_lstm_on_2_ranks(self):
        binary = _dtensor_ref.autoshard_binary()
        if binary is None:
            self.skipTest("autoshard binary not built (set AUTOSHARD_BIN)")
        tmp = tempfile.mkdtemp(prefix="autoshard-conv-rnn-")
        try:
            jobs = []
            for key, name, pins in [("lstm", "optimum", None), ("lstm", "dp", _dp_pins)]:
                graph = W.trace(key)[1]
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
        per_rank = [r["jobs"] for r in per_rank]
        gates = [n for n in by_name["lstm/optimum"] if n.startswith("unsafe_split")]
        self.assertEqual(len(gates), 12)
        for job in jobs:
            for rank, results in enumerate(per_rank):
                res = next(r for r in results if r["name"] == job["name"])
                where = f"{job['name']} rank {rank}"
                self.assertLessEqual(res["loss_err"], TOL, where)
                for n, e in res["grad_err"].items():
                    self.assertLessEqual(e, TOL, f"{where}: grad of {n}")
                for n, e in res["param_err"].items():
                    self.assertLessEqual(e, TOL, f"{where}: {n} after 3 AdamW steps")
                self.assertTrue(res["grad_placements_ok"], where)
                self.assertEqual(res["mismatches"], [], f"{where}: DTensor chose otherwise")
                self.assertTrue(res["dtensor_free"], f"{where}: a DTensor in the lowered graph")


if __name__ == "__main__":
    unittest.main()
