"""The per-rank worker of test_checkpoint.py (importable by spawned processes).

One launch (_apply_worker.launch) runs every case on its mesh:
  resume:  a plan-A module trains 2 AdamW steps, is saved, trains 2 more (the uninterrupted
           run); a plan-B module (other initial weights, a fresh AdamW) loads the checkpoint
           and trains 2 steps; so does the plan-A module, reloaded.
  full:    a plain model's state_dict loaded into a module (load_full_state_dict), one AdamW
           step, exported with full_state_dict and compared with the eager single-process step.
  errors:  the messages of the refused inputs.
"""
from __future__ import annotations

import copy
import os
import time
from typing import Any

import torch

import _apply_worker as W
from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)

LR = 1e-2


def _reweighted(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A copy of `model` with other weights (the same on every rank)."""
    model = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def _train(module, opt, inputs, targets, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        loss = module(*module.shard_inputs(*inputs, *targets))
        loss.backward()
        losses.append(loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item())
        opt.step()
        opt.zero_grad()
    return losses


def _same(a: dict, b: dict) -> list[str]:
    """Keys whose tensors differ bitwise."""
    return [k for k in a if not torch.equal(a[k], b[k])]


def _error(fn) -> str:
    try:
        fn()
    except Exception as e:  # the message is what the test checks
        return f"{type(e).__name__}: {e}"
    return "no error"


def run_cases(mesh, job: dict, ckpt_dir: str) -> dict:
    from autoshard import checkpoint as C
    from autoshard.apply import apply_placement, placements_str

    os.makedirs(ckpt_dir, exist_ok=True)
    res: dict[str, Any] = {"timings": {}}
    t0 = time.perf_counter()
    traced_graph = W.trace(job["model"])
    res["timings"]["trace_s"] = time.perf_counter() - t0
    model, inputs, targets, loss_fn = W.MODELS[job["model"]]()
    other = _reweighted(model, 7)

    def make(placements, weights):
        traced, graph = traced_graph
        t = time.perf_counter()
        m = apply_placement(weights, placements, mesh, traced=traced, graph=graph)
        res["timings"].setdefault("apply_s", []).append(time.perf_counter() - t)
        return m

    # --- resume -------------------------------------------------------------------------
    # Plan A: 2 steps, saved, 2 more (saving must not disturb it): the uninterrupted run.
    a = make(job["plan_a"], model)
    opt_a = torch.optim.AdamW(a.parameters(), lr=LR)
    res["ref_losses"] = _train(a, opt_a, inputs, targets, 2)
    path = os.path.join(ckpt_dir, "ckpt")
    t = time.perf_counter()
    C.save(path, a, opt_a, step=2, extra={"note": "plan A"})
    C.save(path, a, opt_a, step=2, extra={"note": "plan A"})  # over an existing one
    res["timings"]["save_s"] = (time.perf_counter() - t) / 2
    res["leftovers"] = sorted(n for n in os.listdir(ckpt_dir) if n != "ckpt")
    saved = C.full_state_dict(a)
    whole = C.read_full_state_dict(path)  # every element where DCP's offsets put it
    res["read_full_keys_ok"] = sorted(whole) == sorted(saved)
    res["read_full_differs"] = _same(whole, saved) if res["read_full_keys_ok"] else ["keys"]
    res["ref_losses"] += _train(a, opt_a, inputs, targets, 2)

    # Plan B, other initial weights, a fresh AdamW (another lr: the checkpoint's wins).
    b = make(job["plan_b"], other)
    res["placements_a"] = {n: placements_str(p.placements) for n, p in a.named_parameters()}
    res["placements_b"] = {n: placements_str(p.placements) for n, p in b.named_parameters()}
    opt_b = torch.optim.AdamW(b.parameters(), lr=LR * 10)
    t = time.perf_counter()
    info = C.load(path, b, opt_b)
    res["timings"]["load_s"] = time.perf_counter() - t
    res["info"] = {k: info[k] for k in ("step", "extra", "mesh_shape", "format")}
    res["info_placements_ok"] = all(info["placements"][n] == p
                                    for n, p in res["placements_a"].items())
    res["loaded_differs"] = _same(C.full_state_dict(b), saved)
    res["lr_after_load"] = opt_b.param_groups[0]["lr"]
    res["b_losses"] = _train(b, opt_b, inputs, targets, 2)

    # Plan A again: the module that went on (its parameters and AdamW state overwritten).
    C.load(path, a, opt_a)
    res["a_losses"] = _train(a, opt_a, inputs, targets, 2)
    res["timings"]["resume_s"] = time.perf_counter() - t0
    # The module's state_dict keys are the model's (full_state_dict of a sharded module).
    res["extra_keys"] = sorted(set(C.full_state_dict(a)) ^ set(model.state_dict()))

    # --- full state dict round trip ------------------------------------------------------
    t = time.perf_counter()
    traced_graph = W.trace(job["full_model"])
    model, inputs, targets, loss_fn = W.MODELS[job["full_model"]]()
    pretrained = _reweighted(model, 11)
    c = make(job["full_plan"], model)
    C.load_full_state_dict(c, pretrained.state_dict())
    opt_c = torch.optim.AdamW(c.parameters(), lr=LR)
    loss = _train(c, opt_c, inputs, targets, 1)[0]
    exported = C.full_state_dict(c)
    ref = copy.deepcopy(pretrained)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=LR)
    ref_loss = loss_fn(ref(*inputs), *targets)
    ref_loss.backward()
    opt_ref.step()
    ref_sd = ref.state_dict()
    res["full_keys_ok"] = sorted(exported) == sorted(ref_sd)
    res["full_loss_err"] = abs(loss - ref_loss.item()) / abs(ref_loss.item())
    res["full_param_err"] = {k: W.rel_err(exported[k], ref_sd[k]) for k in ref_sd}
    res["full_plain_types"] = sorted({type(v).__name__ for v in exported.values()})
    res["full_aliases"] = [n for n, p in c.named_parameters() if exported[n].untyped_storage()
                           .data_ptr() == p.to_local().untyped_storage().data_ptr()]
    plain = copy.deepcopy(model)
    plain.load_state_dict(exported)  # strict: the keys are the plain model's
    res["plain_load_ok"] = all(torch.equal(plain.state_dict()[k], exported[k]) for k in exported)
    res["timings"]["full_s"] = time.perf_counter() - t

    res.update(_odd_strided(mesh, ckpt_dir))

    # --- refused inputs ------------------------------------------------------------------
    sd = pretrained.state_dict()
    key = next(iter(sd))
    res["err_missing"] = _error(lambda: C.load_full_state_dict(
        c, {k: v for k, v in sd.items() if k != key}))
    res["err_unexpected"] = _error(lambda: C.load_full_state_dict(
        c, {**sd, "bogus.weight": sd[key]}))
    shape_key = next(k for k, v in sd.items() if v.ndim == 2)
    res["err_shape"] = _error(lambda: C.load_full_state_dict(
        c, {**sd, shape_key: torch.zeros(sd[shape_key].shape[0] + 1, sd[shape_key].shape[1])}))
    res["shape_key"], res["missing_key"] = shape_key, key
    res["unchanged_after_errors"] = _same(C.full_state_dict(c), exported)
    res["err_partial"] = _error(lambda: C.load_full_state_dict(_partial_module(mesh), {
        "weight": torch.zeros(4, 4)}))
    res["err_save_partial"] = _error(lambda: C.save(os.path.join(ckpt_dir, "p"),
                                                    _partial_module(mesh)))
    res["err_ckpt_missing"] = _error(lambda: C.load(path, _partial_module(mesh, partial=False)))
    return res


def _odd_strided(mesh, ckpt_dir: str) -> dict:
    """A parameter at `_S(0,2)` on mesh dim 0 (a 1-D mesh) or `_S(0,2)R` whose split factor fits
    no shard order: each rank holds two blocks of rows (rank 0 of 2: rows 0-1 and 4-5), which
    DCP's chunk (first offset, local shape) cannot describe.  Saved, read whole, and loaded
    into the default order and into the same layout; -> which of those differ from the
    original (lists of keys)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    from autoshard import checkpoint as C

    full = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)
    rest = [Replicate()] * (mesh.ndim - 1)
    strided = [_StridedShard(0, split_factor=2), *rest]
    path = os.path.join(ckpt_dir, "odd")
    C.save(path, _module_at(mesh, strided, full))
    out = {"odd_read_full": _same(C.read_full_state_dict(path), {"weight": full})}
    for name, placements in (("odd_into_default", [Shard(0), *rest]), ("odd_into_odd", strided)):
        m = _module_at(mesh, placements, torch.zeros_like(full))
        C.load(path, m)
        out[name] = _same(C.full_state_dict(m), {"weight": full})
    return out


def _module_at(mesh, placements: list, full: torch.Tensor) -> torch.nn.Module:
    """A module whose one parameter 'weight' is `full` cut to `placements`."""
    from autoshard.local import local_slice

    m = torch.nn.Module()
    m.weight = torch.nn.Parameter(local_slice(full, mesh, placements))
    return m


def _partial_module(mesh, partial: bool = True) -> torch.nn.Module:
    """A module whose one parameter 'weight' is a DTensor, Partial over mesh dim 0 (or not)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    m = torch.nn.Module()
    ps = [Partial() if partial else Replicate()] + [Replicate()] * (mesh.ndim - 1)
    m.weight = torch.nn.Parameter(DTensor.from_local(torch.zeros(4, 4), mesh, ps,
                                                     run_check=False))
    return m
