"""Replaying a lowered step through the simulator's cost model: the executed schedule, priced.

    sim = read_simulation("out/trace.json")             # `autoshard plan -o out/` wrote it
    r = replay_step([step.split.forward.graph, step.split.backward.graph], mesh, sim)
    print(r.step_us, sim.step_us)                       # the runtime's order vs the plan's

The planner's simulator (C++ planner/simulate.h) lays the plan out on a compute stream and
one communication stream per mesh dim, with the schedule the plan file carries (prefetch
points, buckets, gradient reductions).  The runtime executes a different artifact: the
lowered per-rank FX graph, whose node order, collective issue points, wait points and
merged (bucketed) collectives are what actually runs.  This module prices that artifact with
the same figures -- each planned op's compute time as the simulator charged it (at its first
lowered op that is not part of a redistribution), each
collective the graph issues by the collective cost model (`autoshard.core.collective_time_us`
on its real byte count and mesh dim) -- and runs the same stream rules over the graph's own
order: an op starts when the previous op ended and every collective it waits for has
finished; a collective starts when it is issued and its mesh dim's stream is free (FIFO, one
communicator per dim).  Where the two step times agree, the runtime runs the schedule the
objective optimised; where they differ, the difference is a schedule the runtime did not
follow (an exposed gather, a split bucket, a reduction issued late).

Nothing here runs a collective: the graphs may be lowered on meta tensors with the fake
process group, at real model sizes.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import torch
import torch.fx

from .inflight import is_wait
from .lower import GATHER_AS_SUM, META_KEY, collective_kind

#: A collective's price: (kind, bytes per device, mesh dim) -> microseconds.
PriceFn = Callable[[str, float, int], float]


@dataclass
class Simulation:
    """What the planner's simulator reported for a plan (its trace.json)."""

    step_us: float
    comm_model: str
    mesh_shape: list
    mesh_dims: list
    hardware: str
    #: (planned node, phase category) -> compute durations in the order the simulator ran
    #: them (a recomputed forward op appears again under its recompute category).
    compute_us: dict = field(default_factory=dict)


@dataclass
class Replay:
    """A lowered step priced on the simulator's streams (microseconds)."""

    step_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    collectives: int
    #: collectives whose wait found them already finished (fully hidden behind compute)
    hidden: int
    #: per collective: (edge, kind, mesh dim, issued, started, finished, waited), in issue order
    events: list = field(default_factory=list)
    #: per planned op charged: (planned node, start, end), in run order
    compute: list = field(default_factory=list)


def read_simulation(trace_path: str | os.PathLike) -> Simulation:
    """Reads the simulator's Chrome trace (`autoshard plan -o DIR` writes DIR/trace.json): its
    step time, mesh and comm model ("otherData") and every compute event."""
    with open(trace_path) as f:
        trace = json.load(f)
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    missing = [k for k in ("step_us", "mesh_shape", "mesh_dim_names", "hardware", "comm_model")
               if k not in other]
    if missing:
        raise ValueError(f"{trace_path}: otherData has no {missing[0]} (a trace written by "
                         f"`autoshard plan -o` of this version)")
    compute: dict = defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("tid") == 0:
            compute[(e["args"]["node"], e.get("cat", ""))].append(float(e["dur"]))
    return Simulation(step_us=float(other["step_us"]), comm_model=other["comm_model"],
                      mesh_shape=list(other["mesh_shape"]),
                      mesh_dims=list(other["mesh_dim_names"]), hardware=other["hardware"],
                      compute_us=dict(compute))


def core_price(sim: Simulation) -> PriceFn:
    """The C++ collective cost model on the plan's mesh, as the simulator prices collectives."""
    from . import core

    mesh = core.Mesh(sim.mesh_shape, sim.mesh_dims, sim.hardware)
    return lambda kind, nbytes, dim: core.collective_time_us(kind, nbytes, mesh, dim,
                                                             sim.comm_model)


def _is_device_alltoall(node: torch.fx.Node) -> bool:
    """DTensor's synchronous shard-dim all-to-all (its result is ready when the op returns): a
    graph lowered on a GPU mesh has it; on a CPU mesh the lowering issues a functional
    all-to-all instead (autoshard.lower.cpu_all_to_all)."""
    return node.op == "call_function" and str(node.target).startswith(
        "_dtensor.shard_dim_alltoall")


def _group_dims(mesh) -> dict:
    """Process group name -> mesh dim."""
    return {mesh.get_group(d).group_name: d for d in range(mesh.ndim)}


def _bytes(node: torch.fx.Node, kind: str) -> float:
    """The bytes the cost model prices: the gathered output of an all-gather, the input of a
    reduce-scatter, the buffer of an all-reduce or all-to-all."""
    src = node.args[0] if kind == "reduce_scatter" else node
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise ValueError(f"collective {node.name}: no tensor meta to size it")
    return float(val.numel() * val.element_size())


def _edge(node: torch.fx.Node) -> str:
    return node.meta.get(META_KEY, {}).get("edge") or node.name


def _group(node: torch.fx.Node) -> str:
    """The group name argument of a `_c10d_functional` collective."""
    name = node.args[-1]
    if not isinstance(name, str):
        raise ValueError(f"collective {node.name}: last argument is not a group name")
    return name


class _Compute:
    """Hands out each planned op's simulated compute time once per occurrence."""

    def __init__(self, compute_us: Mapping[tuple, list]) -> None:
        self.left = {k: list(v) for k, v in compute_us.items()}
        self.by_node: dict = defaultdict(list)
        for node, cat in compute_us:
            self.by_node[node].append(cat)

    def take(self, node: str, in_backward: bool) -> float:
        cats = self.by_node.get(node, [])
        # A forward op in the backward graph is a recomputation: its later occurrence.
        prefer = ([c for c in cats if c not in ("forward", "backward")] + ["backward", "forward"]
                  if in_backward else ["forward"])
        for cat in prefer:
            durs = self.left.get((node, cat))
            if durs:
                return durs.pop(0)
        return 0.0


def replay_step(graphs: Sequence[torch.fx.Graph], mesh, sim: Simulation,
                price: Optional[PriceFn] = None) -> Replay:
    """Prices the lowered graphs (run one after the other: forward, then backward) on the
    simulator's streams.  `mesh` is the DeviceMesh they were lowered for (its process groups
    name the collectives' mesh dims); `price` defaults to `core_price(sim)`."""
    price = price or core_price(sim)
    dims = _group_dims(mesh)
    compute = _Compute(sim.compute_us)
    clock = 0.0
    stream_free: dict = defaultdict(float)
    done: dict = {}
    issued: dict = {}
    events: list = []
    ran: list = []
    compute_total = comm_total = 0.0
    hidden = 0
    for k, graph in enumerate(graphs):
        charged: set = set()
        for node in graph.nodes:
            kind = collective_kind(node)
            if kind is not None:
                if node.meta.get(GATHER_AS_SUM):
                    kind = "all_gather"  # priced as the gather it stands for
                dim = dims.get(_group(node))
                if dim is None:
                    raise ValueError(f"collective {node.name}: group not of this mesh")
                t = price(kind, _bytes(node, kind), dim)
                start = max(clock, stream_free[dim])
                done[node] = stream_free[dim] = start + t
                issued[node] = (_edge(node), kind, dim, clock, start, start + t)
                comm_total += t
            elif _is_device_alltoall(node):
                dim = dims.get(_group(node))
                if dim is None:
                    raise ValueError(f"collective {node.name}: group not of this mesh")
                t = price("all_to_all", _bytes(node, "all_to_all"), dim)
                clock = stream_free[dim] = max(clock, stream_free[dim]) + t
                done[node] = clock
                events.append((_edge(node), "all_to_all", dim, clock - t, clock - t, clock, clock))
                comm_total += t
            elif is_wait(node):
                finish = done.get(node.args[0], 0.0)
                hidden += finish <= clock
                if node.args[0] in issued:
                    events.append((*issued.pop(node.args[0]), clock))
                clock = max(clock, finish)
            elif node.op == "call_function":
                stamp = node.meta.get(META_KEY, {})
                # the op itself runs under edge "<node>:op" (apply.StepRunner.run)
                planned = stamp.get("node") if str(stamp.get("edge", ":op")).endswith(
                    ":op") else None
                if planned is not None and planned not in charged:
                    charged.add(planned)
                    t = compute.take(planned, k > 0)
                    ran.append((planned, clock, clock + t))
                    clock += t
                    compute_total += t
    step = max([clock, *stream_free.values()])
    return Replay(step_us=step, compute_us=compute_total, comm_us=comm_total,
                  exposed_comm_us=step - compute_total, collectives=len(done), hidden=hidden,
                  events=sorted(events + [(*e, None) for e in issued.values()],
                                key=lambda e: e[3]), compute=ran)
