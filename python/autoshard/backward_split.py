"""A stage's backward graph cut in two for the zero-bubble pipeline schedules.

    parts = split_backward(split.backward, n_param_grads, planned_parts(doc))
    input_grads, handoff = parts.run_input(*saved, *tangents)   # B: what the previous stage waits for
    kept = parts.weight_args((*saved, *tangents))               # what W reads of those
    param_grads = parts.run_weight(*kept, *handoff)              # W: later, in the bubble

torch.distributed.pipelining's ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble run each
stage's backward as two actions, I (input gradients) and W (weight gradients), the split of Qi
et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024).  A stage here is one autograd Function
over its lowered backward graph (autoshard.partition), whose outputs are the parameters'
gradients, then the gradients of the activations it received.

Which part a node runs in is the plan's: placements.json gives every backward node of a
pipelined plan its "part" ("input_grad" or "weight_grad", C++ pipeline/backward_split.h), and
every lowered node carries the planned node it runs (autoshard.lower's stamp), so a lowered
node runs in its planned node's part.  Only the lowered nodes without a planned part (a forward
op the backward recomputes, a gradient's reduction into its parameter's placement, a node with
no stamp) are placed here, by the planner's own rule: in B when an activation gradient, or a
node the plan puts in B, reads it, else in W.  A plan whose parts the lowered graph cannot run
(an activation gradient, or a B node, reading a W node) is refused with an error naming both.

B's graph computes the activation gradients and hands over the values of its nodes that W reads
(the output gradients, dY of each dW = X^T dY); W's graph computes the parameter gradients from
those and the saved forward values.  Both run the same ops as the whole backward, in the same
order within each part, so the gradients are the same numbers; the collectives W keeps run on
every rank of a stage in the schedule's common order (the gradient reductions are cut out before
the split and run once per step: autoshard.deferred_grads).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.fx

from .lower import META_KEY


@dataclass
class BackwardParts:
    """B and W of one backward graph.

    input: (*placeholders) -> (*activation_grads, *handoff)
    weight: (*placeholders W reads, *handoff) -> (*param_grads)   (None where the graph had None)
    """

    input: torch.fx.GraphModule
    weight: torch.fx.GraphModule
    n_input_grads: int
    n_handoff: int
    weight_nodes: int  # call_function nodes in W (0: nothing deferred)
    weight_inputs: list  # indices of the placeholders W reads (the rest is freed after B)
    planned: int = 0  # call_function nodes placed by their planned node's "part"
    unplanned: int = 0  # those without one (placed by the rule: module docstring)

    def weight_args(self, args: Sequence[Any]) -> list:
        """The backward's arguments W reads (kept from B to W)."""
        return [args[i] for i in self.weight_inputs]

    def run_input(self, *args: Any) -> tuple[list, list]:
        out = list(self.input(*args))
        return out[:self.n_input_grads], out[self.n_input_grads:]

    def run_weight(self, *args: Any) -> list:
        return list(self.weight(*args))


#: placements.json's parts of a backward node (C++ pipeline/backward_split.h StepPart)
INPUT_GRAD, WEIGHT_GRAD = "input_grad", "weight_grad"


class BackwardSplitError(ValueError):
    """The plan's parts cannot split this backward graph (the message names the nodes)."""


def planned_parts(doc: Mapping[str, Any]) -> dict:
    """placements.json's "part" of every node that has one: planned node -> part."""
    return {name: e["part"] for name, e in doc.get("placements", {}).items()
            if isinstance(e, Mapping) and "part" in e}


def _planned(node: torch.fx.Node) -> Optional[str]:
    return node.meta.get(META_KEY, {}).get("node") if node.op == "call_function" else None


def _what(node: torch.fx.Node) -> str:
    planned = _planned(node)
    return f"{node.name} (planned {planned})" if planned is not None else node.name


def _input_part(graph: torch.fx.Graph, input_outs: Sequence, parts: Mapping[str, str]) -> tuple:
    """The nodes B runs, and how many call_function nodes had no planned part."""
    planned = {n: parts.get(_planned(n)) for n in graph.nodes if n.op == "call_function"}
    for n, part in planned.items():
        if part not in (None, INPUT_GRAD, WEIGHT_GRAD):
            raise BackwardSplitError(f"node {_what(n)}: part {part!r}, expected "
                                     f"{INPUT_GRAD!r} or {WEIGHT_GRAD!r}")
    in_b: set = set()
    reader: dict = {}  # a node -> a B node (or None: an activation gradient) that reads it
    # What the activation gradients and the plan's B nodes read is in B too: a node without
    # a planned part joins it (the rule); one the plan puts in W cannot run before B.
    todo = [x for x in input_outs if isinstance(x, torch.fx.Node)]
    todo += [n for n, part in planned.items() if part == INPUT_GRAD]
    while todo:
        x = todo.pop()
        if x in in_b or x.op == "placeholder":
            continue
        if planned.get(x) == WEIGHT_GRAD:
            by = reader.get(x)
            raise BackwardSplitError(
                f"node {_what(x)} is planned in the weight gradients, but "
                + (f"node {_what(by)} of the input gradients reads it" if by is not None
                   else "it is an input gradient the previous stage waits for"))
        in_b.add(x)
        for i in x.all_input_nodes:
            reader.setdefault(i, x)
            todo.append(i)
    # A getitem of a B node's tuple goes with it (W then reads a tensor, not a tuple).
    for n in graph.nodes:
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in in_b \
                and planned.get(n) is None:
            in_b.add(n)
    return in_b, sum(part is None for part in planned.values())


def split_backward(bwd: torch.fx.GraphModule, n_param_grads: int,
                   parts: Mapping[str, str]) -> BackwardParts:
    """Cuts `bwd` (placeholders ..., output (*param_grads, *activation_grads)) into B and W.

    parts: planned node name -> "input_grad" / "weight_grad" (placements.json's "part"); a
    lowered node runs in its planned node's part (module docstring: the rest)."""
    graph = bwd.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    param_outs, input_outs = outs[:n_param_grads], outs[n_param_grads:]
    in_b, unplanned = _input_part(graph, input_outs, parts)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    body = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    in_w = [n for n in body if n not in in_b]
    w_set = set(in_w)
    # B values W reads, and parameter gradients B already computed: handed over.
    handoff: list = []
    for n in body:
        if n in in_b and (any(u in w_set for u in n.users) or n in param_outs):
            handoff.append(n)

    gi = torch.fx.Graph()
    env: dict = {}
    for p in placeholders:
        env[p] = gi.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for n in body:
        if n in in_b:
            env[n] = gi.node_copy(n, lambda a: env[a])
    gi.output(tuple([env[x] if x is not None else None for x in input_outs]
                    + [env[x] for x in handoff]))

    gw = torch.fx.Graph()
    wenv: dict = {}
    read = {i for n in in_w for i in n.all_input_nodes} | {x for x in param_outs if x is not None}
    weight_inputs = [k for k, p in enumerate(placeholders) if p in read]
    for k in weight_inputs:
        p = placeholders[k]
        wenv[p] = gw.placeholder(p.name)
        wenv[p].meta = dict(p.meta)
    for x in handoff:
        wenv[x] = gw.placeholder(f"handoff_{x.name}")
        wenv[x].meta = dict(x.meta)
    for n in in_w:
        wenv[n] = gw.node_copy(n, lambda a: wenv[a])
    gw.output(tuple(wenv[x] if x is not None else None for x in param_outs))
    # No dead-code elimination: every node kept is one the whole backward ran (collectives
    # included), so both parts issue the same collectives in the same order on every rank.
    gi_m = torch.fx.GraphModule(bwd, gi)
    gw_m = torch.fx.GraphModule(bwd, gw)
    return BackwardParts(gi_m, gw_m, len(input_outs), len(handoff),
                         sum(n.op == "call_function" for n in in_w), weight_inputs,
                         sum(n.op == "call_function" for n in body) - unplanned, unplanned)
