"""Splitting the lowered joint step into a forward graph and a backward graph.

    split = partition(gm, outputs=[loss_node], grads=[...], tangents=[], recompute={"mul_3"})
    outs_and_saved = split.forward(*primals)
    grads = split.backward(*saved, *tangents)

The lowered step (autoshard.lower) is one joint graph: forward, loss and backward.  Running it
whole inside the module's forward computes the gradients before the user asks for them; split,
the module's call runs the forward graph and keeps what the backward reads ("saved"), and
`backward()` runs the backward graph -- what autograd, and `torch.compile`, expect of a
module.  Node phases come from the lowering's stamps (node.meta["autoshard"]["phase"]); a node
that reads a backward value is backward.

Activation recomputation (the plan's `recompute` list of graph nodes, planner/recompute.h):
a forward value that the backward reads and that a recomputed node produced is not saved;
the backward graph re-executes its chain of recomputed producers (with their collectives)
just before its first backward use, from the saved values of non-recomputed ones.

Overlap: each gradient's reduction is issued as soon as the gradient exists, and waited for
only at the end (overlap_gradient_reductions); then the schedule's issue and wait points
(autoshard.schedule) and buckets (autoshard.buckets) apply to both graphs.  Last, the copies
DTensor makes of a contiguous local chunk are dropped (drop_chunk_copies).

Tangents: nodes of the joint graph whose value is the gradient flowing into a model output
(the tracer marks them with `aten.alias`); in the backward graph they become placeholders, so
the backward starts from the gradient the user's loss gives instead of the traced seed.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.fx

from .inflight import enforce_in_flight, is_wait
from .lower import META_KEY, backward_nodes, collective_kind
from .buckets import merge_buckets
from .schedule import apply_issue_points, apply_prefetch, apply_wait_points


@dataclass
class SplitStep:
    """forward(*primals) -> (*outputs, *saved); backward(*saved, *tangents) -> grads."""

    forward: torch.fx.GraphModule
    backward: torch.fx.GraphModule
    n_outputs: int
    n_saved: int
    saved_names: list
    recomputed: int  # nodes the backward re-executes
    overlapped: int = 0  # gradient reductions issued early (overlap_gradient_reductions)
    prefetched: int = 0  # scheduled redistributions issued at their planned point (schedule)
    bucketed: int = 0  # collectives saved by running each planned bucket as one (buckets)
    issued: int = 0  # activation redistributions issued right after their producer (schedule)
    waited: int = 0  # waits moved to the schedule's wait point (schedule.apply_wait_points)


def partition(gm: torch.fx.GraphModule, outputs: Sequence[torch.fx.Node],
              grads: Sequence[Optional[torch.fx.Node]], tangents: Sequence[torch.fx.Node] = (),
              recompute: frozenset = frozenset(),
              in_flight: Optional[int] = None,
              schedule: Optional[Mapping[str, Any]] = None) -> SplitStep:
    """Splits `gm` (the lowered joint step; its placeholders are the primals).

    outputs: forward values the module's call returns (the loss, or the model's outputs).
    grads: per parameter, the node of its gradient (None: no gradient).
    tangents: nodes replaced by backward placeholders, in order.
    recompute: names of the planned graph nodes the plan recomputes in the backward.
    in_flight: the most collectives a rank keeps pending (autoshard.inflight: 1 on gloo);
        None for no limit.  Both graphs are checked against the in-flight rules.
    schedule: placements.json's "schedule": its prefetches are issued where it says, and the
        collectives of each of its buckets run as one (autoshard.buckets), in both graphs.
    """
    tangent_set = set(tangents)
    is_bwd = backward_nodes(gm, tangent_set)
    for n in outputs:
        if is_bwd[n]:
            raise ValueError(f"node {n.name}: a forward output computed in the backward")

    def recomputable(n: torch.fx.Node) -> bool:
        return (n.op == "call_function" and not is_bwd[n]
                and n.meta.get(META_KEY, {}).get("node") in recompute)

    bwd = torch.fx.Graph()
    bmap: dict = {}
    saved: list = []
    recomputed = 0
    # Saved values first: placeholders in the order of first use by the backward.
    first_uses: list = []
    seen: set = set()

    def collect(n: torch.fx.Node) -> None:
        """Forward values the backward needs, through recomputable chains."""
        todo = [n]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            if recomputable(x):
                todo.extend(reversed(x.all_input_nodes))
            elif x.op != "get_attr":
                first_uses.append(x)

    for node in gm.graph.nodes:
        if is_bwd.get(node) and node not in tangent_set:
            for inp in node.all_input_nodes:
                if not is_bwd[inp]:
                    collect(inp)
    for g in grads:
        if g is not None and not is_bwd[g]:
            collect(g)
    for x in first_uses:
        bmap[x] = bwd.placeholder(f"saved_{x.name}")
        bmap[x].meta = dict(x.meta)
        saved.append(x)
    for t in tangents:
        bmap[t] = bwd.placeholder(f"tangent_{t.name}")
        bmap[t].meta = dict(t.meta)

    def value(x: torch.fx.Node) -> torch.fx.Node:
        nonlocal recomputed
        if x in bmap:
            return bmap[x]
        stack = [x]
        while stack:  # re-executes x's recomputable chain, producers first
            y = stack[-1]
            missing = [i for i in y.all_input_nodes if i not in bmap]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if y in bmap:
                continue
            if not (recomputable(y) or y.op == "get_attr"):
                raise ValueError(f"node {y.name}: the backward reads it but it is neither "
                                 f"saved nor recomputable")
            bmap[y] = bwd.node_copy(y, lambda a: bmap[a])
            recomputed += y.op == "call_function"
        return bmap[x]

    for node in gm.graph.nodes:
        if not is_bwd.get(node) or node in tangent_set:
            continue
        for inp in node.all_input_nodes:
            value(inp)
        bmap[node] = bwd.node_copy(node, lambda a: bmap[a])
    bwd.output(tuple(value(g) if g is not None else None for g in grads))
    if recomputed:
        # A recomputed op that reads a parameter gathers it again; the backward gathers the
        # same weight for its own use: one gather serves both, as the planner charges it.
        _dedupe(bwd, {bmap[x] for x in saved if x.op == "placeholder"})
    # What only the traced seed read (the loss's ones, the outputs' summed gradients) is dead
    # once the tangents replace the seed: not saved.
    bwd.eliminate_dead_code(is_impure_node=_impure)
    kept = []
    for x in saved:
        if bmap[x].users:
            kept.append(x)
        else:
            bwd.erase_node(bmap[x])
    saved = kept
    overlapped = overlap_gradient_reductions(bwd)

    fwd = torch.fx.Graph()
    fmap: dict = {}
    for node in gm.graph.nodes:
        if node.op == "output" or is_bwd[node]:
            continue
        fmap[node] = fwd.node_copy(node, lambda a: fmap[a])
    fwd.output(tuple(fmap[n] for n in [*outputs, *saved]))
    # Prefetches first: their issue point is where the compute reaches an op, before the
    # redistributions of its inputs that the issue points then move up to their producers.
    prefetched = apply_prefetch(fwd, schedule) + apply_prefetch(bwd, schedule)
    issued = apply_issue_points(fwd, schedule) + apply_issue_points(bwd, schedule)
    waited = apply_wait_points(fwd, schedule) + apply_wait_points(bwd, schedule)
    bucketed = merge_buckets(fwd, schedule) + merge_buckets(bwd, schedule)
    drop_chunk_copies(fwd)
    drop_chunk_copies(bwd)
    fwd_gm = _module(gm, fwd)
    bwd_gm = _module(gm, bwd)
    for part in (fwd_gm, bwd_gm):
        enforce_in_flight(part, in_flight)
    return SplitStep(forward=fwd_gm, backward=bwd_gm, n_outputs=len(outputs),
                     n_saved=len(saved), saved_names=[x.name for x in saved],
                     recomputed=recomputed, overlapped=overlapped, prefetched=prefetched,
                     bucketed=bucketed, issued=issued, waited=waited)


def overlap_gradient_reductions(graph: torch.fx.Graph) -> int:
    """Issues each gradient's reduction as soon as the gradient exists, and waits for it only
    where its result is read (the graph's end): the collective runs on the process group's
    own thread while the rest of the backward computes (what DDP and FSDP do per bucket).
    Every rank applies the same moves to the same graph, so collectives stay matched.
    Returns the number of collectives moved."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    home: dict = {}   # a moved node -> the node it now follows (with those moved before it)
    tail: dict = {}   # that node -> the last node moved behind it
    moved = 0
    for node in list(graph.nodes):
        edge = node.meta.get(META_KEY, {}).get("edge", "")
        if node.op != "call_function" or not edge.startswith("grad:") or is_wait(node):
            continue
        if not node.all_input_nodes:
            continue
        anchor = max((home.get(n, n) for n in node.all_input_nodes), key=position.get)
        after = tail.get(anchor, anchor)
        if after.next is not node:
            after.append(node)
            moved += collective_kind(node) is not None
        home[node] = anchor
        tail[anchor] = node
    position = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if is_wait(node) and node.users:
            min(node.users, key=position.get).prepend(node)
    return moved


_CHUNKS = {torch.ops.aten.split.Tensor, torch.ops.aten.split_with_sizes.default,
           torch.ops.aten.chunk.default}


def drop_chunk_copies(graph: torch.fx.Graph) -> int:
    """Reads a redistribution's local chunk in place where DTensor copied it.  DTensor cuts
    Replicate -> Shard by `split` and clones the rank's piece (so that the shard owns its
    memory); in a lowered graph the piece is read by the next ops and freed with them, and a
    piece that is contiguous needs no copy for them.  Kept: copies the graph returns (saved
    for the backward or a gradient: a view would hold its whole base that long), copies of
    non-contiguous pieces, and any copy where an op of the graph writes in place.  Returns the
    number of copies dropped."""
    if any(_mutates(n) for n in graph.nodes):
        return 0
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    dropped = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.clone.default:
            continue
        edge = node.meta.get(META_KEY, {}).get("edge", "")
        if not edge or edge.endswith(":op") or output in node.users:
            continue
        piece = node.args[0]
        if not (isinstance(piece, torch.fx.Node) and piece.target is operator.getitem
                and isinstance(piece.args[0], torch.fx.Node)
                and piece.args[0].target in _CHUNKS):
            continue
        val = piece.meta.get("val")
        fmt = node.kwargs.get("memory_format", torch.preserve_format)
        if not isinstance(val, torch.Tensor) or not val.is_contiguous() or \
                fmt not in (torch.preserve_format, torch.contiguous_format):
            continue
        node.replace_all_uses_with(piece)
        graph.erase_node(node)
        dropped += 1
    return dropped


def _mutates(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _dedupe(graph: torch.fx.Graph, roots: set) -> int:
    """Common-subexpression elimination of pure ATen and functional-collective nodes (no
    mutation, no randomness) computed from `roots` alone (the parameters): the later of two
    identical nodes reads the earlier one."""
    seen: dict = {}
    removed = 0
    from_roots = set(roots)
    for node in list(graph.nodes):
        target = node.target
        schema = getattr(target, "_schema", None)
        if node.op != "call_function" or not node.all_input_nodes \
                or not all(i in from_roots for i in node.all_input_nodes):
            continue
        if target is not operator.getitem and (
                schema is None or schema.is_mutable or node.is_impure()
                or torch.Tag.nondeterministic_seeded in target.tags):
            continue
        try:
            key = (target, _freeze(node.args), _freeze(node.kwargs))
            hash(key)
        except TypeError:
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
            removed += 1
        else:
            seen[key] = node
            from_roots.add(node)
    return removed


def _impure(node: torch.fx.Node) -> bool:
    """Dead-code elimination keeps mutations; a functional collective whose result nobody
    waits for is dead (every rank drops the same one: they stay matched)."""
    if getattr(node.target, "namespace", "") == "_c10d_functional":
        return False
    return node.is_impure()


def _module(root: torch.fx.GraphModule, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    graph.eliminate_dead_code(is_impure_node=_impure)
    gm = torch.fx.GraphModule(root, graph)
    gm.recompile()
    return gm
