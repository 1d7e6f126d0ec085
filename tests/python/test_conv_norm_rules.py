"""Group norm, weight norm, the upsample family and LSTM gates plan with sharding rules (issue
40, item 4).

Three small conv nets and a 2-layer nn.LSTM are traced with autoshard.tracer: one with nn.GroupNorm
(native_group_norm and its backward), one weight-normed conv (both weight-norm APIs trace to
_weight_norm_interface and its backward) and one calling F.interpolate in bicubic, linear,
trilinear and nearest 1d/3d modes (upsample_* and upsample_*_backward), and the LSTM (its cells
split the gates with unsafe_split, 12 nodes for 2 layers over 6 steps).  Every op must have a
rule (`autoshard strategies` reports no fallback, and each of these ops offers a sharded
strategy), and the plan must carry no "no sharding rule" warning.  The runtime's DTensor
strategies for convolution and its backward (autoshard.dtensor_rules) are checked equal to the
planner's rows.  About 5 s in all.
"""
import json
import os
import subprocess

import pytest

from conftest import PYTHON_DIR  # noqa: F401  (python/ on sys.path)

torch = pytest.importorskip("torch")
from _apply_worker import LastStepLSTM  # the same model the applied LSTM test runs  # noqa: E402
nn = torch.nn
F = torch.nn.functional


class GroupNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(F.relu(self.norm(self.conv(x))).mean((2, 3)))


class WeightNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3, padding=1))
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        with pytest.warns(FutureWarning):  # the deprecated API traces to the same ops
            nn.utils.weight_norm(self.conv2)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.conv2(F.relu(self.conv(x))).mean((2, 3)))


class UpsampleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2, mode="bicubic", align_corners=False)
        line = y[:, :, 0]                      # [N, C, W]
        vol = y.unsqueeze(2).expand(-1, -1, 2, -1, -1)  # [N, C, 2, H, W]
        pooled = (y.mean((2, 3))
                  + F.interpolate(line, scale_factor=2, mode="linear").mean(2)
                  + F.interpolate(line, scale_factor=2, mode="nearest").mean(2)
                  + F.interpolate(vol, scale_factor=2, mode="trilinear").mean((2, 3, 4))
                  + F.interpolate(vol, scale_factor=2, mode="nearest").mean((2, 3, 4)))
        return self.head(pooled)


#: model -> ops its training step must contain, each planned with a rule.
CASES = {
    "lstm": (LastStepLSTM, {"unsafe_split"}),
    "group_norm": (GroupNormNet, {"native_group_norm", "native_group_norm_backward"}),
    "weight_norm": (WeightNormNet, {"_weight_norm_interface", "_weight_norm_interface_backward"}),
    "upsample": (UpsampleNet, {"upsample_bicubic2d", "upsample_bicubic2d_backward",
                               "upsample_linear1d", "upsample_linear1d_backward",
                               "upsample_nearest1d", "upsample_nearest1d_backward",
                               "upsample_trilinear3d", "upsample_trilinear3d_backward",
                               "upsample_nearest3d", "upsample_nearest3d_backward"}),
}


def _graph(name):
    from autoshard.tracer import export_training_graph

    torch.manual_seed(0)
    model_cls, _ = CASES[name]
    x = torch.randn(4, 6, 3) if name == "lstm" else torch.randn(4, 3, 8, 8)
    return export_training_graph(model_cls(), (x,), lambda out: out.sum(), name=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_ops_have_rules_and_shard(cli_bin, tmp_path, name):
    graph = _graph(name)
    _, wanted = CASES[name]
    ops = {n["op"].split(".")[0] for n in graph["nodes"] if n["kind"] == "op"}
    assert wanted <= ops, f"the trace no longer emits {sorted(wanted - ops)}"
    path = os.path.join(tmp_path, f"{name}.graph.json")
    with open(path, "w") as f:
        json.dump(graph, f)
    out = json.loads(subprocess.run([cli_bin, "strategies", "--graph", path, "--mesh", "2x2"],
                                    check=True, capture_output=True, text=True,
                                    timeout=60).stdout)
    fallback = sorted({e["op"] for e in out.values() if e["fallback"]})
    assert fallback == []
    for node, entry in out.items():
        if entry["op"].split(".")[0] not in wanted:
            continue
        sharded = [s for s in entry["strategies"]
                   if any("S(" in p for p in s["outputs"] + s["inputs"])]
        assert sharded, f"{node} ({entry['op']}): replicated only"


@pytest.mark.parametrize("name", sorted(CASES))
def test_plans_without_replicated_fallback(core, name):
    graph = core.Graph.from_dict(_graph(name))
    opt = core.plan_graph(graph, core.Mesh([2, 2], ["dp", "tp"]), time_limit_s=10, threads=1)
    plan = opt.get_solution()
    assert plan.has_solution
    assert [w for w in plan.warnings if "no sharding rule" in w] == []


class ConvZoo(nn.Module):
    """Conv2d with bias and padding, a bias-free Conv1d over its rows and a ConvTranspose2d:
    every convolution row kind (plain / no bias / transposed) and their backwards."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.conv1d = nn.Conv1d(8, 8, 3, padding=1, bias=False)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x):
        h = F.relu(self.conv(x))
        n, c, hh, w = h.shape
        h = self.conv1d(h.reshape(n, c, hh * w)).reshape(n, c, hh, w)
        return self.up(h)


def test_dtensor_convolution_strategies_are_the_planners(cli_bin, tmp_path):
    """autoshard.dtensor_rules registers for convolution and convolution_backward exactly the
    planner's rows (nn_rules.cc): on a mesh of 2, DTensor's candidates (input placements
    enumerated) and `autoshard strategies` are the same sets, both ways.  Outputs the step
    does not compute (grad_input of the first conv: output_mask False) are dropped on both
    sides (DTensor: None; the planner: an empty [0] output)."""
    import _dtensor_ref
    import _strategy_ref
    from autoshard.apply import graph_names
    from autoshard.dtensor_rules import ensure_registered
    from autoshard.tracer.export import to_graph_dict
    from autoshard.tracer.trace import trace_training_step

    ensure_registered()
    torch.manual_seed(0)
    traced = trace_training_step(ConvZoo(), (torch.randn(4, 4, 6, 6),), lambda out: out.sum())
    graph = to_graph_dict(traced)
    path = os.path.join(tmp_path, "conv.graph.json")
    with open(path, "w") as f:
        json.dump(graph, f)
    ours = json.loads(subprocess.run([cli_bin, "strategies", "--graph", path, "--mesh", "2"],
                                     check=True, capture_output=True, text=True,
                                     timeout=60).stdout)
    nodes = {n["name"]: n for n in graph["nodes"]}
    values = _strategy_ref.node_values(traced.gm, traced.flat_args)
    mesh = _dtensor_ref.device_mesh((2,))
    checked = 0
    for node, name in graph_names(traced.gm, graph, traced.placeholder_names).items():
        if ours.get(name, {}).get("op") not in ("convolution", "convolution_backward"):
            continue
        live = [o["shape"] != [0] for o in nodes[name]["outputs"]]
        mine = {(tuple(p for p, keep in zip(s["outputs"], live) if keep), tuple(s["inputs"]))
                for s in ours[name]["strategies"]}
        theirs = {(tuple(o for o in outs if o is not None), ins)
                  for outs, ins in _strategy_ref.dtensor_candidates(node, mesh, values)}
        assert theirs == mine, name
        checked += 1
    assert checked == 6  # three convolutions and their backwards
