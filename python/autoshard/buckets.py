"""Running each planned bucket of collectives as one collective, as FSDP2 does per layer.

    saved = merge_buckets(graph, doc.get("schedule"))   # after autoshard.schedule.apply_prefetch

The planner groups, in placements.json's schedule (docs/pipeline-format.md), the parameter
redistributions one rank issues at one point with the same placements and dtype (prefetch
"bucket"), and the gradient reductions of one layer with the same placements and dtype
("reduce" buckets).  Paying one collective's latency per parameter is what FSDP2 avoids by
gathering a layer's shards in one flat buffer (copy-in, one all-gather, copy-out) and
reduce-scattering a layer's gradients the same way.  This pass does that on a lowered graph:
the k-th collective of every member edge of a bucket, when they run on one process group with
one kind, reduce op and dtype, becomes one collective on the members' inputs laid end to end;
each member's result is cut out of it right after its wait.

Where it goes: the merged collective is issued where the last member was (every input exists
there) and waited where the first member was (before every reader), so a member issued after
another member is waited stays apart (a bucket split across graphs or left unprefetched).
It decides nothing: the buckets are the plan's; the simulator charges each merged collective
one latency (C++ planner/prefetch_schedule.h) and the audit expects one per bucket.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.fx

from .inflight import is_wait
from .lower import META_KEY
from .schedule import prefetch_entries, reduce_entries

_OPS = torch.ops._c10d_functional
#: The collectives a bucket merges, with the position of their process-group argument.
_MERGEABLE = {
    _OPS.all_gather_into_tensor.default: "all_gather",
    _OPS.reduce_scatter_tensor.default: "reduce_scatter",
    _OPS.all_reduce.default: "all_reduce",
}


def bucket_flat(group_size: int, kind: str, *inputs: torch.Tensor) -> torch.Tensor:
    """The bucket's input.  all_gather and all_reduce: the members flattened end to end.
    reduce_scatter: per destination rank r, every member's chunk r end to end (so that rank r's
    share of the reduced buffer holds each member's chunk r)."""
    if kind == "reduce_scatter":
        return torch.cat([x.reshape(group_size, -1) for x in inputs], dim=1).reshape(-1)
    return torch.cat([x.reshape(-1) for x in inputs])


def bucket_piece(out: torch.Tensor, group_size: int, kind: str, offset: int,
                 shape: Sequence[int]) -> torch.Tensor:
    """One member's result out of the bucket's (its input had `shape`, its elements start at
    `offset` in each rank's block).  all_gather: rank r's block of the gathered buffer holds
    every member's shard end to end.  reduce_scatter: this rank's share holds every member's
    chunk end to end.  all_reduce: the members end to end."""
    numel = math.prod(shape)
    if kind == "all_gather":
        blocks = out.view(group_size, -1)[:, offset:offset + numel]
        # contiguous, as an unbucketed gather's output is: the graph's later views rely on it
        # (a [r, n] column block reshaped can be a view whose dims do not merge)
        return blocks.reshape(group_size * shape[0], *shape[1:]).contiguous()
    if kind == "reduce_scatter":
        piece = out[offset // group_size:(offset + numel) // group_size]
        return piece.view(shape[0] // group_size, *shape[1:])
    return out[offset:offset + numel].view(*shape)


def _static_shape(node: Any) -> Optional[tuple]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    shape = getattr(val, "shape", None)
    if shape is None or len(shape) == 0 or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _collectives(nodes: list) -> list:
    """The mergeable collectives among one edge's lowered nodes, in graph order, each with its
    one wait."""
    out = []
    for n in nodes:
        if n.op == "call_function" and n.target in _MERGEABLE:
            waits = [u for u in n.users if is_wait(u)]
            if len(waits) == 1 and len(n.users) == 1:
                out.append((n, waits[0]))
    return out


def _key(coll: torch.fx.Node) -> Optional[tuple]:
    """What members of one merged collective share: kind, its arguments but the tensor, dtype;
    None where the input's static shape is unknown (or does not split over the group)."""
    x = coll.args[0]
    shape = _static_shape(x)
    if shape is None:
        return None
    kind = _MERGEABLE[coll.target]
    if kind == "reduce_scatter" and shape[0] % coll.args[2]:
        return None
    return (kind, *coll.args[1:], x.meta["val"].dtype)


def _merge(graph: torch.fx.Graph, members: list, kind: str, group_size: int) -> None:
    """Replaces `members` [(collective, wait)] (one key; every issue before every wait) by one
    collective on their inputs laid end to end."""
    pos = {n: k for k, n in enumerate(graph.nodes)}
    last_issue = max((c for c, _ in members), key=pos.get)
    first_wait = min((w for _, w in members), key=pos.get)
    inputs = [c.args[0] for c, _ in members]
    with graph.inserting_before(last_issue):
        flat = graph.call_function(bucket_flat, (group_size, kind, *inputs))
        coll = graph.call_function(last_issue.target, (flat, *last_issue.args[1:]))
    with graph.inserting_before(first_wait):
        wait = graph.call_function(_OPS.wait_tensor.default, (coll,))
    stamp = dict(last_issue.meta.get(META_KEY, {}))
    # the audit splits the merged collective's bytes over the member edges it serves
    stamp["bucket_edges"] = [c.meta.get(META_KEY, {}).get("edge") for c, _ in members]
    stamp["bucket_numels"] = [math.prod(_static_shape(x)) for x in inputs]
    for n in (flat, coll, wait):
        n.meta[META_KEY] = stamp
    # sizes for later passes and the replay (autoshard.replay prices a collective by them)
    total = sum(stamp["bucket_numels"])
    out = {"all_gather": total * group_size, "reduce_scatter": total // group_size}
    dtype = inputs[0].meta["val"].dtype
    flat.meta["val"] = torch.empty(total, dtype=dtype, device="meta")
    coll.meta["val"] = wait.meta["val"] = torch.empty(out.get(kind, total), dtype=dtype,
                                                      device="meta")
    offset = 0
    anchor = wait
    for (c, w), x in zip(members, inputs):
        shape = _static_shape(x)
        with graph.inserting_after(anchor):
            piece = graph.call_function(bucket_piece, (wait, group_size, kind, offset, shape))
        piece.meta = dict(w.meta)
        anchor = piece
        offset += math.prod(shape)
        w.replace_all_uses_with(piece)
        graph.erase_node(w)
        graph.erase_node(c)


def _group_size(coll: torch.fx.Node) -> int:
    return 1 if _MERGEABLE[coll.target] == "all_reduce" else int(coll.args[-2])


def _merge_bucket(graph: torch.fx.Graph, per_edge: list) -> int:
    """Merges position by position the collectives of one bucket's edges; -> collectives
    saved."""
    saved = 0
    for k in range(max((len(x) for x in per_edge), default=0)):
        pos = {n: i for i, n in enumerate(graph.nodes)}
        steps = sorted((x[k] for x in per_edge if len(x) > k), key=lambda cw: pos[cw[0]])
        groups: dict = {}
        for c, w in steps:
            key = _key(c)
            if key is None:
                continue
            members = groups.setdefault(key, [])
            if not members or pos[c] < min(pos[mw] for _, mw in members):
                members.append((c, w))
        for key, members in groups.items():
            if len(members) > 1:
                _merge(graph, members, key[0], _group_size(members[0][0]))
                saved += len(members) - 1
    return saved


def merge_buckets(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Runs the collectives of each planned bucket (prefetches and gradient reductions) as
    one, position by position (module docstring).  Returns the number of collectives saved."""
    buckets: dict = {}
    for edge, _, bucket in prefetch_entries(schedule):
        if bucket is not None:
            buckets.setdefault(("prefetch", bucket), []).append(edge)
    for edge, bucket in reduce_entries(schedule):
        buckets.setdefault(("reduce", bucket), []).append(edge)
    if not any(len(edges) > 1 for edges in buckets.values()):
        return 0
    by_edge: dict = {}
    for n in graph.nodes:
        edge = n.meta.get(META_KEY, {}).get("edge")
        if edge is not None:
            by_edge.setdefault(edge, []).append(n)
    saved = 0
    for bucket in sorted(buckets):
        per_edge = [_collectives(by_edge.get(e, [])) for e in buckets[bucket]]
        saved += _merge_bucket(graph, per_edge)
    return saved
