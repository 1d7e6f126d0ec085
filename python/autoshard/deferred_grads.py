"""Deferring a pipeline stage's gradient reductions to once per step.

    d = defer_reductions(split.backward, n_param_grads, full_numels)
    grads = d.backward(*saved, *tangents)   # outputs i in d.reductions: un-reduced, local
    acc[i] = the sum of grads[i] over the step's microbatches
    reduced = d.step(*[acc[i] for i in sorted(d.reductions)])   # once per step

A stage's backward graph is the lowered per-rank graph (autoshard.lower), so each parameter's
gradient ends in the collectives that bring it from the placement its last op produces (a
Partial sum over the data-parallel dims, or a shard) to the optimizer's placement: an all_reduce
or reduce_scatter of a Partial, an all_gather of a shard, with their waits and the local ops
around them (views, the chunk-and-concatenate of a scatter or gather on an inner dim, a
division).  The planner prices those once per step (C++ StageSolve::once_us: the optimizer's
inputs' redistributions), so the runtime must not run them once per microbatch.

Which gradients: the plan says (its schedule's "once_per_step", the parameters whose gradient's
placement differs from their own); this module does not choose them, it finds where to cut.
Per such parameter gradient output g, it finds the part of the graph that only feeds g, is
linear in one tensor x and holds at least one collective: the collectives whose results flow
only into g, everything after them on the way to g, and x, the value the first of them reads
(the local, un-reduced gradient), at most the full gradient's size.  The backward then
returns x in g's place, and the part is a graph of its own, run once per step on the sum of x
over the microbatches.  (The size limit keeps an activation that a gather moves before the
sum over tokens that makes it a gradient out of the accumulators: that gather stays per
microbatch, as the planner priced it, and the part starts at the gradient's own collective.)  The part being
linear (sums, concatenations, views, scalings), reducing the sum equals summing the reductions,
up to float rounding.  torch.distributed.pipelining's own FSDP path does the same: it turns
gradient sync off for every microbatch but the last (PipelineStage.backward_maybe_with_nosync).

A gradient whose collectives cannot be cut so (something else reads them, or an op between
them and g is not linear, or more than one un-reduced value enters them) keeps them in the
backward, run per microbatch as before; `kept` names such gradients with the reason, and
`left` the parameters whose planned redistribution into the optimizer (the lowering's
"grad:<param>" stamps) still has a collective in the backward.
"""
from __future__ import annotations

import operator
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.fx

from .inflight import enforce_in_flight, gather_buffer
from .lower import META_KEY, collective_kind
from .schedule import ScheduleError

#: ATen ops (overload packet names) linear in their tensor inputs whatever their other
#: arguments: views, copies, concatenations, sums.
_LINEAR = frozenset({
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "squeeze", "unsqueeze",
    "slice", "select", "narrow", "split", "split_with_sizes", "chunk", "unbind", "expand",
    "alias", "clone", "contiguous", "detach", "cat", "stack", "sum", "neg",
})
#: ATen ops linear in their first argument when the second is a Python number.
_SCALED = frozenset({"mul", "div"})
#: functional collectives linear in their input ("avg" is a sum scaled by the group size).
_SUM_OPS = ("sum", "avg")


@dataclass
class DeferredReductions:
    """A backward graph with the gradient reductions cut out.

    backward: the cut backward graph; output i < n_param_grads, for i in `reductions`, is the
        un-reduced local gradient (x above) instead of the reduced one.
    reductions: output index -> graph (x) -> the reduced gradient, as the backward gave it.
    kept: output index -> why an exclusive collective above it stays in the backward (one of
        the plan's per-microbatch collectives, or a reduction that cannot be cut).
    """

    backward: torch.fx.GraphModule
    lowered: torch.fx.GraphModule  # the backward it was cut from
    reductions: dict = field(default_factory=dict)
    kept: dict = field(default_factory=dict)
    collectives: int = 0  # collective nodes moved out of the backward
    step: Optional[torch.fx.GraphModule] = None  # all reductions in one graph (step_reduction)
    #: parameters (by the lowering's "grad:<param>" stamps) whose redistribution into the
    #: optimizer's placement still has a collective in the backward
    left: list = field(default_factory=list)
    #: the output indices the plan reduces once per step (None: a file without the list)
    planned: Optional[list] = None


def once_per_step_params(schedule: Optional[Mapping[str, Any]],
                         origin: str = "") -> Optional[set]:
    """The parameters whose gradients the plan reduces once per step ("once_per_step" of a
    pipelined plan's schedule: "grad:<param>:-1" edges); None for a file without the list."""
    if not schedule or "once_per_step" not in schedule:
        return None
    edges = schedule["once_per_step"]
    if not isinstance(edges, list) or not all(
            isinstance(e, str) and e.startswith("grad:") and e.endswith(":-1") for e in edges):
        raise ScheduleError(f"{origin}/schedule/once_per_step: expected "
                            f"[\"grad:<param>:-1\", ...]")
    return {e[len("grad:"):-len(":-1")] for e in edges}


def check_once_per_step(stage: int, deferred: Sequence[str], per_microbatch: Mapping[str, str],
                        planned: Optional[set], origin: str = "") -> None:
    """Warns where a stage's backward reduces gradients otherwise than the plan says: a planned
    once-per-step reduction still run per microbatch (`per_microbatch`: parameter -> why), or a
    deferred one the plan lists no reduction for (a collective the planner did not price)."""
    if per_microbatch:
        warnings.warn(f"stage {stage}: the gradient reductions of {dict(per_microbatch)} run "
                      f"per microbatch, not once per step as planned", stacklevel=3)
    if planned is None:
        return
    unplanned = sorted(set(deferred) - planned)
    if unplanned:
        warnings.warn(f"{origin}/schedule/once_per_step: stage {stage} reduces the gradients "
                      f"of {unplanned} once per step, which the plan does not reduce",
                      stacklevel=3)


def _name(node: torch.fx.Node) -> str:
    target = node.target
    packet = getattr(target, "_overloadpacket", None)
    return getattr(packet, "__name__", getattr(target, "__name__", ""))


def is_linear(node: torch.fx.Node) -> bool:
    """Whether `node` is linear in its tensor inputs (f(a + b) = f(a) + f(b) for one
    input; for several, jointly): the ops a gradient reduction is made of."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem or node.target is gather_buffer:
        return True
    kind = collective_kind(node)
    if kind is not None:
        if kind in ("all_reduce", "reduce_scatter"):
            return node.args[1] in _SUM_OPS
        return True
    if getattr(node.target, "namespace", "") == "_c10d_functional":
        return _name(node) == "wait_tensor"
    if getattr(node.target, "namespace", "") != "aten":
        return False
    name = _name(node)
    if name in _LINEAR:
        return True
    if name == "constant_pad_nd":  # DTensor's padding of an uneven shard: zeros
        return len(node.args) < 3 or node.args[2] == 0
    if name in _SCALED:
        return len(node.args) == 2 and isinstance(node.args[1], (int, float)) \
            and not isinstance(node.args[1], bool) and not node.kwargs
    return False


def _exclusive(graph: torch.fx.Graph, out_node: torch.fx.Node, n_param_grads: int) -> dict:
    """node -> the param-gradient output index it alone feeds (through any path), for the
    nodes whose every use leads to exactly one such output."""
    outs = list(out_node.args[0])
    slots: dict = {}
    for i, x in enumerate(outs):
        if isinstance(x, torch.fx.Node):
            slots.setdefault(x, set()).add(i)
    owner: dict = {}
    for node in reversed(list(graph.nodes)):
        if node.op in ("placeholder", "output") or not node.users:
            continue
        targets: set = set()
        ok = True
        for u in node.users:
            if u is out_node:
                targets |= slots[node]
            elif u in owner:
                targets.add(owner[u])
            else:
                ok = False
                break
        if ok and len(targets) == 1:
            (i,) = targets
            if i < n_param_grads:
                owner[node] = i
    return owner


def _linear_ancestors(g: torch.fx.Node, i: int, owner: dict) -> set:
    """g and its ancestors reached through exclusive linear ops."""
    linear: set = set()
    todo = [g]
    while todo:
        x = todo.pop()
        if x in linear or owner.get(x) != i or not is_linear(x):
            continue
        linear.add(x)
        todo.extend(x.all_input_nodes)
    return linear


def _part(start: torch.fx.Node, linear: set, pos: dict) -> tuple[list, list]:
    """(start and the nodes of `linear` computed from it, in graph order (`pos`); the values
    entering them from elsewhere)."""
    in_part: set = set()
    todo = [start]
    while todo:
        x = todo.pop()
        if x not in in_part:
            in_part.add(x)
            todo.extend(u for u in x.users if u in linear)
    part = sorted(in_part, key=pos.__getitem__)
    entering: list = []
    for node in part:
        for a in node.all_input_nodes:
            if a not in in_part and a not in entering:
                entering.append(a)
    return part, entering


def _numel(node: torch.fx.Node) -> Optional[int]:
    val = node.meta.get("val")
    return val.numel() if isinstance(val, torch.Tensor) else None


def _cut(g: torch.fx.Node, i: int, owner: dict, limit: Optional[int],
         pos: dict) -> tuple[list, str]:
    """The part to cut out for gradient output g (empty: none) and, when g has exclusive
    collectives but no part, why.

    The part starts at the earliest of g's exclusive linear ancestors whose part holds a
    collective and reads one value x (the local gradient: a views' or a padding's input, or
    the collective's own) of at most `limit` elements (the full gradient's size: an
    accumulator never holds more than the un-sharded gradient, as torch's FSDP no-sync
    accumulation does; a larger x, an activation a gather moves before a sum, stays per
    microbatch, as the planner priced it)."""
    linear = _linear_ancestors(g, i, owner)
    why = ""
    for s in sorted(linear, key=pos.__getitem__):
        part, entering = _part(s, linear, pos)
        if not any(collective_kind(n) is not None for n in part):
            continue
        if len(entering) != 1:
            why = why or "more than one value enters its reduction"
        elif limit is not None and (_numel(entering[0]) is None
                                    or _numel(entering[0]) > limit):
            why = why or "its un-reduced value is larger than the gradient"
        else:
            return part, ""
    if not why:
        # no linear collective: one behind a non-linear op (a cast) still counts
        seen: set = set()
        todo = [g]
        while todo:
            x = todo.pop()
            if x in seen or owner.get(x) != i:
                continue
            seen.add(x)
            if collective_kind(x) in ("all_reduce", "reduce_scatter"):
                why = "an op between its reduction and the gradient is not linear"
                break
            if x in linear or len(x.all_input_nodes) == 1:
                todo.extend(x.all_input_nodes)
    return [], why


def defer_reductions(bwd: torch.fx.GraphModule, n_param_grads: int,
                     limits: Optional[Sequence[Optional[int]]] = None,
                     in_flight: Optional[int] = None,
                     planned: Optional[Sequence[int]] = None) -> DeferredReductions:
    """Cuts the gradient reductions out of `bwd` (outputs: n_param_grads parameter gradients,
    then the activations' gradients); `bwd` itself is left as it was.

    limits: per parameter gradient, the most elements its accumulator may hold (the full
    parameter's numel); None: no limit.
    planned: the parameter gradients (output indices) whose reductions the plan runs once per
    step (its "once_per_step"): only those are cut, the others stay in the backward as
    planned.  None: every one that can be cut (a file without the list).
    in_flight: the most collectives pending at once in the graphs it builds (autoshard.inflight;
        1 on gloo), None for no limit."""
    gm = torch.fx.GraphModule(bwd, _copy_graph(bwd.graph))
    graph = gm.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    owner = _exclusive(graph, out_node, n_param_grads)
    pos = {n: k for k, n in enumerate(graph.nodes)}
    result = DeferredReductions(backward=gm, lowered=bwd,
                                planned=None if planned is None else sorted(planned))
    cut_out: list = []  # the nodes of the cut parts, in graph order per part
    for i in range(n_param_grads):
        g = outs[i]
        if not isinstance(g, torch.fx.Node) or (planned is not None and i not in planned):
            continue
        part, why = _cut(g, i, owner, limits[i] if limits is not None else None, pos)
        if not part:
            if why:
                result.kept[i] = why
            continue
        x = next(a for n in part for a in n.all_input_nodes if a not in part)
        result.reductions[i] = _extract(gm, part, x, g)
        cut_out.extend(part)
        result.collectives += sum(collective_kind(n) is not None for n in part)
        outs[i] = x
    if result.reductions:
        out_node.args = (tuple(outs),)
        for node in reversed(cut_out):
            graph.erase_node(node)
        graph.lint()
    gm.recompile()
    for node in graph.nodes:  # the planned redistributions into the optimizer still here
        edge = node.meta.get(META_KEY, {}).get("edge", "")
        if collective_kind(node) is not None and edge.startswith("grad:"):
            name = edge[len("grad:"):].rsplit(":", 1)[0]
            if name not in result.left:
                result.left.append(name)
    enforce_in_flight(gm, in_flight)
    result.step = step_reduction(result)
    if result.step is not None:
        enforce_in_flight(result.step, in_flight)
    return result


def _copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    new = torch.fx.Graph()
    env: dict = {}
    out = new.graph_copy(graph, env)
    new.output(out)
    return new


def _extract(root: torch.fx.GraphModule, part: list, x: torch.fx.Node,
             g: torch.fx.Node) -> torch.fx.GraphModule:
    """The graph (x) -> g of the nodes of `part`."""
    new = torch.fx.Graph()
    env: dict = {x: new.placeholder("grad")}
    env[x].meta = dict(x.meta)
    for node in part:
        env[node] = new.node_copy(node, lambda a: env[a])
    new.output(env[g])
    mod = torch.fx.GraphModule(root, new)
    mod.recompile()
    return mod


def step_reduction(d: DeferredReductions) -> Optional[torch.fx.GraphModule]:
    """One graph running all of `d.reductions`: (*x in output-index order) -> (*reduced).
    Every collective is issued before the first wait, so they overlap one another (a
    collective that reads an earlier one's result, as over a second mesh dim, follows its
    wait); every rank of the stage runs the same graph, so they stay matched.  None when
    nothing was deferred."""
    if not d.reductions:
        return None
    new = torch.fx.Graph()
    parts = []
    for i in sorted(d.reductions):
        nodes = list(d.reductions[i].graph.nodes)
        ph = next(n for n in nodes if n.op == "placeholder")
        out = next(n for n in nodes if n.op == "output")
        env = {ph: new.placeholder(f"grad_{i}")}
        env[ph].meta = dict(ph.meta)
        parts.append((nodes, out, env))
    waited: set = set()
    late: list = []
    for nodes, _, env in parts:  # issue: nodes before any wait
        for n in nodes:
            if n.op != "call_function":
                continue
            if _name(n) == "wait_tensor" or any(a in waited for a in n.all_input_nodes):
                waited.add(n)
                late.append((n, env))
            else:
                env[n] = new.node_copy(n, lambda a, env=env: env[a])
    for n, env in late:  # then wait, and what follows
        env[n] = new.node_copy(n, lambda a, env=env: env[a])
    new.output(tuple(env[out.args[0]] for _, out, env in parts))
    mod = torch.fx.GraphModule(torch.nn.Module(), new)
    mod.recompile()
    return mod
