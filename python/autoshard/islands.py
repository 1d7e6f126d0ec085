"""Eager islands: the applied step runs data-dependent module calls as the user wrote them.

The tracer decides what meta tensors cannot know by a policy made for planning (upper-bound
sizes, default branches: docs/tracer.md, "Data-dependent code"), and marks each call of a
module that took such a decision (tracer/islands.py).  Replaying those recorded ops would run
the policy's decisions instead of the data's (every token through every expert, the default
branch), so the runtime cuts each island out of the traced joint graph and puts two nodes in
its place:

* `island_forward`: the island's tensor arguments, parameters and buffers, each brought to
  Replicate (DTensor gathers them), then the module's own `forward` runs eagerly on the full
  local tensors with autograd recording (`functional_call`, the real `nonzero`, the real
  `.item()` branch); its results are Replicate DTensors that the plan's consumers take to
  their planned placements.
* `island_backward`: at the island's gradient marks, the gradients arriving at its results
  (brought to Replicate) go through the recorded autograd graph (`torch.autograd.grad`); the
  gradients of its tensor arguments and parameters leave as Replicate DTensors (a parameter's
  gradient then goes to the parameter's placement: a local slice).

Both are custom ops (`autoshard::island_forward` / `island_backward`, defined on first use), so
the lowering (autoshard.lower, make_fx on fake tensors) records each as one node with the
shapes the trace saw, and the lowered graph calls them eagerly.  Every rank runs the whole
island on the same gathered data: correct whatever the code does, at the cost of redundant
work on the island; the rest of the step runs at its planned placements.  Limits: an island's
results must have the traced shapes (a module returning a data-dependent size is refused with
its name), a parameter of an island may not be used outside it, random draws inside an island
use each rank's generator (seed ranks alike), buffers an island changes in place are not
written back, and the backward differentiates the island's latest forward (a training step's
forward then backward; not two forwards before one backward).
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any, Optional, Sequence

import torch
import torch.fx

__all__ = ["Island", "IslandError", "cut_islands", "run_eagerly", "islands_run"]


class IslandError(ValueError):
    """An island the runtime cannot cut out of the graph (the message names the module)."""


_REGISTRY: dict[int, "Island"] = {}
_KEYS = itertools.count()
_OPS: Optional[tuple] = None


@dataclasses.dataclass
class Island:
    """One island call at run time."""

    key: int
    call: Any                    # tracer.islands.IslandCall
    module: torch.nn.Module      # the submodule whose forward runs
    mesh: Any                    # the DeviceMesh
    state_names: list            # parameter then buffer names, relative to the module
    n_params: int
    param_grad: list             # per parameter: whether it takes a gradient
    in_shapes: list              # (shape, dtype) per tensor argument
    state_shapes: list           # (shape, dtype) per parameter and buffer
    state_index: list = dataclasses.field(default_factory=list)  # their placeholder indices
    saved: list = dataclasses.field(default_factory=list)  # the latest forward's record
    runs: int = 0                # forwards run (eagerly, on real data)

    @property
    def label(self) -> str:
        """How messages name the island: its module, or "<root module>"."""
        return self.call.module or "<root module>"

    def wrt_shapes(self) -> list:
        """(shape, dtype) of each gradient island_backward returns."""
        ins = [s for s, g in zip(self.in_shapes, self.call.in_grad) if g is not None]
        params = [s for s, g in zip(self.state_shapes[:self.n_params], self.param_grad) if g]
        return ins + params

    def run_forward(self, inputs: Sequence[torch.Tensor]) -> list:
        """The module's forward on full local tensors (autograd recorded); detached results."""
        from .tracer.islands import fill_template
        from .tracer.trace import flatten_tensors

        self.runs += 1
        n = len(self.call.in_nodes)
        args = [t.detach().requires_grad_(g is not None and t.is_floating_point())
                for t, g in zip(inputs[:n], self.call.in_grad)]
        state = [t.detach().requires_grad_(k < self.n_params and self.param_grad[k])
                 for k, t in enumerate(inputs[n:])]
        a, kw = fill_template(self.call.args_template, args)
        with torch.enable_grad():
            out = torch.func.functional_call(self.module, dict(zip(self.state_names, state)),
                                             tuple(a), kw)
        outs = flatten_tensors(out)
        got = [(tuple(o.shape), o.dtype) for o in outs]
        want = [(tuple(s), d) for s, d in self.call.out_shapes]
        if got != want:
            fix = ("the runtime cannot run a model whose own output size depends on the data"
                   if not self.call.module else
                   "a module whose result size depends on the data cannot be an island; "
                   "move the data-dependent code into a module whose results keep their size")
            raise IslandError(f"island {self.label}: its results {got} differ from the traced "
                              f"{want}: {fix}")
        self.saved = [(args, state, outs)]  # the latest forward (one forward per backward)
        return [o.detach().clone() for o in outs]

    def run_backward(self, grads: Sequence[torch.Tensor]) -> list:
        """Gradients of the arguments (those marked) and parameters, from the recorded graph."""
        if not self.saved:
            raise IslandError(f"island {self.label}: backward without a forward")
        args, state, outs = self.saved.pop()
        wrt = [a for a, g in zip(args, self.call.in_grad) if g is not None]
        wrt += [p for p, g in zip(state[:self.n_params], self.param_grad) if g]
        with_grad = [i for i, g in enumerate(self.call.out_grad) if g is not None]
        pairs = [(outs[i], g) for i, g in zip(with_grad, grads) if outs[i].requires_grad]
        res = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                  allow_unused=True) if pairs else [None] * len(wrt)
        return [r if r is not None else torch.zeros_like(w) for r, w in zip(res, wrt)]


def _ops() -> tuple:
    """The custom ops (forward, backward), defined once per process on first use."""
    global _OPS
    if _OPS is not None:
        return _OPS

    @torch.library.custom_op("autoshard::island_forward", mutates_args=())
    def island_forward(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return _REGISTRY[key].run_forward(inputs)

    @island_forward.register_fake
    def _(key: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        dev = inputs[0].device
        return [torch.empty(s, dtype=d, device=dev) for s, d in _REGISTRY[key].call.out_shapes]

    @torch.library.custom_op("autoshard::island_backward", mutates_args=())
    def island_backward(key: int, grads: list[torch.Tensor],
                        outs: list[torch.Tensor]) -> list[torch.Tensor]:
        return _REGISTRY[key].run_backward(grads)

    @island_backward.register_fake
    def _(key: int, grads: list[torch.Tensor], outs: list[torch.Tensor]) -> list[torch.Tensor]:
        dev = outs[0].device
        return [torch.empty(s, dtype=d, device=dev) for s, d in _REGISTRY[key].wrt_shapes()]

    _OPS = (island_forward, island_backward)
    return _OPS


def _full(t: Any, mesh) -> Any:
    """A DTensor brought to Replicate, as its local (full) tensor; other values as they are."""
    from torch.distributed.tensor import DTensor, Replicate

    from .local import redistribute

    if isinstance(t, DTensor):
        return redistribute(t, mesh, [Replicate()] * mesh.ndim).to_local()
    return t


def _replicated(ts: Sequence[torch.Tensor], mesh) -> list:
    from torch.distributed.tensor import DTensor, Replicate

    return [DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False) for t in ts]


def island_forward(key: int, *tensors: Any) -> list:
    """The forward node's target (StepRunner calls it with DTensors); key: the Island's."""
    island = _REGISTRY[key]
    local = [_full(t, island.mesh) for t in tensors]
    return _replicated(_ops()[0](island.key, local), island.mesh)


def island_backward(key: int, n_grads: int, *tensors: Any) -> list:
    """The backward node's target: n_grads arriving gradients, then the island's results."""
    island = _REGISTRY[key]
    local = [_full(t, island.mesh) for t in tensors]
    return _replicated(_ops()[1](island.key, local[:n_grads], local[n_grads:]), island.mesh)


# --- cutting the islands out of the traced graph ---------------------------------------------
def _phase(node: torch.fx.Node) -> str:
    return node.meta.get("autoshard", {}).get("phase", "forward")


def _shape_of(node: torch.fx.Node) -> tuple:
    from .tracer.dispatch_trace import OUT_META

    metas = node.meta.get(OUT_META)
    if not metas or metas[0] is None or metas[0] == "nontensor":
        raise IslandError(f"node {node.name}: no recorded tensor metadata")
    shape, dtype = metas[0]
    return tuple(shape), dtype


def cut_islands(traced: Any, names: dict, model: torch.nn.Module, mesh) -> tuple:
    """(GraphModule, names) of the traced step with every island call replaced by its forward
    and backward nodes (module docstring); names (FX node -> plan name) carried over to the
    new graph's nodes.  The traced step itself is not changed."""
    graph = torch.fx.Graph()
    val_map: dict = {}
    graph.output(graph.graph_copy(traced.gm.graph, val_map))
    new_names = {val_map[n]: nm for n, nm in names.items() if n in val_map}
    by_name = {n.name: n for n in graph.nodes}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for call in traced.islands:
        island = _make_island(call, traced, placeholders, model, mesh)
        _cut(graph, by_name, call, island, placeholders, traced)
    graph.lint()
    gm = torch.fx.GraphModule(traced.gm, graph)
    alive = set(graph.nodes)
    return gm, {n: nm for n, nm in new_names.items() if n in alive}


def _state(traced: Any, module: str) -> tuple:
    """(placeholder indices, relative names) of the module's parameters, then its buffers."""
    prefix = module + "." if module else ""
    idx, rel = [], []
    for kind in ("parameter", "buffer"):
        for i, (k, n) in enumerate(zip(traced.placeholder_kinds, traced.placeholder_names)):
            if k == kind and n.startswith(prefix):
                idx.append(i)
                rel.append(n[len(prefix):])
    return idx, rel


def _make_island(call, traced, placeholders, model, mesh) -> Island:
    idx, rel = _state(traced, call.module)
    n_params = sum(1 for i in idx if traced.placeholder_kinds[i] == "parameter")
    grads = set(traced.grad_params)
    param_grad = [traced.placeholder_names[i] in grads for i in idx[:n_params]]
    island = Island(next(_KEYS), call, model.get_submodule(call.module), mesh, rel, n_params,
                    param_grad, [], [(tuple(traced.flat_args[i].shape), traced.flat_args[i].dtype)
                                     for i in idx])
    island.state_index = idx
    _REGISTRY[island.key] = island
    return island


def _cut(graph, by_name, call, island: Island, placeholders, traced) -> None:
    where = f"island {island.label}"
    try:
        ins = [by_name[n] for n in call.in_nodes]
        outs = [by_name[n] for n in call.out_nodes]
        inner = [by_name[n] for n in call.inner]
        gout = [by_name[n] if n else None for n in call.out_grad]
        gin = [by_name[n] if n else None for n in call.in_grad]
    except KeyError as e:
        raise IslandError(f"{where}: mark {e.args[0]} not in the graph (trace again)") from None
    island.in_shapes = [_shape_of(n) for n in ins]
    state = [placeholders[i] for i in island.state_index]
    out_node = next(n for n in graph.nodes if n.op == "output")
    grad_args = list(out_node.args[0][1:])
    pg = {}
    for k, name in enumerate(traced.grad_params):
        if name in [traced.placeholder_names[i] for i in island.state_index[:island.n_params]]:
            pg[name] = grad_args[k]
    # forward node and its results
    with graph.inserting_before(ins[0]):
        fwd = graph.call_function(island_forward, (island.key, *[n.args[0] for n in ins], *state))
    with graph.inserting_after(fwd):
        results = []
        for k in range(len(outs)):
            results.append(graph.call_function(operator.getitem, (fwd, k)))
    for o, r in zip(outs, results):
        o.replace_all_uses_with(r)
    fwd.meta["autoshard"] = {"phase": "forward", "island": island.label}
    dead = set(ins) | set(inner) | set(outs)
    marks = [g for g in gout if g is not None]
    if marks:
        order = {n: i for i, n in enumerate(graph.nodes)}
        last = max(marks, key=lambda n: order[n])
        with graph.inserting_after(last):
            bwd = graph.call_function(island_backward, (island.key, len(marks), *marks, *results))
        bwd.meta["autoshard"] = {"phase": "backward", "island": island.label}
        k = 0
        targets = [g for g in gin if g is not None]
        param_names = [traced.placeholder_names[i] for i in island.state_index[:island.n_params]]
        targets += [pg.get(n) for n, g in zip(param_names, island.param_grad) if g]
        after = bwd
        for k, t in enumerate(targets):
            with graph.inserting_after(after):
                after = graph.call_function(operator.getitem, (bwd, k))
            if t is not None:
                t.replace_all_uses_with(after)
        dead |= _backward_region(set(marks), dead, set(t for t in targets if t is not None))
    _erase(graph, dead, where)


def _backward_region(marks: set, forward: set, results: set) -> set:
    """Backward nodes reachable from the island's forward nodes or gradient marks that lead to
    its gradient results (the results included)."""
    down, todo = set(), list(marks | forward)
    while todo:
        n = todo.pop()
        for u in n.users:
            if u not in down and u.op == "call_function" and _phase(u) == "backward":
                down.add(u)
                todo.append(u)
    up, todo = set(), list(results)
    while todo:
        n = todo.pop()
        if n in up:
            continue
        up.add(n)
        todo.extend(n.all_input_nodes)
    return (down & up) | results


def _erase(graph, dead: set, where: str) -> None:
    for node in reversed(list(graph.nodes)):
        if node not in dead:
            continue
        if node.users:
            user = next(iter(node.users))
            raise IslandError(f"{where}: node {node.name} of the island is read by {user.name} "
                              f"outside it (a parameter or value shared with other code)")
        graph.erase_node(node)


def islands_run() -> dict:
    """Module name -> forwards run eagerly so far in this process, over every applied step."""
    out: dict = {}
    for island in _REGISTRY.values():
        out[island.call.module] = out.get(island.call.module, 0) + island.runs
    return out


def _eager_forward(key: int, inputs: list) -> list:
    return _REGISTRY[key].run_forward(inputs)


def _eager_backward(key: int, grads: list, outs: list) -> list:
    return _REGISTRY[key].run_backward(grads)


def run_eagerly(gm: torch.fx.GraphModule) -> int:
    """Points the lowered graph's island op nodes at plain Python functions (returns how many).

    A custom op's kernel runs below the dispatcher's autograd keys, where no autograd graph is
    recorded; the island's forward must record one for its backward, so the lowered graph calls
    the island's Python code directly (the ops stay in the graph for make_fx's shapes only)."""
    if _OPS is None:
        return 0
    swap = {_OPS[0]._opoverload: _eager_forward, _OPS[1]._opoverload: _eager_backward}
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in swap:
            node.target = swap[node.target]
            n += 1
    if n:
        gm.recompile()
    return n
