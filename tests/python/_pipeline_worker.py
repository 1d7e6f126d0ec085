"""Models, plans and the per-rank worker of test_pipeline.py (importable by spawned processes)."""
from __future__ import annotations

import copy
import faulthandler
import json
import os
import sys
from typing import Optional, Sequence

import torch

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)
import _apply_worker as W

GLOBAL_BATCH = 8
MICROBATCHES = 4
SEQ = 8


def make_llama4(batch: int = GLOBAL_BATCH):
    """A 4-layer LLaMA (hidden 16, 4 heads, 2 KV heads), seeded weights, `batch` sequences."""
    from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=16, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=64,
                      max_seq_len=SEQ)
    model = Transformer(cfg)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (GLOBAL_BATCH, SEQ), generator=g)
    labels = torch.randint(0, 64, (GLOBAL_BATCH, SEQ), generator=g)
    return model, (tokens[:batch],), (labels[:batch],), cross_entropy_loss


def trace_microbatch(microbatches: int = MICROBATCHES):
    """The training step of ONE microbatch (the graph a pipelined plan is made for)."""
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict

    model, inputs, targets, loss_fn = make_llama4(GLOBAL_BATCH // microbatches)
    traced = trace_for_apply(model, inputs, loss_fn, targets)
    return traced, to_graph_dict(traced)


# --- the fixture: a plan on the sub-mesh plus a "pipeline" section (PIPELINE_FORMAT.md) -------
def _layer(node: dict) -> Optional[int]:
    parts = (node.get("module") or "").split(".")
    if len(parts) > 1 and parts[0] == "layers" and parts[1].isdigit():
        return int(parts[1])
    return None


def node_stages(graph: dict, n_stages: int) -> dict:
    """Every node's stage as PIPELINE_FORMAT.md defines it: layers split evenly in order;
    ops before the first layer (forward) or after the last layer's backward on stage 0, the
    ones after the last layer (forward) or before the first layer's backward on the last;
    parameters and inputs with their consumers, buffers -1 (every stage that uses them)."""
    nodes = graph["nodes"]
    n_layers = 1 + max(_layer(n) for n in nodes if _layer(n) is not None)
    per = n_layers // n_stages
    out: dict = {}
    seen = {"forward": False, "backward": False}
    for n in nodes:
        if n.get("kind") != "op":
            continue
        layer, phase = _layer(n), n.get("phase", "forward")
        if layer is not None:
            out[n["name"]] = min(layer // per, n_stages - 1)
            seen[phase] = True
        elif phase == "forward":
            out[n["name"]] = n_stages - 1 if seen["forward"] else 0
        else:
            out[n["name"]] = 0 if seen["backward"] else n_stages - 1
    consumers: dict = {}
    for n in nodes:
        for ref in n.get("inputs", []):
            src = ref if isinstance(ref, str) else ref["node"]
            if n["name"] in out and n.get("phase", "forward") == "forward":
                consumers.setdefault(src, set()).add(out[n["name"]])
    for n in nodes:
        if n.get("kind") == "op":
            continue
        users = consumers.get(n["name"], set())
        if n.get("kind") == "buffer" or len(users) != 1:
            out[n["name"]] = -1
        else:
            out[n["name"]] = next(iter(users))
    return out


def add_pipeline(doc: dict, graph: dict, n_stages: int, schedule: str, microbatches: int) -> dict:
    """A plan over the sub-mesh (no pp dim) -> the plan over [P, *sub] with a "pipeline"
    section and per-node stages, R on the pp position (the format the planner writes)."""
    out = copy.deepcopy(doc)
    out["mesh_shape"] = [n_stages, *doc["mesh_shape"]]
    out["mesh_dim_names"] = ["pp", *doc["mesh_dim_names"]]

    def add_r(spec: str) -> str:
        t = spec.strip()
        if t.startswith("(") and "," in t:
            return "(" + ", ".join(x if x.strip() in ("None", "") else "R" + x.strip()
                                   for x in t[1:-1].split(",")) + ")"
        return "R" + t
    stages = node_stages(graph, n_stages)
    for name, entry in out["placements"].items():
        entry["output"] = add_r(entry["output"])
        entry["inputs"] = [add_r(x) for x in entry.get("inputs", [])]
        entry["stage"] = stages[name]
    n_layers = 1 + max(_layer(n) for n in graph["nodes"] if _layer(n) is not None)
    per = n_layers // n_stages
    out["pipeline"] = {
        "mesh_dim": "pp", "schedule": schedule, "microbatches": microbatches,
        "stages_per_rank": 1,
        "stages": [{"index": s, "pp_rank": s, "layers": [f"layers.{i}" for i in
                                                         range(s * per, (s + 1) * per)],
                    "first": s == 0, "last": s == n_stages - 1} for s in range(n_stages)]}
    return out


# --- the worker -----------------------------------------------------------------------------
def run_pipeline(mesh, placements: dict, steps: int = 3, lr: float = 1e-2) -> dict:
    """Builds this rank's stages, runs `steps` AdamW steps on the full batch, compares with the
    single-process reference: loss (last stage), first-step gradients, final parameters."""
    faulthandler.dump_traceback_later(240, exit=True, file=sys.stderr)
    from autoshard.pipeline import apply_pipeline

    traced, graph = trace_microbatch(placements["pipeline"]["microbatches"])
    model, inputs, targets, loss_fn = make_llama4()
    ref_losses, ref_grads, ref_params = W._reference(model, inputs, targets, loss_fn, steps, lr)
    pipe = apply_pipeline(model, placements, mesh, traced=traced, graph=graph)
    opt = torch.optim.AdamW(pipe.parameters(), lr=lr)
    res: dict = {"loss_err": [], "grad_err": {}, "param_err": {},
                 "stages": [s.index for s in pipe.stages]}
    for i in range(steps):
        loss = pipe.step(*inputs, *targets)
        if loss is not None:
            res["loss_err"].append(abs(loss.item() - ref_losses[i]) / abs(ref_losses[i]))
        if i == 0:
            for n, p in pipe.named_parameters():
                res["grad_err"][n] = W.rel_err(p.grad.full_tensor(), ref_grads[n])
        opt.step()
        opt.zero_grad()
    for n, p in pipe.named_parameters():
        res["param_err"][n] = W.rel_err(p.detach().full_tensor(), ref_params[n])
    faulthandler.cancel_dump_traceback_later()
    return res
