"""Issuing the planned prefetches: parameter collectives moved to where the plan issues them.

    moved = apply_prefetch(graph, doc.get("schedule"))   # doc: the placements.json document

The planner writes, beside the placements, where a rank issues each redistribution that waits
for nothing computed in the step (placements.json "schedule": "prefetch" entries, C++
planner/prefetch_schedule.h): a parameter's all-gather for a layer is issued at the first op of
the layer `prefetch_layers` before it, as FSDP does and as the simulator and the overlap-aware
objective assume.  The lowered graph issues each collective where DTensor redistributed it, right
before its use; this pass moves the collectives of each scheduled edge (and the local ops they
read that depend on placeholders only, such as a weight's transpose) up to the planned issue
point, and leaves the wait where the value is used.  It decides nothing: an entry whose issue
point or collectives are not in this graph (a recomputed gather in the backward, an edge whose
redistribution needs no collective) is left where it is.

Every rank moves the same nodes of the same graph, so the collectives stay matched across
ranks; autoshard.inflight's rules still hold afterwards (only issues move, never waits).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.fx

from .inflight import is_wait
from .lower import META_KEY, collective_kind

#: The schedule versions this runtime reads (2 added the entries' buckets).
SCHEDULE_VERSIONS = (1, 2)


class ScheduleError(ValueError):
    """A placements.json schedule this runtime cannot read (the message names the key)."""


def _stamp(node: torch.fx.Node, key: str) -> Any:
    return node.meta.get(META_KEY, {}).get(key)


def prefetch_entries(schedule: Optional[Mapping[str, Any]]) -> list:
    """The schedule's prefetch entries as (edge, issue_before or None, bucket or None); []
    without a schedule.  Version 1 has no buckets."""
    if not schedule:
        return []
    version = schedule.get("version")
    if version not in SCHEDULE_VERSIONS:
        raise ScheduleError(f"/schedule/version: {version!r}, this runtime reads "
                            f"{', '.join(map(str, SCHEDULE_VERSIONS))}")
    out = []
    for k, e in enumerate(schedule.get("prefetch", [])):
        if not isinstance(e, Mapping) or not isinstance(e.get("edge"), str):
            raise ScheduleError(f"/schedule/prefetch/{k}: expected {{\"edge\": ..., "
                                f"\"issue_before\": ...}}")
        before = e.get("issue_before")
        if before is not None and not isinstance(before, str):
            raise ScheduleError(f"/schedule/prefetch/{k}/issue_before: a node name or null")
        bucket = e.get("bucket")
        if version >= 2 and (not isinstance(bucket, int) or isinstance(bucket, bool)
                             or bucket < 0):
            raise ScheduleError(f"/schedule/prefetch/{k}/bucket: a bucket number >= 0")
        out.append((e["edge"], before, bucket if version >= 2 else None))
    return out


def _movable(node: torch.fx.Node, pos: dict, limit: int, chosen: set) -> bool:
    """Adds to `chosen` what must move with `node` to run before position `limit`: its inputs
    that come later and depend on placeholders only (no collective among them)."""
    for i in node.all_input_nodes:
        if i in chosen or i.op in ("placeholder", "get_attr") or pos[i] < limit:
            continue
        if (i.op != "call_function" or collective_kind(i) is not None or is_wait(i)
                or pos[i] == limit):  # the issue point itself: nothing to run before it
            return False
        chosen.add(i)
        if not _movable(i, pos, limit, chosen):
            return False
    return True


def apply_prefetch(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Moves the collectives of every scheduled edge found in `graph` to its issue point;
    returns how many edges moved."""
    entries = prefetch_entries(schedule)
    if not entries:
        return 0
    nodes = list(graph.nodes)
    first_of: dict = {}   # planned node name -> its first lowered node
    by_edge: dict = {}    # "consumer:slot" -> its lowered nodes, in graph order
    start = None          # the first node that is not a placeholder
    for n in nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            continue
        start = start or n
        planned = _stamp(n, "node")
        if planned is not None:
            first_of.setdefault(planned, n)
        edge = _stamp(n, "edge")
        if edge is not None:
            by_edge.setdefault(edge, []).append(n)
    moved = 0
    for edge, before, _ in entries:
        group = by_edge.get(edge, [])
        if not any(collective_kind(n) is not None for n in group):
            continue
        target = start if before is None else first_of.get(before)
        if target is None:
            continue  # the issue point is in another graph (e.g. a recomputed gather)
        pos = {n: k for k, n in enumerate(graph.nodes)}
        waits = [n for n in group if is_wait(n)]
        # The issue part: the edge's nodes before its last wait (what follows that wait, the
        # local ops on the arrived value, stays at the use).
        end = pos[waits[-1]] if waits else len(pos)
        chosen = {n for n in group if pos[n] < end}
        if not chosen or pos[target] >= min(pos[n] for n in chosen):
            continue
        if not all(_movable(n, pos, pos[target], chosen) for n in list(chosen)):
            continue
        for n in sorted(chosen, key=pos.get):
            target.prepend(n)
        moved += 1
    return moved


def bucket_flat(*shards: torch.Tensor) -> torch.Tensor:
    """The bucket's input: its members' shards flattened end to end (FSDP2's copy-in)."""
    return torch.cat([s.reshape(-1) for s in shards])


def bucket_piece(gathered: torch.Tensor, group_size: int, offset: int,
                 shape: Sequence[int]) -> torch.Tensor:
    """One member's all-gather out of the bucket's (FSDP2's copy-out): rank r's block of the
    gathered buffer holds every member's shard end to end, so the member's rows of rank r
    are at `offset` in block r."""
    numel = math.prod(shape)
    blocks = gathered.view(group_size, -1)[:, offset:offset + numel]
    return blocks.reshape(group_size * shape[0], *shape[1:])


def _gathers(group: list) -> list:
    """The all-gathers of one edge's lowered nodes, in graph order, each with its one wait."""
    target = torch.ops._c10d_functional.all_gather_into_tensor.default
    out = []
    for n in group:
        if n.op == "call_function" and n.target is target:
            waits = [u for u in n.users if is_wait(u)]
            if len(waits) == 1 and len(n.users) == 1:
                out.append((n, waits[0]))
    return out


def _static_shape(node: torch.fx.Node) -> Optional[tuple]:
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape) or len(shape) == 0:
        return None
    return tuple(shape)


def _merge(graph: torch.fx.Graph, members: list) -> None:
    """Replaces the all-gathers `members` [(collective, wait)] (same group, size and dtype;
    every issue before every wait) by one all-gather of their flat shards: issued where the
    last of them was, waited where the first of them was, each member's value cut out of it
    right after that wait."""
    pos = {n: k for k, n in enumerate(graph.nodes)}
    last_issue = max((c for c, _ in members), key=pos.get)
    first_wait = min((w for _, w in members), key=pos.get)
    size, group = members[0][0].args[1], members[0][0].args[2]
    shards = [c.args[0] for c, _ in members]
    with graph.inserting_before(last_issue):
        flat = graph.call_function(bucket_flat, tuple(shards))
        coll = graph.call_function(torch.ops._c10d_functional.all_gather_into_tensor.default,
                                   (flat, size, group))
    with graph.inserting_before(first_wait):
        wait = graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (coll,))
    stamp = dict(last_issue.meta.get(META_KEY, {}))
    stamp["bucket_edges"] = [c.meta.get(META_KEY, {}).get("edge") for c, _ in members]
    for n in (flat, coll, wait):
        n.meta[META_KEY] = stamp
    offset = 0
    anchor = wait
    for (c, w), shard in zip(members, shards):
        shape = _static_shape(shard)
        with graph.inserting_after(anchor):
            piece = graph.call_function(bucket_piece, (wait, size, offset, shape))
        piece.meta = dict(w.meta)
        anchor = piece
        offset += math.prod(shape)
        w.replace_all_uses_with(piece)
        graph.erase_node(w)
        graph.erase_node(c)


def merge_buckets(graph: torch.fx.Graph, schedule: Optional[Mapping[str, Any]]) -> int:
    """Runs the all-gathers of each planned bucket as one (after apply_prefetch): per bucket,
    the k-th all-gather of every member edge, when they share group, group size and dtype and
    all are issued before the first of them is waited (a member issued later stays apart).
    Returns the number of collectives saved."""
    entries = prefetch_entries(schedule)
    buckets: dict = {}
    for edge, _, bucket in entries:
        if bucket is not None:
            buckets.setdefault(bucket, []).append(edge)
    if not any(len(edges) > 1 for edges in buckets.values()):
        return 0
    by_edge: dict = {}
    for n in graph.nodes:
        edge = _stamp(n, "edge")
        if edge is not None:
            by_edge.setdefault(edge, []).append(n)
    saved = 0
    for bucket in sorted(buckets):
        lists = [_gathers(by_edge.get(e, [])) for e in buckets[bucket]]
        for k in range(max((len(x) for x in lists), default=0)):
            pos = {n: i for i, n in enumerate(graph.nodes)}
            steps = sorted((x[k] for x in lists if len(x) > k), key=lambda cw: pos[cw[0]])
            groups: dict = {}
            for c, w in steps:
                shard = c.args[0]
                shape = _static_shape(shard) if isinstance(shard, torch.fx.Node) else None
                if shape is None:
                    continue
                key = (c.args[1], c.args[2], shard.meta["val"].dtype)
                members = groups.setdefault(key, [])
                if not members or pos[c] < min(pos[mw] for _, mw in members):
                    members.append((c, w))
            for members in groups.values():
                if len(members) > 1:
                    _merge(graph, members)
                    saved += len(members) - 1
    return saved
