"""The zoo's quick subset: one model per family, and one per kind of code issue 40 added
(complex rotary, expert loop over `nonzero`, CTC speech, LSTM / GRU), traced and planned on a
2x4 mesh through autoshard.AutoParallel with no op planned replicated for want of a sharding
rule.  bench/zoo_bench.py runs every entry of zoo_models.ZOO (table: docs/zoo.md, which must
list every entry)."""
import os
import re

import pytest

from conftest import PYTHON_DIR  # noqa: F401  (python/ on sys.path)

torch = pytest.importorskip("torch")

import zoo_models as Z  # noqa: E402

# One fast, representative architecture per family (about 1 s each to trace and plan).
QUICK = ["llama", "bert", "t5", "vit", "mixtral"]
# One per kind of issue 40 (about 1-4 s each).
QUICK_KINDS = {Z.COMPLEX_ROTARY: "meta_llama", Z.EXPERT_LOOP: "mixtral_loop", Z.CTC: "hubert_ctc",
               Z.RNN: "lstm_lm"}


def test_zoo_list_covers_every_family_and_kind():
    assert len(Z.ZOO) >= 80
    assert len(Z.BY_NAME) == len(Z.ZOO)  # names are unique
    assert {e.family for e in Z.ZOO} == {Z.DECODER, Z.ENCODER, Z.ENC_DEC, Z.VISION, Z.MOE,
                                         Z.SPEECH, Z.RECURRENT}
    assert sum(e.family == Z.MOE for e in Z.ZOO) >= 2
    per_kind = {k: sum(e.kind == k for e in Z.ZOO) for k in Z.KINDS}
    assert per_kind[Z.COMPLEX_ROTARY] >= 3 and per_kind[Z.EXPERT_LOOP] >= 3, per_kind
    assert per_kind[Z.CTC] >= 2 and per_kind[Z.RNN] >= 2, per_kind
    assert {e.kind for e in Z.ZOO} == {"", *Z.KINDS}
    assert set(QUICK) | set(QUICK_KINDS.values()) <= set(Z.BY_NAME)
    assert all(Z.BY_NAME[n].kind == k for k, n in QUICK_KINDS.items())


def test_docs_zoo_table_lists_every_entry():
    """docs/zoo.md's results table (bench/zoo_bench.py --write-doc) has one row per entry,
    in ZOO's order, each planned with full coverage (status optimal or feasible, 0 fallbacks)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "zoo.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    table = text.split("<!-- zoo-table:begin -->")[1].split("<!-- zoo-table:end -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| model ")]
    assert [r[0] for r in rows] == [e.name for e in Z.ZOO]
    for r in rows:
        assert r[-1] in ("optimal", "feasible") and r[-2] == "0", r
    assert re.search(rf"\b{len(Z.ZOO)}/{len(Z.ZOO)} planned with full coverage", table)


def test_tracing_reports_compiling_and_restores_it():
    """HF's masks read tensor values (`mask.all()`) unless torch.compiler.is_compiling(): the
    trace sets the flag (as torch.export's non-strict tracing does), on meta nothing could
    answer them, and puts it back afterwards, also when the model raises."""
    from autoshard.tracer.trace import trace_training_step

    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            if not torch.compiler.is_compiling() and bool((x > 0).all()):  # .item() on meta
                return self.lin(x) * 0
            return self.lin(x)

    class Raises(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("model failed")

    before = torch.compiler.is_compiling()
    traced = trace_training_step(DataDependent(), torch.randn(4, 8))
    ops = [str(n.target) for n in traced.gm.graph.nodes if n.op == "call_function"]
    assert any("addmm" in op for op in ops)
    assert torch.compiler.is_compiling() == before
    with pytest.raises(RuntimeError, match="model failed"):
        trace_training_step(Raises(), torch.randn(4, 8))
    assert torch.compiler.is_compiling() == before


@pytest.mark.parametrize("name", QUICK)
def test_zoo_model_plans_with_full_coverage(core, name):
    pytest.importorskip("transformers")
    entry = Z.BY_NAME[name]
    res = Z.plan_entry(entry, time_limit_s=30)
    assert res.error == "", res.error
    assert res.status in ("optimal", "feasible")
    assert res.op_nodes > 300  # forward, loss and backward of 2 layers
    assert res.fallback_ops == []


@pytest.mark.parametrize("kind", sorted(QUICK_KINDS))
def test_zoo_kind_plans_with_full_coverage(core, kind):
    """The code of each kind reached the graph: complex64 tensors of the rotary, the expert
    loop's `nonzero` at its upper bound (every expert hit), the CTC loss and its backward,
    the recurrent cell's gate split; and the plan has no fallback."""
    pytest.importorskip("transformers")
    res = Z.plan_entry(Z.BY_NAME[QUICK_KINDS[kind]], time_limit_s=30)
    assert res.error == "", res.error
    assert res.status in ("optimal", "feasible")
    assert res.fallback_ops == []
    if kind == Z.COMPLEX_ROTARY:
        assert "c64" in res.dtypes and "view_as_complex" in res.ops
    elif kind == Z.EXPERT_LOOP:
        assert "nonzero" in res.ops
        # every one of the 4 experts + the sentinel class of HF's one_hot is hit
        assert "nonzero: 5 (upper bound)" in res.data_dependent
    elif kind == Z.CTC:
        assert {"_ctc_loss.Tensor", "_ctc_loss_backward.Tensor", "convolution"} <= set(res.ops)
    else:
        assert "unsafe_split.Tensor" in res.ops


def test_zoo_plan_shards_parameters_under_memory_constraint(core):
    """With AutoParallel's add_parameter_memory_constraint() every parameter's placement is
    chosen among sharded ones: the plan keeps at most 1/8 of the parameter bytes per device."""
    pytest.importorskip("transformers")
    res = Z.plan_entry(Z.BY_NAME["gpt2"], time_limit_s=20, param_memory=True)
    assert res.error == "" and res.fallback_ops == []
    assert res.param_fraction <= 1 / 8 + 1e-9
    unconstrained = Z.plan_entry(Z.BY_NAME["gpt2"], time_limit_s=20)
    assert unconstrained.param_fraction > res.param_fraction


def test_parameter_fraction_counts_sharded_mesh_dims():
    nodes = [{"name": "w", "kind": "parameter", "outputs": [{"shape": [8, 4]}]},
             {"name": "b", "kind": "parameter", "outputs": [{"shape": [32]}]},
             {"name": "x", "kind": "input", "outputs": [{"shape": [8, 8]}]}]
    plan = {"w": {"outputs": ["S(0)S(1)"]}, "b": {"outputs": ["RR"]}, "x": {"outputs": ["RR"]}}
    assert Z.parameter_fraction(nodes, plan, [2, 4]) == pytest.approx((32 / 8 + 32) / 64)
    plan["b"] = {"outputs": ["RS(0)"]}
    assert Z.parameter_fraction(nodes, plan, [2, 4]) == pytest.approx((4 + 8) / 64)
    with pytest.raises(ValueError, match="parameter w"):
        Z.parameter_fraction(nodes, {**plan, "w": {"outputs": ["S(0)"]}}, [2, 4])
