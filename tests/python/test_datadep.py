"""What tracing on meta cannot see directly: ops without a Meta kernel (CTC loss).

- The tracer supplies Meta kernels for `_ctc_loss.Tensor` and `_ctc_loss_backward` only while
  it traces (a scoped torch.library registration), with the op's output shapes.
- A small speech model trained with `F.ctc_loss` traces, plans with the CTC batch rule (no
  replicated fallback) and applies on 2 gloo ranks with single-process numerics.
"""
from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

torch = pytest.importorskip("torch")

import _apply_worker as W  # noqa: E402
import _datadep_worker as D  # noqa: E402

TOL = 1e-5


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _ctc_on_meta(targets):
    lengths = _meta(4, dtype=torch.long)
    return torch.ops.aten._ctc_loss.Tensor(_meta(12, 4, 6), targets, lengths, lengths)


def test_ctc_meta_kernels_are_scoped_to_the_trace():
    from autoshard.tracer.examples.speech import ctc_speech
    from autoshard.tracer.export import to_graph_dict
    from autoshard.tracer.meta_kernels import scoped_meta_kernels
    from autoshard.tracer.trace import trace_training_step

    with pytest.raises(NotImplementedError, match="_ctc_loss.Tensor"):
        _ctc_on_meta(_meta(4, 5, dtype=torch.long))
    model, inputs, loss_fn, targets = ctc_speech(batch=4, frames=12, target_len=5, n_mels=8,
                                                 hidden=16, vocab=6)
    graph = to_graph_dict(trace_training_step(model, inputs, loss_fn, targets))
    ops = {n["op"]: n for n in graph["nodes"] if n.get("kind") == "op"}
    fwd, bwd = ops["_ctc_loss.Tensor"], ops["_ctc_loss_backward.Tensor"]
    # nll [N]; log_alpha [N, T, 2 * S + 1] with S the padded target width (its upper bound)
    assert [o["shape"] for o in fwd["outputs"]] == [[4], [4, 12, 11]]
    assert bwd["outputs"][0]["shape"] == [12, 4, 6]
    # gone after the trace; nested scopes register once and keep it until the outermost ends
    with pytest.raises(NotImplementedError):
        _ctc_on_meta(_meta(4, 5, dtype=torch.long))
    with scoped_meta_kernels() as ops_done:
        assert "_ctc_loss.Tensor" in ops_done
        with scoped_meta_kernels():
            pass
        nll, alpha = _ctc_on_meta(_meta(14, dtype=torch.long))  # concatenated 1-D targets
        assert list(nll.shape) == [4] and list(alpha.shape) == [4, 12, 29]
    with pytest.raises(NotImplementedError):
        _ctc_on_meta(_meta(4, 5, dtype=torch.long))


def test_ctc_speech_model_plans_and_applies_on_two_ranks(cli_bin):
    """DP pins (inputs and lengths S(0), weights R) and the optimum: CTC planned batch-split
    under DP, and both plans run on 2 gloo ranks within 1e-5 of one process (loss, gradients,
    parameters after three AdamW steps)."""
    mesh, dims = [2], ["dp"]
    _, graph = D.trace("speech")
    tmp = tempfile.mkdtemp(prefix="autoshard-ctc-")
    try:
        jobs = []
        dp = W.input_pins(graph, "S(0)") + W.param_pins(graph, lambda n, s: "R")
        for name, pins in (("dp", dp), ("optimum", [])):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            jobs.append({"name": f"speech/{name}", "model": "speech",
                         "placements": W.plan(cli_bin, graph, mesh, dims, pins, d)})
        per_rank = W.launch(2, mesh, dims, functools.partial(D.run_jobs, jobs=jobs), tmp, 300)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ctc = next(n["name"] for n in graph["nodes"] if n.get("op") == "_ctc_loss.Tensor")
    assert jobs[0]["placements"]["placements"][ctc]["output"] == "(S(0), S(0))"
    for job in jobs:
        for rank, results in enumerate(per_rank):
            res = next(r for r in results if r["name"] == job["name"])
            where = f"{job['name']} rank {rank}"
            assert res["loss_err"] <= TOL, where
            for n, e in res["grad_err"].items():
                assert e <= TOL, f"{where}: grad of {n}"
            for n, e in res["param_err"].items():
                assert e <= TOL, f"{where}: {n} after 3 AdamW steps"
            assert res["mismatches"] == [], where
