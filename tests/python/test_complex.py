"""Complex tensors: rotary embeddings written with torch.polar / view_as_complex /
view_as_real (Meta's reference LLaMA, torchtitan, AutoParallel's llama3) trace with c64 /
c128 dtypes and plan with no op left to the replicated fallback.  Their numerics on gloo are
checked by test_apply.py (model "rotary")."""
import re

import pytest

from conftest import PYTHON_DIR  # noqa: F401  (python/ on sys.path)

torch = pytest.importorskip("torch")

from autoshard.tracer.validate import validate_graph  # noqa: E402

_NO_RULE = re.compile(r"no sharding rule for op '([^']+)'")
TABLES = ("buffer", "forward")


def tiny_config():
    from autoshard.tracer.examples.llama import LlamaConfig

    return LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=64,
                       max_seq_len=8)


def rotary_model(table: str):
    from autoshard.tracer.examples.complex_rotary import ComplexRotaryTransformer

    torch.manual_seed(0)
    return ComplexRotaryTransformer(tiny_config(), table)


def tokens():
    return torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(1))


def ops_of(graph: dict, op: str) -> list:
    return [n for n in graph["nodes"] if n["kind"] == "op" and n["op"].split(".")[0] == op]


def test_complex_dtype_names():
    from autoshard.tracer import _compat

    assert _compat.dtype_name(torch.complex64) == "c64"
    assert _compat.dtype_name(torch.complex128) == "c128"
    assert _compat.dtype_name(torch.complex32) is None  # no graph uses chalf


def test_rotary_matches_the_real_rotation():
    """The example's complex rotation equals rotating (even, odd) pairs with cos / sin."""
    from autoshard.tracer.examples.complex_rotary import apply_complex_rotary, rotary_angles

    x = torch.randn(2, 8, 4, 8, generator=torch.Generator().manual_seed(2))
    ang = rotary_angles(8, 8, 10000.0)
    got = apply_complex_rotary(x, torch.polar(torch.ones_like(ang), ang))
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    want = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(3)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="table must be one of buffer, forward"):
        rotary_model("cache")


@pytest.mark.parametrize("table", TABLES)
def test_complex_rotary_traces(table):
    from autoshard.tracer import export_training_graph
    from autoshard.tracer.examples.complex_rotary import cross_entropy_loss

    tok = tokens()
    graph = export_training_graph(rotary_model(table), (tok,), cross_entropy_loss,
                                  targets=(tok,), name=f"rotary-{table}")
    assert validate_graph(graph) == []
    to_complex, to_real = ops_of(graph, "view_as_complex"), ops_of(graph, "view_as_real")
    # q and k of 2 layers, forward and backward
    assert len(to_complex) == 8 and len(to_real) == 8
    for n in to_complex:
        assert n["outputs"] == [{"shape": [4, 8, n["outputs"][0]["shape"][2], 4],
                                 "dtype": "c64"}], n
    for n in to_real:
        assert n["outputs"][0]["dtype"] == "f32" and n["outputs"][0]["shape"][-1] == 2, n
    muls = [n for n in ops_of(graph, "mul") if n["outputs"][0]["dtype"] == "c64"]
    assert len(muls) == 8
    buffers = {n["name"]: n["outputs"][0] for n in graph["nodes"] if n["kind"] == "buffer"}
    if table == "buffer":
        assert buffers["freqs_cis"] == {"shape": [8, 4], "dtype": "c64"}
        assert ops_of(graph, "polar") == []
    else:
        assert buffers["rope_angles"]["dtype"] == "f32"
        assert [n["outputs"][0] for n in ops_of(graph, "polar")] == [
            {"shape": [8, 4], "dtype": "c64"}]


def plan_rotary(core, table: str, pins: dict, hardware: str = "h100"):
    """Traces and plans the rotary model on 2x2 (dp, tp) with `pins` (node -> placements);
    -> (graph dict, plan, placements)."""
    from autoshard import AutoParallel

    options = core.planner_options(time_limit_s=30, threads=1)
    model = rotary_model(table)
    mesh = core.Mesh([2, 2], ["dp", "tp"], hardware=hardware)
    with AutoParallel(model, tokens, mesh, options=options, name=f"rotary-{table}") as autop:
        opt = autop.build()
        for node, placements in pins.items():
            opt.add_node_constraint(node, placements)
        plan = opt.get_solution()
        return autop.graph_dict, plan, opt.get_placements(plan)


def megatron_pins(graph: dict) -> dict:
    """Column-parallel q/k/v (heads split over tp), row-parallel output projection."""
    pins = {}
    for n in graph["nodes"]:
        if n["kind"] == "parameter" and ".attention.w" in n["name"]:
            pins[n["name"]] = "RS(1)" if n["name"].endswith("wo.weight") else "RS(0)"
    return pins


def pair_dim_sharded(placement: str, rank: int) -> bool:
    return f"S({rank - 1})" in placement


@pytest.mark.parametrize("table", TABLES)
def test_complex_rotary_plans_sharded(core, table, tmp_path):
    import json

    from _apply_worker import SLOW_COMPUTE

    graph, plan, _ = plan_rotary(core, table, {})
    assert plan.has_solution and [w for w in plan.warnings if _NO_RULE.search(w)] == []
    pins = megatron_pins(graph)
    assert len(pins) == 8
    pins["tokens"] = "S(0)R"
    # On slow compute (test_apply.py's toy device) sharding pays even at these sizes.
    hardware = tmp_path / "slow.json"
    hardware.write_text(json.dumps(SLOW_COMPUTE))
    graph, plan, placements = plan_rotary(core, table, pins, str(hardware))
    assert plan.has_solution, plan.status
    assert sorted({m.group(1) for w in plan.warnings for m in [_NO_RULE.search(w)] if m}) == []
    # The real/imaginary pair dim is never split: not at view_as_complex's input, not at
    # view_as_real's output.
    for n in ops_of(graph, "view_as_complex"):
        rank = len(n["outputs"][0]["shape"]) + 1
        assert not pair_dim_sharded(placements[n["name"]]["inputs"][0], rank), n["name"]
    for n in ops_of(graph, "view_as_real"):
        rank = len(n["outputs"][0]["shape"])
        assert not pair_dim_sharded(placements[n["name"]]["outputs"][0], rank), n["name"]
    # The rotation itself runs on shards: every complex multiply of the forward and backward.
    muls = [n for n in ops_of(graph, "mul") if n["outputs"][0]["dtype"] == "c64"]
    assert len(muls) == 8
    assert all("S(" in placements[n["name"]]["outputs"][0] for n in muls)


def test_complex128_traces_and_plans(core):
    """A c128 (16-byte) rotation: the tracer names it, the planner reads and plans it."""
    from autoshard import AutoParallel

    class Rot128(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            ang = torch.arange(4, dtype=torch.float64)
            self.register_buffer("rot", torch.polar(torch.ones_like(ang), ang))

        def forward(self, x):
            z = torch.view_as_complex(self.lin(x).reshape(x.shape[0], 4, 2))
            z = (z.to(torch.complex128) * self.rot).to(torch.complex64)
            return torch.view_as_real(z).flatten(1)

    options = core.planner_options(time_limit_s=30, threads=1)
    with AutoParallel(Rot128(), lambda: torch.randn(8, 8), core.Mesh([2], ["dp"]),
                      options=options, name="rot128") as autop:
        plan = autop.build().get_solution()
        graph = autop.graph_dict
    assert plan.has_solution, plan.status
    assert [w for w in plan.warnings if _NO_RULE.search(w)] == []
    buffers = [n["outputs"][0] for n in graph["nodes"] if n["kind"] == "buffer"]
    assert buffers == [{"shape": [4], "dtype": "c128"}]
    assert any(n["outputs"][0]["dtype"] == "c128" for n in ops_of(graph, "mul"))
