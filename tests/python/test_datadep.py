"""What tracing on meta cannot see directly: ops without a Meta kernel (CTC loss).

- The tracer supplies Meta kernels for `_ctc_loss.Tensor` and `_ctc_loss_backward` only while
  it traces (a scoped torch.library registration), with the op's output shapes.
- A small speech model trained with `F.ctc_loss` traces, plans with the CTC batch rule (no
  replicated fallback) and applies on 2 gloo ranks with single-process numerics.
"""
from __future__ import annotations

import functools
import json
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
        # fake tensors (DTensor's propagation, the lowering): both overloads, list lengths exact
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            lp, tg = torch.empty(12, 4, 6), torch.zeros(4, 5, dtype=torch.long)
            lengths = torch.zeros(4, dtype=torch.long)
            _, alpha = torch.ops.aten._ctc_loss.Tensor(lp, tg, lengths, lengths)
            assert list(alpha.shape) == [4, 12, 11]
            _, alpha = torch.ops.aten._ctc_loss(lp, tg, [12] * 4, [3, 2, 3, 1])
            assert list(alpha.shape) == [4, 12, 7]
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
    # the Conv1d front end (its out-channel rows run with autoshard.dtensor_rules' strategies)
    assert any(n.get("op") == "convolution_backward" for n in graph["nodes"])
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
            assert res["islands"] == {}, where


# --- data-dependent code: the tracing policy --------------------------------------------------
def _trace(model, inputs, loss_fn, targets=None, **kw):
    from autoshard.tracer.trace import trace_training_step

    return trace_training_step(model, inputs, loss_fn, targets, **kw)


def _ops(traced) -> list:
    from autoshard.tracer.export import to_graph_dict

    return [n for n in to_graph_dict(traced)["nodes"] if n.get("kind") == "op"]


def _line(fn, text: str) -> str:
    """'file.py:LINE' of the line of `fn`'s source holding `text`."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    k = next(i for i, s in enumerate(lines) if text in s)
    return f"{os.path.basename(inspect.getsourcefile(fn))}:{start + k}"


def test_expert_loop_over_nonzero_takes_the_upper_bound():
    """HF's expert loop: every expert hit, every (token, slot) pair routed to each (sizes at
    their bound, known values through the loop), the MoE call recorded as an island."""
    model, inputs, targets, loss_fn = D.make_moe_loop()
    traced = _trace(model, inputs, loss_fn, targets)
    sizes = [(d.op, d.value, d.why) for d in traced.data_dependent if d.kind == "size"]
    # expert_hit: 4 experts; torch.where(mask[e]) per expert: k * tokens = 2 * 32 pairs
    assert sizes == [("nonzero", 4, "upper bound")] + [("nonzero", 64, "upper bound")] * 4
    experts = [d.value for d in traced.data_dependent if d.why == "known"
               and d.source == _line(D.LoopMoE.forward, "slot, token = torch.where")]
    assert experts == [0, 1, 2, 3]
    ups = [n for n in _ops(traced) if n["op"] == "mm" and n["phase"] == "forward"
           and n["outputs"][0]["shape"] == [64, 32]]
    assert len(ups) == 4  # each expert's up projection over all 64 routed pairs
    assert [c.module for c in traced.islands] == ["moe"]
    assert len(traced.islands[0].sources) >= 2


def _forward_subs(traced) -> int:
    return sum(n["op"] == "sub.Tensor" and n["phase"] == "forward" for n in _ops(traced))


def test_item_branch_default_warns_and_is_overridable():
    from autoshard.tracer.datadep import DataDependentError, DataDependentWarning

    model, inputs, targets, loss_fn = D.make_branch()
    line = _line(D.GatedBlock.forward, ".any().item()")
    with pytest.warns(DataDependentWarning, match=f"{line}: a boolean .* taken as True"):
        traced = _trace(model, inputs, loss_fn, targets)
    (dec,) = traced.data_dependent
    assert (dec.source, dec.value, dec.why, dec.module) == (line, True, "default", "block")
    assert _forward_subs(traced) == 1  # the loss's (out - y) only
    # the other branch, by source line; no warning then
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataDependentWarning)
        other = _trace(model, inputs, loss_fn, targets, data_dependent={line: False})
    assert other.data_dependent[0].why == "override"
    assert _forward_subs(other) == 2  # and h - 0.5 * extra(h)
    with pytest.raises(DataDependentError, match="no data-dependent value at nowhere.py:3"):
        _trace(model, inputs, loss_fn, targets, data_dependent={line: True, "nowhere.py:3": 1})
    with pytest.raises(ValueError, match="key 'block' is not 'file.py:LINE'"):
        _trace(model, inputs, loss_fn, targets, data_dependent={"block": True})


class _Layerdrop(torch.nn.Module):
    """Three layers, each skipped with probability 0.5 in training (wav2vec2's layerdrop), an
    integer read from a tensor, and a boolean mask selecting rows."""

    def __init__(self, read_int: bool = False, mask: bool = True) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.read_int, self.mask = read_int, mask

    def forward(self, x):
        for layer in self.layers:
            if self.training and torch.rand([]) < 0.5:
                continue
            x = x + layer(x)
        if self.read_int:
            x = x[: int(x.argmax())]
        return x[x.sum(-1) > 0] if self.mask else x


def test_layerdrop_runs_every_layer_and_masks_keep_every_row():
    from autoshard.tracer.datadep import DataDependentError

    from autoshard.tracer.datadep import DataDependentWarning

    draw = _line(_Layerdrop.forward, "torch.rand([]) < 0.5")
    with pytest.warns(DataDependentWarning, match=f"{draw}: a value drawn at random"):
        traced = _trace(_Layerdrop(), (torch.empty(6, 8),), lambda o: o.sum())
    whys = [(d.op, d.why) for d in traced.data_dependent]
    assert whys == [("item", "random draw")] * 3 + [("index.Tensor", "upper bound")]
    ops = _ops(traced)
    assert len([n for n in ops if n["op"] == "addmm"]) == 3  # every layer ran
    index = next(n for n in ops if n["op"] == "index.Tensor")
    assert index["outputs"][0]["shape"] == [6, 8]  # every row kept
    assert [c.module for c in traced.islands] == [""]  # the mask's, not the draws'
    with pytest.warns(DataDependentWarning):
        drops = _trace(_Layerdrop(mask=False), (torch.empty(6, 8),), lambda o: o.sum())
    assert len(drops.data_dependent) == 3 and drops.islands == []  # draws make no island
    line = _line(_Layerdrop.forward, "x[x.sum(-1) > 0] if")
    fewer = _trace(_Layerdrop(), (torch.empty(6, 8),), lambda o: o.sum(),
                   data_dependent={line: 2})
    index = next(n for n in _ops(fewer) if n["op"] == "index.Tensor")
    assert index["outputs"][0]["shape"] == [2, 8]
    with pytest.raises(DataDependentError, match=f"{line}: .* must be an int in \\[0, 6\\]"):
        _trace(_Layerdrop(), (torch.empty(6, 8),), lambda o: o.sum(), data_dependent={line: 7})
    int_line = _line(_Layerdrop.forward, "int(x.argmax())")
    with pytest.raises(DataDependentError, match=f"^{int_line}: an integer read from a tensor"):
        _trace(_Layerdrop(True), (torch.empty(6, 8),), lambda o: o.sum())


# --- data-dependent code: the applied step runs it as eager islands ----------------------------
def test_islands_apply_on_two_ranks_with_single_process_numerics(cli_bin):
    """The MoE with HF's expert loop (under the optimum and under DP pins), a tiny Hugging Face
    Mixtral with its experts' eager loop (transformers' own code, FSDP pins) and the block with
    an `.item()` branch (the data take the other branch than the trace's default), each
    planned on the policy's graph and applied on 2 gloo ranks with the island run eagerly:
    loss, gradients and parameters after three AdamW steps within 1e-5 of one process."""
    import warnings

    from autoshard.tracer.datadep import DataDependentWarning

    mesh, dims = [2], ["dp"]
    specs = [("moe_loop", "optimum"), ("moe_loop", "dp"), ("branch", "optimum")]
    try:
        import transformers  # noqa: F401
        specs.append(("mixtral_loop", "fsdp"))
    except ImportError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataDependentWarning)
        graphs = {k: D.trace(k)[1] for k in dict(specs)}
    # the graph says which calls run eagerly; the plan's report names them (below)
    assert [i["module"] for i in graphs["moe_loop"]["islands"]] == ["moe"]
    assert graphs["branch"]["_data_dependent"][0]["why"] == "default"
    tmp = tempfile.mkdtemp(prefix="autoshard-islands-")
    try:
        jobs = []
        for key, name in specs:
            g = graphs[key]
            pins = [] if name == "optimum" else (
                W.input_pins(g, "S(0)") + W.param_pins(
                    g, lambda n, s: "R" if name == "dp" or s[0] % 2 else "S(0)"))
            d = os.path.join(tmp, f"{key}-{name}")
            os.makedirs(d)
            jobs.append({"name": f"{key}/{name}", "model": key,
                         "placements": W.plan(cli_bin, g, mesh, dims, pins, d)})
            with open(os.path.join(d, "report.html"), encoding="utf-8") as f:
                report = f.read()
            data = json.loads(report.split('type="application/json">', 1)[1].split("</script>")[0])
            assert [i["module"] for i in data["islands"]] == [i["module"] for i in g["islands"]]
            assert all(i["nodes"] > 0 for i in data["islands"]), data["islands"]
        per_rank = W.launch(2, mesh, dims, functools.partial(D.run_jobs, jobs=jobs), tmp, 300)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for job in jobs:
        for rank, results in enumerate(per_rank):
            res = next(r for r in results if r["name"] == job["name"])
            where = f"{job['name']} rank {rank}"
            assert res["loss_err"] <= TOL, where
            assert res["grad_err"] and all(e <= TOL for e in res["grad_err"].values()), where
            for n, e in res["param_err"].items():
                assert e <= TOL, f"{where}: {n} after 3 AdamW steps"
            islands = {"moe_loop": ["moe"], "branch": ["block"],
                       "mixtral_loop": [f"model.layers.{i}.mlp.experts" for i in (0, 1)]}
            # each island ran eagerly, on the real routing / branch, in each of the 3 steps
            assert res["islands"] == {m: 3 for m in islands[job["model"]]}, where


def test_trace_cli_reports_decisions_and_islands_and_takes_overrides(tmp_path, capsys):
    import sys

    from autoshard.tracer.cli import main

    (tmp_path / "gate.py").write_text(
        "import torch\n"
        "class Gate(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        h = self.fc(x)\n"
        "        if (h > 10).any().item():\n"
        "            h = h * 2\n"
        "        return h\n"
        "def gate():\n"
        "    return Gate(), (torch.empty(4, 8, device='meta'),)\n")
    argv = [f"{tmp_path / 'gate.py'}:gate", "-o", str(tmp_path / "g.json")]
    try:
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "gate.py:8: item value True (default)" in err
        assert "run eagerly when applied (islands): <root module>" in err
        assert main(argv + ["--data-dependent", "gate.py:8=false"]) == 0
        assert "gate.py:8: item value False (override)" in capsys.readouterr().err
        assert main(argv + ["--data-dependent", "gate.py:9=1"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "autoshard-trace: data_dependent: no data-dependent value at gate.py:9 "
            "(decisions were taken at: gate.py:8)")
    finally:
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


class _Checked(torch.nn.Module):
    """A validation check on the data (Hugging Face's `labels.max() >= vocab_size`) before a
    branch the trace must take by default."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        if (x.abs() > 1e6).any():
            raise ValueError("inputs out of range")
        h = self.fc(x)
        if (h > 0).all():
            h = h * 2
        return h


def test_a_default_that_raises_is_flipped():
    from autoshard.tracer.datadep import DataDependentWarning

    check = _line(_Checked.forward, "(x.abs() > 1e6).any()")
    with pytest.warns(DataDependentWarning, match=f"{check}: taking True there made the step "
                                                  "raise ValueError: inputs out of range"):
        traced = _trace(_Checked(), (torch.empty(4, 8),), lambda o: o.sum())
    assert [(d.value, d.why) for d in traced.data_dependent] == [
        (False, "default flipped"), (True, "default")]
    assert [c.module for c in traced.islands] == [""]  # the second branch's, not the check's
    # an override wins over the flip; a check forced True raises as written
    with pytest.raises(ValueError, match="inputs out of range"):
        _trace(_Checked(), (torch.empty(4, 8),), lambda o: o.sum(),
               data_dependent={check: True})
