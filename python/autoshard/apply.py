"""Run a plan: the traced training step on DTensors, with every op at its planned placements.

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from autoshard.apply import apply_placement

    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    step = apply_placement(model, "out/placements.json", mesh, loss_fn=loss_fn)
    opt = torch.optim.AdamW(step.parameters(), lr=1e-3)
    local = [t[sl] for t, sl in zip((tokens, labels), step.input_slices())]
    loss = step(*local)                # this rank's shards of the inputs, then the loss targets
    loss.backward(); opt.step()        # parameters and gradients are DTensors, laid out as planned

How it runs.  The training step (forward, loss, backward) is traced once into an ATen FX graph
(autoshard.tracer, the same graph `autoshard plan` planned, so node names match the plan's).
An interpreter walks that graph: before each op it redistributes every tensor input to the
spec the plan chose for that input (DTensor issues the collective), runs the op on DTensors
(DTensor's sharding propagation then finds the planned strategy, whose inputs match exactly),
and checks that the output came out at the planned placement (a mismatch is redistributed
and counted in `StepRunner.mismatches`).  A view with nested cuts (a context-parallel linear
layer's [b, s, h] <-> [b * s, h], strategy/view_rules.cc) runs on the local shard instead
(`autoshard.local.nested_view`): DTensor would gather what the plan keeps split.  The graph's
gradient outputs are redistributed to their parameter's placement (the plan's parameter <-
gradient edge) and handed to autograd, so `loss.backward()` fills `p.grad` with DTensors laid
out like `p`.

Inputs are each rank's local shards, as a per-rank data loader reads them (`input_slices()`
says which part of the global batch; `shard_inputs(*full)` cuts them from full tensors).
Parameters are cut locally from `model` (Replicate -> Shard needs no communication), so every
rank must hold the same initial weights (same seed, or a loaded checkpoint).
"""
from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate

from .context_parallel import ContextParallelError, check_uncovered, planned_layout, run_node
from .deferred_grads import defer_reductions
from .inflight import in_flight_limit
from .local import local_slice, nested_view, redistribute
from .lower import META_KEY, lower_step
from .module import ShardedModule
from .partition import partition
from .plan_file import (NodePlan, PlacementsArg, PlanError, load_placements, placements_str,
                        planned_order, planned_paths, planned_twins, read_placements)
from .stages import SHARED, StageError, cut_stages

#: build_stages(once_per_step=...): a plan file without the list (an older writer): every
#: gradient reduction the backward can run once per step does
ALL_DEFERRABLE = frozenset({"*"})



# --- graph <-> plan names -------------------------------------------------------------------
def _schema_slots(fx_node: torch.fx.Node) -> list:
    """Where the tensor inputs of `fx_node` sit, in graph-JSON order (the tracer's export:
    schema order, tensor lists flattened, None entries skipped): ('a', i[, j]) or ('k', n[, j])."""
    schema = getattr(fx_node.target, "_schema", None)
    if schema is None:
        raise PlanError(f"node {fx_node.name}: {fx_node.target} is not an ATen op")
    slots = []
    for i, arg in enumerate(schema.arguments):
        if i < len(fx_node.args):
            loc, value = ("a", i), fx_node.args[i]
        elif arg.name in fx_node.kwargs:
            loc, value = ("k", arg.name), fx_node.kwargs[arg.name]
        else:
            continue
        if isinstance(value, torch.fx.Node):
            slots.append(loc)
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
            slots.extend((*loc, j) for j, v in enumerate(value) if v is not None)
    return slots


def _get(args: list, kwargs: dict, loc):
    v = args[loc[1]] if loc[0] == "a" else kwargs[loc[1]]
    return v[loc[2]] if len(loc) == 3 else v


def _set(args: list, kwargs: dict, loc, value) -> None:
    if len(loc) == 3:
        seq = list(args[loc[1]] if loc[0] == "a" else kwargs[loc[1]])
        seq[loc[2]] = value
        value = seq
    if loc[0] == "a":
        args[loc[1]] = value
    else:
        kwargs[loc[1]] = value


def graph_names(gm: torch.fx.GraphModule, graph: dict, placeholder_names: Sequence[str]) -> dict:
    """FX node -> graph JSON node name.  The export keeps FX names for ops (adding '_k' only on a
    clash with an earlier name) and names placeholders after their parameter / input."""
    by_name = {n["name"]: n for n in graph["nodes"]}
    names = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for fx_node, pname in zip(placeholders, placeholder_names):
        names[fx_node] = pname
    from autoshard.tracer.export import op_name

    taken = set(names.values())
    constants: dict = {}  # get_attr target -> exported buffer name (one node per target)
    for fx_node in gm.graph.nodes:
        if fx_node.op == "get_attr":
            nm = constants.get(fx_node.target, str(fx_node.target).replace(".", "_"))
            if by_name.get(nm, {}).get("kind") == "buffer":
                names[fx_node] = constants[fx_node.target] = nm
                taken.add(nm)
            continue
        if fx_node.op != "call_function" or fx_node.target is operator.getitem:
            continue
        base, k, nm = fx_node.name, 1, fx_node.name
        while nm in taken or (nm in by_name and by_name[nm].get("op") != op_name(fx_node.target)):
            nm, k = f"{base}_{k}", k + 1
            if k > 64:
                break
        if nm in by_name and by_name[nm].get("op") == op_name(fx_node.target):
            names[fx_node] = nm
            taken.add(nm)
    return names


# --- the interpreter ------------------------------------------------------------------------
@dataclass
class Mismatch:
    """An op whose output DTensor chose differently from the plan (redistributed after)."""
    node: str
    planned: str
    got: str


@dataclass
class StepRunner:
    """Runs the traced joint graph on DTensors at the plan's placements."""

    gm: torch.fx.GraphModule
    plan: dict                   # graph JSON name -> NodePlan
    names: dict                  # fx node -> graph JSON name
    mesh: DeviceMesh
    mismatches: list = field(default_factory=list)
    #: Called as hook(node_name, slot) around each input redistribution ("grad:<param>" for
    #: the parameter <- gradient edges); the audit uses it to attribute collectives to edges.
    edge_hook: Optional[Callable[[str, Any], Any]] = None
    #: the sequence's layout (context_parallel.SequenceLayout): head-tail order or natural
    layout: Any = None
    #: load-balanced CP nodes run with contiguous positions (the plan cuts the sequence
    #: after its sources, so the shards hold contiguous pieces; context_parallel.py)
    unbalanced: list = field(default_factory=list)
    #: "consumer:slot" / "grad:<param>:-1" -> the placements between the collectives the plan
    #: chose for that redistribution (schedule "via"); DTensor's own order elsewhere
    via: dict = field(default_factory=dict)
    #: view node -> its first twin (schedule "twins"): the view reads the input its twin was
    #: redistributed to, so the redistribution runs once (planner/twin_views.h)
    twins: dict = field(default_factory=dict)
    #: the traced graph's nodes in the order the plan runs them (schedule "order",
    #: planned_order); None: the graph's own order
    order: Optional[list] = None

    def placements_of(self, name: str) -> NodePlan:
        """The plan's placements of graph node `name` (PlanError when the plan lacks it)."""
        p = self.plan.get(name)
        if p is None:
            raise PlanError(f"node {name}: not in the placements (plan made for another graph?)")
        return p

    def _to(self, t: Any, placements: list, name: str, slot: Any) -> Any:
        if not isinstance(t, DTensor):
            return t
        if tuple(t.placements) == tuple(placements):
            return t
        with (self.edge_hook(name, slot) if self.edge_hook else _null()):
            for state in self.via.get(f"{name}:{slot}", ()):
                t = redistribute(t, self.mesh, state)
            return redistribute(t, self.mesh, placements)

    def _input(self, t: Any, placements: list, name: str, k: int, shared: "_SharedInputs") -> Any:
        """Input `k` of node `name` at its planned placements: a twin view takes the input its
        first twin was redistributed to; the others redistribute (and a first twin keeps it)."""
        if k == 0 and name in self.twins:
            got = shared.take(self.twins[name])
            if got is not None and tuple(got.placements) == tuple(placements):
                return got
        t = self._to(t, placements, name, k)
        if k == 0:
            shared.keep(name, t)
        return t

    def _wrap(self, t: Any, placements: Optional[list], name: str, k: int) -> Any:
        """Brings an op output to its planned placement."""
        if placements is None or not isinstance(t, torch.Tensor):
            return t
        if not isinstance(t, DTensor):  # a creation op (ones, scalar_tensor): same on all ranks
            with (self.edge_hook(name, "output") if self.edge_hook else _null()):
                t = DTensor.from_local(t, self.mesh, [Replicate()] * self.mesh.ndim,
                                       run_check=False)
                return redistribute(t, self.mesh, placements) if any(
                    not p.is_replicate() for p in placements) else t
        if tuple(t.placements) != tuple(placements):
            self.mismatches.append(Mismatch(f"{name}" + (f"[{k}]" if k else ""),
                                            placements_str(placements),
                                            placements_str(t.placements)))
            with (self.edge_hook(name, "output") if self.edge_hook else _null()):
                t = redistribute(t, self.mesh, placements)
        return t

    def _live(self) -> set:
        """Nodes the outputs depend on (the export drops the others)."""
        if getattr(self, "_live_nodes", None) is None:
            live, todo = set(), [n for n in self.gm.graph.nodes if n.op == "output"]
            while todo:
                n = todo.pop()
                if n in live:
                    continue
                live.add(n)
                todo.extend(n.all_input_nodes)
            self._live_nodes = live
        return self._live_nodes

    def run(self, flat_args: Sequence[Any]) -> list:
        """Runs the lowered step on this rank's flat arguments (parameters, buffers, inputs in
        placeholder order); returns the graph's outputs."""
        env: dict = {}
        live = self._live()
        it = iter(flat_args)
        device = torch.device(self.mesh.device_type)
        out = None
        shared = _SharedInputs(self.twins)
        for node in self.order or self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(it)
                continue
            if node.op == "output":
                out = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
                break
            if node.op == "get_attr":
                v = getattr(self.gm, node.target)
                if isinstance(v, torch.Tensor) and v.is_meta and v.numel() == 0:
                    # an empty constant holds no data (e.g. a Hugging Face KV cache's initial
                    # keys): the same empty tensor on the step's device
                    v = torch.empty(v.shape, dtype=v.dtype, device=device)
                if isinstance(v, torch.Tensor) and v.is_meta:
                    raise PlanError(f"node {node.name}: a tensor constant traced on meta")
                if isinstance(v, torch.Tensor) and node in self.names:
                    # a constant of the step (e.g. a target the loss closes over): at its
                    # planned placement, cut locally like an input
                    v = local_slice(v.to(device), self.mesh,
                                     self.placements_of(self.names[node]).outputs[0])
                env[node] = v
                continue
            if node not in live:
                continue
            args = list(torch.fx.node.map_arg(node.args, lambda n: env[n]))
            kwargs = dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n]))
            if node.target is operator.getitem or node not in self.names:
                if "device" in kwargs and kwargs["device"] == torch.device("meta"):
                    kwargs["device"] = device
                env[node] = node.target(*args, **kwargs)
                continue
            name = self.names[node]
            plan = self.placements_of(name)
            slots = _schema_slots(node)
            if plan.context_parallel is None:
                try:
                    check_uncovered(node.target, plan.inputs, name)
                except ContextParallelError as e:
                    raise PlanError(str(e)) from None
            if len(slots) != len(plan.inputs):
                raise PlanError(f"node {name}: {len(slots)} tensor inputs, the plan lists "
                                f"{len(plan.inputs)}")
            for k, loc in enumerate(slots):
                _set(args, kwargs, loc, self._input(_get(args, kwargs, loc), plan.inputs[k], name, k,
                                                    shared))
            if kwargs.get("device") == torch.device("meta"):
                kwargs["device"] = device
            with (self.edge_hook(name, "op") if self.edge_hook else _null()):
                try:
                    if plan.context_parallel is not None:  # the plan's CP attention
                        head_tail = self.layout is not None and self.layout.head_tail
                        if plan.context_parallel.load_balance and not head_tail:
                            self.unbalanced.append(name)
                        res = run_node(node.target, args, kwargs, self.mesh,
                                       plan.context_parallel, plan.outputs, name, head_tail)
                    else:
                        res = nested_view(node.target, args, plan.outputs[0], self.mesh)
                        if res is None:
                            res = _call(node.target, args, kwargs, device)  # DTensor's collectives
                except (RuntimeError, NotImplementedError) as e:  # e.g. an uneven shard
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise PlanError(f"node {name} ({node.target}): cannot run at the planned "
                                    f"placements {[placements_str(p) for p in plan.inputs]}: "
                                    f"{first}") from e
            if isinstance(res, (tuple, list)):
                outs = list(plan.outputs) + [None] * (len(res) - len(plan.outputs))
                res = type(res)(self._wrap(r, o, name, k) for k, (r, o) in enumerate(zip(res, outs)))
            else:
                res = self._wrap(res, plan.outputs[0], name, 0)
            env[node] = res
        return list(out)


class _SharedInputs:
    """First twins' redistributed inputs, each held until its last twin has read it."""

    def __init__(self, twins: Mapping[str, str]) -> None:
        self._left: dict = {}
        for first in twins.values():
            self._left[first] = self._left.get(first, 0) + 1
        self._kept: dict = {}

    def keep(self, name: str, t: Any) -> None:
        if name in self._left and isinstance(t, DTensor):
            self._kept[name] = t

    def take(self, first: str) -> Any:
        t = self._kept.get(first)
        self._left[first] = self._left.get(first, 1) - 1
        if self._left[first] <= 0:
            self._kept.pop(first, None)
        return t


def _call(op: Any, args: list, kwargs: dict, device: torch.device) -> Any:
    """op(*args, **kwargs).  `histc` of integers on a CPU counts their float values (the CPU
    kernel has no integer histc; the counts are equal below 2**24) and returns the integer
    dtype the graph recorded: Hugging Face's MoE experts choose the histc dtype by device type,
    and a step traced on meta takes the CUDA branch."""
    if (op is torch.ops.aten.histc.default and device.type == "cpu"
            and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point()):
        dtype = args[0].dtype
        out = op(args[0].float(), *args[1:], **kwargs)
        if isinstance(out, DTensor):  # cast the local counts: a Partial stays Partial
            return DTensor.from_local(out.to_local().to(dtype), out.device_mesh, out.placements,
                                      run_check=False, shape=out.shape, stride=out.stride())
        return out.to(dtype)
    return op(*args, **kwargs)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def trace_for_apply(model: torch.nn.Module, example_inputs, loss_fn=None, targets=None, *,
                    attention: Optional[str] = None, data_dependent: Any = None):
    """Traces the training step on a meta copy of `model` (the model keeps its weights), with
    the fused attention kernel of the device it will run on (`attention`, by default the
    device of the model's weights or inputs): the graph a plan for this run is made from.
    data_dependent: the tracer's policy overrides (docs/tracer.md, "Data-dependent code")."""
    from autoshard.tracer.trace import trace_training_step

    return trace_training_step(copy.deepcopy(model), example_inputs, loss_fn, targets,
                               attention=attention or runtime_device(model, example_inputs),
                               data_dependent=data_dependent)


def runtime_device(model: torch.nn.Module, example_inputs) -> str:
    """The device type the step will run on: the model's parameters', else the inputs',
    "cpu" when both are on meta."""
    from autoshard.tracer.trace import flatten_tensors

    for t in [*model.parameters(), *flatten_tensors(example_inputs)]:
        if t.device.type != "meta":
            return t.device.type
    return "cpu"


def apply_placement(model: torch.nn.Module, placements: PlacementsArg, mesh: DeviceMesh,
                    traced=None, *, example_inputs=None, loss_fn: Optional[Callable] = None,
                    targets=None, graph: Optional[dict] = None,
                    returns: str = "loss") -> ShardedModule:
    """Returns a ShardedModule that trains `model` with the planned placements.

    placements: a placements.json path (AutoParallel schema, `autoshard plan -o DIR`), its
        loaded JSON, or its "placements" map (node name -> {"output", "inputs"}).
    mesh: the DeviceMesh the plan was made for (shape and dim names are checked).
    traced: the autoshard.tracer TracedStep the plan's graph was exported from (AutoParallel
        passes its own); otherwise the step is traced here from `example_inputs` (tensors of
        the right shapes, any device), `loss_fn` and `targets`, exactly as autoshard-trace
        does, so the node names match a graph traced with the same arguments.
    graph: the graph JSON dict (to_graph_dict(traced)); computed when omitted.
    returns: "loss" (the module's call returns the traced loss) or "outputs" (the model's
        outputs as DTensors, for a step traced with mark_outputs, as AutoParallel traces it
        without a loss function; any loss of them back-propagates).
    The plan's "recompute" list (graph nodes the plan recomputes in the backward) is honoured.
    """
    if returns not in ("loss", "outputs"):
        raise ValueError(f"apply_placement: returns must be 'loss' or 'outputs', got {returns!r}")
    if traced is None:
        if example_inputs is None:
            raise TypeError("apply_placement: pass traced= or example_inputs= (and loss_fn, "
                            "targets) so that the training step can be traced")
        traced = trace_for_apply(model, example_inputs, loss_fn, targets)
    if graph is None:
        from autoshard.tracer.export import to_graph_dict

        graph = to_graph_dict(traced)
    doc, origin = read_placements(placements)
    plan = load_placements(doc, mesh, origin)
    names = graph_names(traced.gm, graph, traced.placeholder_names)
    exported = {n["name"] for n in graph["nodes"] if n.get("kind") != "output"}
    missing = sorted(exported - set(plan))
    if missing:
        raise PlanError(f"node {missing[0]}: in the graph but not in the placements "
                        f"({len(missing)} missing)")
    unknown = sorted(set(plan) - exported)
    if unknown:
        raise PlanError(f"node {unknown[0]}: in the placements but not in the traced graph")
    gm = traced.gm
    if getattr(traced, "islands", None):  # data-dependent module calls run eagerly
        from .islands import IslandError, cut_islands

        try:
            gm, names = cut_islands(traced, names, model, mesh)
        except IslandError as e:
            raise PlanError(str(e)) from None
    runner = StepRunner(gm, plan, names, mesh)
    runner.via = planned_paths(doc.get("schedule"), mesh.ndim, origin)
    runner.twins = planned_twins(doc.get("schedule"), plan, origin)
    runner.order = planned_order(gm, names, doc.get("schedule"), origin)
    try:
        runner.layout = planned_layout(doc, plan, mesh, origin)
    except ContextParallelError as e:
        raise PlanError(str(e)) from None
    (module,) = build_stages(model, runner, traced, graph, mesh, doc, returns=returns,
                             origin=origin)
    #: the module calls run as eager islands (docs/tracer.md, "Running it: eager islands")
    module.islands = [c.module for c in getattr(traced, "islands", [])]
    return module


def build_stages(model: torch.nn.Module, runner: StepRunner, traced, graph: dict,
                 mesh: DeviceMesh, doc: Mapping[str, Any], *, returns: str = "loss",
                 node_stage: Optional[Mapping[str, int]] = None, n_stages: int = 1,
                 wanted: Sequence[int] = (0,), local_inputs: bool = True,
                 once_per_step: Optional[set] = None, origin: str = "") -> list:
    """The one path from a plan to modules: lowers the planned step (autoshard.lower), cuts
    the stages in `wanted` out of it (autoshard.stages; one stage, the whole step, for a plan
    without pipeline stages), splits each into forward and backward (autoshard.partition,
    with the plan's recompute list and schedule) and wraps it as a ShardedModule.

    node_stage: planned node name -> stage, as the plan's "stage" entries say (every node in
        stage 0 when n_stages is 1).
    once_per_step: the parameters whose gradient reductions the plan runs once per step (its
        schedule's "once_per_step", autoshard.deferred_grads); None: in every backward;
        ALL_DEFERRABLE: every reduction that can be cut (a file without the list).
    Returns the modules of `wanted`, in that order."""
    phases = {n["name"]: n.get("phase", "forward") for n in graph["nodes"]}
    lowered = lower_step(runner, traced, mesh, phases)
    gm = lowered.gm
    if getattr(traced, "islands", None):
        from .islands import run_eagerly

        run_eagerly(gm)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    loss_node, grad_nodes = out_node.args[0][0], list(out_node.args[0][1:])
    if returns == "outputs":
        if not traced.output_nodes or None in traced.tangent_nodes:
            raise PlanError("returns='outputs' needs a step traced with mark_outputs (every "
                            "output differentiable)")
        names, tangent_names = list(traced.output_nodes), list(traced.tangent_nodes)
        shape_of = {n["name"]: tuple(n["outputs"][0]["shape"]) for n in graph["nodes"]
                    if n.get("outputs")}
        outputs = [(shape_of[n], runner.placements_of(n).outputs[0]) for n in names]
        out_nodes = [_lowered_alias(gm, n) for n in names]
    else:
        if traced.loss_tangent is None:
            raise PlanError("the traced step has no loss gradient mark (trace it again)")
        tangent_names = [traced.loss_tangent]
        outputs = [((), list(lowered.loss_placements))]
        out_nodes = [loss_node]
    tangents = [runner.placements_of(n).outputs[0] for n in tangent_names]
    kinds = traced.placeholder_kinds
    node_stage = dict(node_stage or {})
    try:
        cuts = cut_stages(gm, [node_stage.get(n, SHARED) if n_stages > 1 else 0
                               for n in traced.placeholder_names], node_stage, n_stages,
                          [_lowered_alias(gm, n) for n in tangent_names], out_nodes,
                          grad_nodes, [k for k, kd in enumerate(kinds) if kd == "parameter"],
                          wanted)
    except StageError as e:
        raise PlanError(f"{origin}{e}") from None
    recompute = frozenset(doc.get("recompute", []))
    limit = in_flight_limit(mesh)
    modules = []
    for cut in cuts:
        split = partition(cut.gm, cut.out_nodes, cut.grad_nodes, cut.tangent_nodes, recompute,
                          in_flight=limit, schedule=doc.get("schedule"))
        deferred = None
        if once_per_step is not None:
            full = [traced.flat_args[k].numel() for k in cut.grad_params]
            names = [traced.placeholder_names[k] for k in cut.grad_params]
            planned = None if once_per_step is ALL_DEFERRABLE else \
                [i for i, n in enumerate(names) if n in once_per_step]
            deferred = defer_reductions(split.backward, len(cut.grad_params), full,
                                        in_flight=limit, planned=planned)
        last = cut.index == n_stages - 1
        modules.append(ShardedModule(model, runner, traced, mesh, lowered, cut, split,
                                     outputs if last else None, tangents if last else None,
                                     outputs_mode=last and returns == "outputs",
                                     local_inputs=local_inputs, in_flight=limit,
                                     deferred=deferred))
    return modules


def _lowered_alias(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    """The lowered node of the traced `aten.alias` node `name` (an output or gradient mark)."""
    found = [n for n in gm.graph.nodes if n.op == "call_function"
             and n.target is torch.ops.aten.alias.default
             and n.meta.get(META_KEY, {}).get("node") == name]
    if not found:
        raise PlanError(f"node {name}: the lowered step has no alias for it")
    return found[-1]
