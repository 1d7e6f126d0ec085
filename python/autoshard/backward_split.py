"""A stage's backward graph cut in two for the zero-bubble pipeline schedules.

    parts = split_backward(split.backward, n_param_grads)
    input_grads, handoff = parts.run_input(*saved, *tangents)   # B: what the previous stage waits for
    kept = parts.weight_args((*saved, *tangents))               # what W reads of those
    param_grads = parts.run_weight(*kept, *handoff)              # W: later, in the bubble

torch.distributed.pipelining's ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble run each
stage's backward as two actions, I (input gradients) and W (weight gradients), the split of Qi
et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024).  A stage here is one autograd Function
over its lowered backward graph (autoshard.partition), whose outputs are the parameters'
gradients, then the gradients of the activations it received.  The rule is the planner's
(src/pipeline/backward_split.h): a backward node is in B when an activation gradient depends on
it, else in W.  B's graph computes the activation gradients and hands over the values of its
nodes that W reads (the output gradients, dY of each dW = X^T dY); W's graph computes the
parameter gradients from those and the saved forward values.  Both run the same ops as the
whole backward, in the same order within each part, so the gradients are the same numbers;
the collectives W keeps run on every rank of a stage in the schedule's common order (the
gradient reductions are cut out before the split and run once per step:
autoshard.deferred_grads).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.fx


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

    def weight_args(self, args: Sequence[Any]) -> list:
        """The backward's arguments W reads (kept from B to W)."""
        return [args[i] for i in self.weight_inputs]

    def run_input(self, *args: Any) -> tuple[list, list]:
        out = list(self.input(*args))
        return out[:self.n_input_grads], out[self.n_input_grads:]

    def run_weight(self, *args: Any) -> list:
        return list(self.weight(*args))


def _ancestors(roots: Sequence[torch.fx.Node]) -> set:
    seen: set = set()
    todo = [r for r in roots if isinstance(r, torch.fx.Node)]
    while todo:
        x = todo.pop()
        if x in seen or x.op == "placeholder":
            continue
        seen.add(x)
        todo.extend(x.all_input_nodes)
    return seen


def split_backward(bwd: torch.fx.GraphModule, n_param_grads: int) -> BackwardParts:
    """Cuts `bwd` (placeholders ..., output (*param_grads, *activation_grads)) into B and W."""
    graph = bwd.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    param_outs, input_outs = outs[:n_param_grads], outs[n_param_grads:]
    in_b = _ancestors(input_outs)
    # A getitem of a B node's tuple goes with it (W then reads a tensor, not a tuple).
    for n in graph.nodes:
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in in_b:
            in_b.add(n)
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
                         sum(n.op == "call_function" for n in in_w), weight_inputs)


def part_mismatches(parts: BackwardParts, planned: Mapping[str, str]) -> list:
    """Nodes the split put in the other part than the plan (`planned`: planned node name ->
    "input_grad" or "weight_grad", placements.json's "part" of a pipelined plan, C++
    pipeline/backward_split.h), as "node (planned part)"; [] when both agree.  Lowered nodes
    carry the planned node they came from (autoshard.lower's stamp)."""
    from .lower import META_KEY

    out = []
    for gm, other in ((parts.input, "weight_grad"), (parts.weight, "input_grad")):
        for n in gm.graph.nodes:
            name = n.meta.get(META_KEY, {}).get("node") if n.op == "call_function" else None
            if name is not None and planned.get(name) == other:
                out.append(f"{n.name} ({name}: {other})")
    return out
