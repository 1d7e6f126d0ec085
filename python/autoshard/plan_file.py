"""Reading a plan file for the runtime: placements.json's entries as DTensor placements.

    doc, origin = read_placements("out/placements.json")   # the document, "PATH: " for errors
    plan = load_placements(doc, mesh, origin)              # node -> NodePlan, mesh checked

Every error is a PlanError whose message names the file and the JSON key (for example
`out/placements.json: /placements/mm_3: 3 placements for a 2-D mesh`), so that a hand-edited or
foreign file fails where it is wrong, before anything runs.  The schedule's own entries (order,
twins, redistribution paths) are read by autoshard.schedule; the wrappers here turn its errors
into PlanErrors and check their names against the plan.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh

from . import placements as _pl
from .context_parallel import ContextParallelError, parse_config
from .schedule import ScheduleError, run_order, twin_entries, via_entries

PlacementsArg = Union[str, os.PathLike, Mapping[str, Any]]


class PlanError(ValueError):
    """The placements do not fit the traced graph or the mesh (message names the node)."""


# --- placements -----------------------------------------------------------------------------
def parse_placements(s: str, where: str = "") -> list:
    """'S(0)RP(sum)' (also '_S(0,8)', 'P', 'Shard(0)', '_StridedShard(dim=0, sf=8)',
    'Replicate()', 'Partial(sum)', ', ' separators, one pair of [])
    -> [Shard(0), Replicate(), Partial('sum')] (autoshard.placements.parse); '_S(0,8)' is
    torch's _StridedShard(0, split_factor=8), which the runtime applies as it is."""
    try:
        out = list(_pl.to_dtensor(s))
    except ValueError as e:
        raise PlanError(f"{where}{e}") from None
    return out


def placements_str(ps: Sequence) -> str:
    """[Shard(0), Replicate(), Partial()] -> 'S(0)RP(sum)' (autoshard's short strings)."""
    out = []
    for p in ps:
        if type(p).__name__ == "_StridedShard":  # its is_shard() is False in torch 2.13
            # Even with split factor 1 (a view's, same layout as Shard): says what torch holds.
            out.append(f"_S({p.dim},{int(p.split_factor)})")
        elif p.is_replicate():
            out.append("R")
        elif p.is_shard():
            out.append(f"S({p.dim})")
        elif p.is_partial():
            out.append(f"P({getattr(p, 'reduce_op', 'sum')})")
        else:
            out.append(str(p))
    return "".join(out)


def _output_list(s: str, where: str) -> list:
    """An output entry: 'S(0)R' or a tuple '(S(0)R, None)' -> list (None for no tensor)."""
    t = s.strip()
    if t.startswith("(") and t.endswith(")") and "," in t:
        items = [x.strip() for x in t[1:-1].split(",")]
        return [None if x in ("None", "") else parse_placements(x, where) for x in items]
    return [parse_placements(t, where)]


def planned_paths(schedule: Optional[Mapping[str, Any]], ndim: int, origin: str = "") -> dict:
    """The schedule's "via" entries: edge -> [placements after each collective but the last]."""
    out = {}
    for k, (edge, states) in enumerate(via_entries(schedule)):
        where = f"{origin}/schedule/via/{k}: "
        parsed = [parse_placements(x, where) for x in states]
        if any(len(p) != ndim for p in parsed):
            raise PlanError(f"{where}placements for a {ndim}-dim mesh expected")
        out[edge] = parsed
    return out


def planned_twins(schedule: Optional[Mapping[str, Any]], plan: Mapping[str, Any],
                  origin: str = "") -> dict:
    """The schedule's "twins" (view -> first twin), both names checked against the plan."""
    try:
        twins = twin_entries(schedule)
    except ScheduleError as e:
        raise PlanError(f"{origin}{e}") from None
    for view, first in sorted(twins.items()):
        for n in (view, first):
            if n not in plan:
                raise PlanError(f"{origin}/schedule/twins/{view}: node {n} is not in the placements")
    return twins


def planned_order(gm: torch.fx.GraphModule, names: Mapping[torch.fx.Node, str],
                  schedule: Optional[Mapping[str, Any]],
                  origin: str = "") -> Optional[list]:
    """The nodes of `gm` in the order the plan runs them (autoshard.schedule.run_order: the
    schedule's "order"); None for the graph's own order.  PlanError, naming the file and the
    key, for an order the graph cannot run."""
    try:
        return run_order(gm, names, schedule, origin)
    except ScheduleError as e:
        raise PlanError(f"{origin}{e}") from None


@dataclass
class NodePlan:
    """One node's entry of the plan, parsed: what it produces and what it reads, where."""

    outputs: list            # per output: placements list or None
    inputs: list             # per tensor input (graph JSON order): placements list
    context_parallel: Any = None  # the node's "context_parallel" entry (context_parallel.py)


def read_placements(placements: PlacementsArg) -> tuple[dict, str]:
    """A placements.json path (AutoParallel's schema plus autoshard's fields), or the loaded
    document or its "placements" map -> (the document as a dict, "PATH: " for messages)."""
    if not isinstance(placements, (str, os.PathLike)):
        return dict(placements), ""
    origin = f"{os.fspath(placements)}: "
    with open(placements) as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise PlanError(f"{origin}invalid JSON at byte {e.pos}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{origin}not a JSON object")
    return doc, origin


def load_placements(placements: PlacementsArg, mesh: DeviceMesh,
                    origin: str = "") -> dict[str, NodePlan]:
    """Reads AutoParallel-schema placements (a path, the loaded JSON, or its "placements" map)
    and checks the mesh shape and dim names against `mesh`.  origin: how messages name a
    document already read (read_placements)."""
    if isinstance(placements, (str, os.PathLike)):
        placements, origin = read_placements(placements)
    doc = dict(placements)
    if "placements" in doc:
        shape = doc.get("mesh_shape")
        if shape is not None and list(shape) != list(mesh.shape):
            raise PlanError(f"{origin}/mesh_shape: plan is for mesh {list(shape)}, "
                            f"the mesh is {list(mesh.shape)}")
        names = doc.get("mesh_dim_names")
        if names is not None and mesh.mesh_dim_names is not None and \
                list(names) != list(mesh.mesh_dim_names):
            raise PlanError(f"{origin}/mesh_dim_names: plan has {names}, the mesh "
                            f"{list(mesh.mesh_dim_names)}")
        doc = doc["placements"]
    out = {}
    for name, entry in doc.items():
        where = f"{origin}/placements/{name}: "
        outs = _output_list(entry["output"], where)
        ins = [parse_placements(x, where) for x in entry.get("inputs", [])]
        for p in [*[o for o in outs if o is not None], *ins]:
            if len(p) != mesh.ndim:
                raise PlanError(f"{where}{len(p)} placements for a {mesh.ndim}-D mesh")
        cp = entry.get("context_parallel")
        if cp is not None:
            try:
                cp = parse_config(cp, list(mesh.mesh_dim_names or []), where)
            except ContextParallelError as e:
                raise PlanError(str(e)) from None
        out[name] = NodePlan(outs, ins, cp)
    return out
