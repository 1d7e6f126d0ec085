"""Communication audit: the collectives an applied step really issues, beside what the plan charged.

    from autoshard.audit import CommAudit, planned_collectives
    with CommAudit(step) as audit:            # step = apply_placement(...)
        loss = step(tokens, labels); loss.backward()
    print(audit.table())                      # issued: per collective type and mesh dim
    planned, _ = planned_collectives("build/autoshard", graph, placements, (2, 4))
    print(audit.table(planned))               # issued beside planned, with a match column

Recorded side: a TorchDispatchMode sees every functional collective the lowered step issues
(torch.ops._c10d_functional all_gather_into_tensor, reduce_scatter_tensor, all_reduce,
all_to_all_single), its process group (mapped back to the mesh dim), and its bytes per device
in autoshard's convention (collective_time_us): the gathered output for all_gather, the input
for reduce_scatter, the buffer for all_reduce and all_to_all.  The lowered graph tells the audit
which plan edge (consumer node, input slot) a redistribution belongs to.

Planned side: every edge of the plan (each op input whose producer's placement differs from
the spec the op needs, and each parameter <- gradient pair) priced by autoshard's own schedule
for the plan's comm model (`autoshard cost --cases FILE --steps --comm-model M`), so the two
sides can be compared per collective type and mesh dim, and edge by edge.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send_recv")


@dataclass(frozen=True)
class Collective:
    kind: str          # one of KINDS
    mesh_dim: Any      # int, or a tuple of ints for a flattened group, or "?" if unknown
    bytes: float       # per device, autoshard's convention (see the module docstring)
    edge: str = ""     # "node:slot", "grad:<param>:-1", "<node>:op" (inside an op), "" unknown
    counted: bool = True  # False: another member edge of the same bucketed collective


def _kind_and_bytes(func, args) -> Optional[tuple[str, float, str]]:
    """(kind, bytes, group name) of a functional collective call, else None."""
    name = getattr(func, "__name__", "")
    ns = getattr(func, "namespace", "")
    if ns == "autoshard" and name.startswith("ring_attention"):
        return _ring_bytes(name, args)
    if ns != "_c10d_functional":
        return None
    base = name.split(".")[0].rstrip("_")
    t = args[0]
    nbytes = float(t.numel() * t.element_size()) if isinstance(t, torch.Tensor) else 0.0
    if base == "all_gather_into_tensor":
        return "all_gather", nbytes * int(args[1]), str(args[2])
    if base == "reduce_scatter_tensor":
        return "reduce_scatter", nbytes, str(args[3])
    if base == "all_reduce":
        return "all_reduce", nbytes, str(args[2])
    if base == "all_to_all_single":
        return "all_to_all", nbytes, str(args[3])
    if base in ("broadcast", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced",
                "all_reduce_coalesced"):
        return base, nbytes, "?"
    return None


def _ring_bytes(name: str, args) -> tuple[str, float, str]:
    """A ring attention op (autoshard.context_parallel): ("send_recv", bytes each device
    sends, group).  Forward: K and V to the next rank in P - 1 steps; backward: K and V in
    P - 1 steps, the float32 dK/dV accumulators in P steps."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    backward = name.startswith("ring_attention_backward")
    k, v = (args[2], args[3]) if backward else (args[1], args[2])
    group = args[6] if backward else args[3]
    world = dist.get_world_size(_resolve_process_group(group))
    kv = float(k.numel() * k.element_size() + v.numel() * v.element_size())
    total = (world - 1) * kv
    if backward:
        total += world * float(k.numel() + v.numel()) * 4
    return "send_recv", total, str(group)


class _Recorder(TorchDispatchMode):
    def __init__(self, audit: "CommAudit"):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        info = _kind_and_bytes(func, args)
        if info is not None:
            kind, nbytes, group = info
            if kind == "all_reduce" and self.audit._gather_as_sum:
                kind = "all_gather"  # its buffer is the gathered output: the same bytes
            self.audit._record(kind, nbytes, group)
        return func(*args, **(kwargs or {}))


class _EdgeInterpreter(torch.fx.Interpreter):
    """Runs the lowered step, telling the audit which plan edge each node belongs to."""

    def __init__(self, gm: torch.fx.GraphModule, audit: "CommAudit") -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.audit = audit

    def run_node(self, n: torch.fx.Node) -> Any:
        from .lower import GATHER_AS_SUM, META_KEY

        self.audit._edge.append(n.meta.get(META_KEY, {}).get("edge", ""))
        # an all-gather the gloo runtime does as an all-reduce (autoshard.inflight) is
        # audited as the gather the plan charged
        self.audit._gather_as_sum = bool(n.meta.get(GATHER_AS_SUM))
        stamp = n.meta.get(META_KEY, {})
        if "bucket_edges" in stamp:
            self.audit._bucket = (stamp["bucket_edges"], stamp["bucket_numels"])
        try:
            return super().run_node(n)
        finally:
            self.audit._edge.pop()
            self.audit._gather_as_sum = False
            self.audit._bucket = None


class CommAudit:
    """Records the collectives of the steps run inside `with CommAudit(step):`."""

    def __init__(self, step) -> None:
        self.step = step
        self.mesh = step.mesh
        self.records: list[Collective] = []
        self._edge: list[str] = []
        self._gather_as_sum = False
        self._bucket: Optional[tuple] = None  # (edges, numels) of the node being run
        self._saved_step = None
        self._groups = {}
        for d in range(self.mesh.ndim):
            self._groups[self.mesh.get_group(d).group_name] = d
        self._mode: Optional[_Recorder] = None

    def _record(self, kind: str, nbytes: float, group: str) -> None:
        dim = self._groups.get(group, "?")
        if self._bucket:  # one collective serving several edges (autoshard.buckets)
            edges, numels = self._bucket
            total = float(sum(numels))
            for k, (edge, numel) in enumerate(zip(edges, numels)):
                self.records.append(Collective(kind, dim, nbytes * numel / total, edge or "",
                                               counted=k == 0))
            return
        self.records.append(Collective(kind, dim, nbytes, self._edge[-1] if self._edge else ""))

    def __enter__(self) -> "CommAudit":
        # The audited steps run the lowered graph node by node, so that each collective is
        # attributed to the plan edge its node was lowered from (node.meta["autoshard"]).
        split = self.step.split
        self._saved_step = self.step.run_graphs_with(_EdgeInterpreter(split.forward, self).run,
                                                     _EdgeInterpreter(split.backward, self).run)
        self._mode = _Recorder(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._mode.__exit__(*exc)
        self.step.run_graphs_with(*self._saved_step)
        return False

    # --- summaries --------------------------------------------------------------------------
    def totals(self, exclude_edges: Sequence[str] = ("loss",)) -> dict:
        """(kind, mesh dim) -> [count, bytes] of the recorded collectives."""
        out: dict = defaultdict(lambda: [0, 0.0])
        for r in self.records:
            if r.edge.split(":")[0] in exclude_edges:
                continue
            out[(r.kind, r.mesh_dim)][0] += r.counted
            out[(r.kind, r.mesh_dim)][1] += r.bytes
        return dict(out)

    def table(self, planned: Optional[dict] = None, mesh_dim_names: Optional[Sequence[str]] = None
              ) -> str:
        """A text table: per collective type and mesh dim, count and MiB issued vs planned."""
        got = self.totals()
        if planned is None:  # issued only
            lines = [f"{'collective':<15}{'mesh dim':<10}{'count':>8}{'MiB':>12}"]
            names = mesh_dim_names or self.mesh.mesh_dim_names or \
                [str(i) for i in range(self.mesh.ndim)]
            for (kind, dim), (n, b) in sorted(got.items(), key=str):
                d = names[dim] if isinstance(dim, int) else str(dim)
                lines.append(f"{kind:<15}{d:<10}{n:>8}{b / 2**20:>12.4f}")
            return "\n".join(lines)
        names = mesh_dim_names or self.mesh.mesh_dim_names or [str(i) for i in range(self.mesh.ndim)]
        keys = sorted(set(got) | set(planned), key=lambda k: (KINDS.index(k[0]) if k[0] in KINDS
                                                              else 9, str(k[1])))
        lines = [f"{'collective':<15}{'mesh dim':<10}{'issued':>8}{'planned':>9}"
                 f"{'issued MiB':>12}{'planned MiB':>13}  match"]
        for k in keys:
            g = got.get(k, [0, 0.0])
            p = planned.get(k, [0, 0.0])
            dim = names[k[1]] if isinstance(k[1], int) else str(k[1])
            ok = g[0] == p[0] and math.isclose(g[1], p[1], rel_tol=1e-9, abs_tol=0.5)
            lines.append(f"{k[0]:<15}{dim:<10}{g[0]:>8}{p[0]:>9}{g[1] / 2**20:>12.4f}"
                         f"{p[1] / 2**20:>13.4f}  {'yes' if ok else 'NO'}")
        if not keys:
            lines.append("(no collectives issued or planned)")
        return "\n".join(lines)

    def per_edge(self) -> dict:
        """edge -> sorted list of (kind, mesh dim, bytes) issued."""
        out: dict = defaultdict(list)
        for r in self.records:
            out[r.edge].append((r.kind, r.mesh_dim, r.bytes))
        return {k: sorted(v, key=str) for k, v in out.items()}


# --- the planned side ------------------------------------------------------------------------
def _ref_name(ref) -> tuple[str, int]:
    return (ref, 0) if isinstance(ref, str) else (ref["node"], int(ref.get("output", 0)))


def seed_only_nodes(graph: dict) -> set:
    """The graph's gradient marks ("tangents") and the nodes that feed only them: the traced
    seed of the backward, which the lowered module replaces by the incoming gradients and so
    never runs (autoshard.partition)."""
    dead = set(graph.get("tangents", []))
    if not dead:
        return dead
    consumers: dict = defaultdict(set)
    for n in graph["nodes"]:
        for ref in n.get("inputs", []):
            consumers[_ref_name(ref)[0]].add(n["name"])
    for n in reversed(graph["nodes"]):
        users = consumers.get(n["name"])
        if n.get("kind") == "op" and users and users <= dead:
            dead.add(n["name"])
    return dead


def plan_edges(graph: dict, placements: dict) -> list[dict]:
    """The plan's redistribution edges whose specs differ: {"edge", "shape", "dtype", "from",
    "to"}.  `placements` is the placements.json object (or its "placements" map)."""
    pl = placements.get("placements", placements)
    nodes = {n["name"]: n for n in graph["nodes"]}

    def out_spec(name: str, k: int) -> str:
        s = pl[name]["output"].strip()
        if s.startswith("(") and "," in s:
            return [x.strip() for x in s[1:-1].split(",")][k]
        return s

    # A node the backward re-executes (placements "recompute") pays its input edges again,
    # except those from parameters (the backward's own gather serves both: planner/recompute.h).
    recompute = set(placements.get("recompute", []))
    # A twin view reads its first twin's redistributed input (schedule "twins"): no edge.
    twins = (placements.get("schedule") or {}).get("twins", {}) if "placements" in placements \
        else {}
    dead = seed_only_nodes(graph)
    edges = []
    for n in graph["nodes"]:
        if n.get("kind") != "op" or n["name"] in dead:
            continue
        ins = pl[n["name"]]["inputs"]
        for slot, ref in enumerate(n.get("inputs", [])):
            src, k = _ref_name(ref)
            meta = nodes[src]["outputs"][k]
            frm, to = out_spec(src, k), ins[slot]
            if frm != to and not (slot == 0 and n["name"] in twins):
                again = n["name"] in recompute and nodes[src].get("kind") != "parameter"
                for _ in range(2 if again else 1):
                    edges.append({"edge": f"{n['name']}:{slot}", "shape": meta["shape"],
                                  "dtype": meta["dtype"], "from": frm, "to": to})
    for gp in graph.get("grad_pairs", []):
        src, k = _ref_name(gp["grad"])
        meta = nodes[src]["outputs"][k]
        frm, to = out_spec(src, k), pl[gp["param"]]["output"]
        if frm != to:
            edges.append({"edge": f"grad:{gp['param']}:-1", "shape": meta["shape"],
                          "dtype": meta["dtype"], "from": frm, "to": to})
    return edges


_DTYPE_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2}


def cp_collectives(graph: dict, placements: dict, mesh_shape: Sequence[int]) -> dict:
    """What the runtime's lowering of each context-parallel attention node issues
    (autoshard.context_parallel), as "<node>:op" -> [(kind, mesh dim, bytes per device)]:
    all-gather kind: K and V gathered (forward; again in the backward) and dK, dV (float32)
    reduce-scattered; ring kind: one P2P exchange per node (bytes as audit._ring_bytes)."""
    from .plan_file import parse_placements
    from .local import is_strided

    pl = placements.get("placements", placements)
    names = placements.get("mesh_dim_names") or []
    recompute = set(placements.get("recompute", []))
    nodes = {n["name"]: n for n in graph["nodes"]}
    out: dict = {}
    for name, entry in pl.items():
        cp = entry.get("context_parallel")
        if cp is None or name not in nodes:
            continue
        node = nodes[name]
        dim = list(names).index(cp["mesh_dim"]) if cp["mesh_dim"] in names else 0
        world = mesh_shape[dim]
        backward = node["op"].endswith("_backward")
        k_ref = node["inputs"][2 if backward else 1]
        src, idx = _ref_name(k_ref)
        meta = nodes[src]["outputs"][idx]
        numel = math.prod(meta["shape"])
        for i, p in enumerate(parse_placements(entry["inputs"][2 if backward else 1])):
            if p.is_shard() or is_strided(p):  # a _StridedShard's is_shard() is False
                numel //= mesh_shape[i]
        kv = 2.0 * numel * _DTYPE_BYTES.get(meta["dtype"], 4)  # K and V, this device's
        if cp["kind"] == "allgather":
            steps = [("all_gather", dim, kv / 2 * world)] * 2
            if backward:
                steps += [("reduce_scatter", dim, float(numel * 4 * world))] * 2
        else:
            total = (world - 1) * kv + (world * 2.0 * numel * 4 if backward else 0.0)
            steps = [("send_recv", dim, total)]
        if name in recompute:  # the backward runs the node again (plan --recompute)
            steps = steps * 2
        out[f"{name}:op"] = steps
    return out


def planned_collectives(binary: str, graph: dict, placements: dict, mesh_shape: Sequence[int],
                        comm_model: str = "dtensor") -> tuple[dict, dict]:
    """autoshard's schedule for every plan edge -> ((kind, mesh dim) -> [count, bytes],
    edge -> sorted list of (kind, mesh dim, bytes)).

    comm_model: the profile the plan was made with.  "dtensor" (`plan --comm-model dtensor`)
    charges DTensor's own transform walk, which is what DTensor then executes, so issued and
    planned agree exactly.  "nccl" (the default profile) charges autoshard's sound N-D schedule,
    which can be cheaper than DTensor's greedy walk: e.g. P -> S under a nesting change is one
    reduce_scatter for autoshard, an all_reduce plus a local slice for DTensor.

    A planned all_to_all is expected as one on every backend: on a CPU (gloo) mesh too, the
    lowering runs DTensor's shard-to-shard move as an all-to-all (autoshard.lower
    .cpu_all_to_all), not as DTensor 2.13's all-gather and chunk."""
    edges = plan_edges(graph, placements)
    cases = [{"mesh": list(mesh_shape), "shape": e["shape"], "dtype": e["dtype"],
              "from": e["from"], "to": e["to"]} for e in edges]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.json")
        with open(path, "w") as f:
            json.dump(cases, f)
        res = subprocess.run([binary, "cost", "--cases", path, "--steps", "--comm-model",
                              comm_model], check=True,
                             capture_output=True, text=True, timeout=120).stdout
    totals: dict = defaultdict(lambda: [0, 0.0])
    per_edge: dict = {}
    for edge, steps in cp_collectives(graph, placements, mesh_shape).items():
        per_edge[edge] = sorted(steps, key=str)
        for kind, dim, b in steps:
            totals[(kind, dim)][0] += 1
            totals[(kind, dim)][1] += b
    bucket_of = _buckets(placements.get("schedule"))
    merged: set = set()  # (bucket, k-th collective of its edges, kind, mesh dim, dtype): once
    for e, r in zip(edges, json.loads(res)):
        steps = [(s["collective"], int(s["mesh_dim"]), float(s["bytes"])) for s in r["steps"]]
        per_edge[e["edge"]] = sorted(per_edge.get(e["edge"], []) + steps, key=str)
        position = 0
        for kind, dim, b in steps:
            if kind in _MERGED_KINDS and e["edge"] in bucket_of:
                key = (bucket_of[e["edge"]], position, kind, dim, e["dtype"])
                position += 1
                totals[(kind, dim)][0] += key not in merged
                merged.add(key)
            else:
                totals[(kind, dim)][0] += 1
            totals[(kind, dim)][1] += b
    return dict(totals), per_edge


#: The collective kinds autoshard.buckets merges.
_MERGED_KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def _buckets(schedule: Optional[dict]) -> dict:
    """edge -> bucket of the schedule's prefetch entries (version 2) and gradient reductions
    (version 3): the runtime runs the k-th collective of a bucket's edges of one kind, mesh dim
    and dtype as one (autoshard.buckets.merge_buckets), so the plan expects it once."""
    from .schedule import prefetch_entries, reduce_entries

    out = {edge: ("prefetch", b) for edge, _, b in prefetch_entries(schedule) if b is not None}
    out.update((edge, ("reduce", b)) for edge, b in reduce_entries(schedule))
    return out
