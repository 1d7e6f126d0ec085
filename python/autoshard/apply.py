"""Run a plan: the traced training step on DTensors, with every op at its planned placements.

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from autoshard.apply import apply_placement

    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    step = apply_placement(model, "out/placements.json", mesh, loss_fn=loss_fn)
    opt = torch.optim.AdamW(step.parameters(), lr=1e-3)
    loss = step(tokens, labels)        # model inputs, then the loss targets (full tensors)
    loss.backward(); opt.step()        # parameters and gradients are DTensors, laid out as planned

How it runs.  The training step (forward, loss, backward) is traced once into an ATen FX graph
(autoshard.tracer, the same graph `autoshard plan` planned, so node names match the plan's).
An interpreter walks that graph: before each op it redistributes every tensor input to the
spec the plan chose for that input (DTensor issues the collective), runs the op on DTensors
(DTensor's sharding propagation then finds the planned strategy, whose inputs match exactly),
and checks that the output came out at the planned placement (a mismatch is redistributed
and counted in `StepRunner.mismatches`).  The graph's gradient outputs are redistributed to
their parameter's placement (the plan's parameter <- gradient edge) and handed to autograd,
so `loss.backward()` fills `p.grad` with DTensors laid out like `p`.

Inputs are full (global) tensors, identical on every rank; their local shards are sliced
locally (Replicate -> Shard needs no communication).  Parameters are taken from `model` the
same way, so every rank must hold the same initial weights (same seed, or a loaded checkpoint).
"""
from __future__ import annotations

import copy
import json
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

PlacementsArg = Union[str, os.PathLike, Mapping[str, Any]]


class PlanError(ValueError):
    """The placements do not fit the traced graph or the mesh (message names the node)."""


# --- placements -----------------------------------------------------------------------------
def parse_placements(s: str, where: str = "") -> list:
    """'S(0)RP(sum)' (also 'P', 'Shard(0)', 'Replicate()', 'Partial(sum)', ', ' separators)
    -> [Shard(0), Replicate(), Partial('sum')]."""
    text = s.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    out: list = []
    i = 0
    aliases = (("Shard(", "S("), ("Replicate()", "R"), ("Partial(", "P("))
    for long, short in aliases:
        text = text.replace(long, short)
    text = text.replace(",", "").replace(" ", "")
    while i < len(text):
        c = text[i]
        if c == "R":
            out.append(Replicate())
            i += 1
        elif c in "SP" and i + 1 < len(text) and text[i + 1] == "(":
            j = text.find(")", i)
            if j < 0:
                raise PlanError(f"{where}placements '{s}': unclosed '(' at {i}")
            arg = text[i + 2:j]
            if c == "S":
                if not arg.lstrip("-").isdigit():
                    raise PlanError(f"{where}placements '{s}': bad shard dim '{arg}'")
                out.append(Shard(int(arg)))
            else:
                out.append(Partial(arg or "sum"))
            i = j + 1
        elif c == "P":
            out.append(Partial("sum"))
            i += 1
        else:
            raise PlanError(f"{where}placements '{s}': unexpected '{c}' at position {i}")
    return out


def placements_str(ps: Sequence) -> str:
    """[Shard(0), Replicate(), Partial()] -> 'S(0)RP(sum)' (autoshard's short strings)."""
    out = []
    for p in ps:
        if p.is_replicate():
            out.append("R")
        elif p.is_shard():
            out.append(f"S({p.dim})")
        elif p.is_partial():
            out.append(f"P({getattr(p, 'reduce_op', 'sum')})")
        else:
            out.append(str(p))
    return "".join(out)


def _output_list(s: str, where: str) -> list:
    """An output entry: 'S(0)R' or a tuple '(S(0)R, None)' -> list (None for no tensor)."""
    t = s.strip()
    if t.startswith("(") and t.endswith(")") and "," in t:
        items = [x.strip() for x in t[1:-1].split(",")]
        return [None if x in ("None", "") else parse_placements(x, where) for x in items]
    return [parse_placements(t, where)]


@dataclass
class NodePlan:
    outputs: list            # per output: placements list or None
    inputs: list             # per tensor input (graph JSON order): placements list


def load_placements(placements: PlacementsArg, mesh: DeviceMesh) -> dict[str, NodePlan]:
    """Reads AutoParallel-schema placements (a path, the loaded JSON, or its "placements" map)
    and checks the mesh shape and dim names against `mesh`."""
    origin = ""
    if isinstance(placements, (str, os.PathLike)):
        origin = f"{os.fspath(placements)}: "
        with open(placements) as f:
            try:
                placements = json.load(f)
            except json.JSONDecodeError as e:
                raise PlanError(f"{origin}invalid JSON at byte {e.pos}") from None
    doc = dict(placements)
    if "placements" in doc:
        shape = doc.get("mesh_shape")
        if shape is not None and list(shape) != list(mesh.shape):
            raise PlanError(f"{origin}/mesh_shape: plan is for mesh {list(shape)}, "
                            f"the mesh is {list(mesh.shape)}")
        names = doc.get("mesh_dim_names")
        if names is not None and mesh.mesh_dim_names is not None and \
                list(names) != list(mesh.mesh_dim_names):
            raise PlanError(f"{origin}/mesh_dim_names: plan has {names}, the mesh "
                            f"{list(mesh.mesh_dim_names)}")
        doc = doc["placements"]
    out = {}
    for name, entry in doc.items():
        where = f"{origin}/placements/{name}: "
        outs = _output_list(entry["output"], where)
        ins = [parse_placements(x, where) for x in entry.get("inputs", [])]
        for p in [*[o for o in outs if o is not None], *ins]:
            if len(p) != mesh.ndim:
                raise PlanError(f"{where}{len(p)} placements for a {mesh.ndim}-D mesh")
        out[name] = NodePlan(outs, ins)
    return out


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

    def placements_of(self, name: str) -> NodePlan:
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
            return redistribute(t, self.mesh, placements)

    def _wrap(self, t: Any, placements: Optional[list], name: str, k: int) -> Any:
        """Brings an op output to its planned placement."""
        if placements is None or not isinstance(t, torch.Tensor):
            return t
        if not isinstance(t, DTensor):  # a creation op (ones, scalar_tensor): same on all ranks
            t = DTensor.from_local(t, self.mesh, [Replicate()] * self.mesh.ndim, run_check=False)
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
        env: dict = {}
        live = self._live()
        it = iter(flat_args)
        device = torch.device(self.mesh.device_type)
        out = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(it)
                continue
            if node.op == "output":
                out = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
                break
            if node.op == "get_attr":
                v = getattr(self.gm, node.target)
                if isinstance(v, torch.Tensor) and v.is_meta:
                    raise PlanError(f"node {node.name}: a tensor constant traced on meta")
                if isinstance(v, torch.Tensor) and node in self.names:
                    # a constant of the step (e.g. a target the loss closes over): at its
                    # planned placement, cut locally like an input
                    v = _local_slice(v.to(device), self.mesh,
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
            if len(slots) != len(plan.inputs):
                raise PlanError(f"node {name}: {len(slots)} tensor inputs, the plan lists "
                                f"{len(plan.inputs)}")
            for k, loc in enumerate(slots):
                _set(args, kwargs, loc, self._to(_get(args, kwargs, loc), plan.inputs[k], name, k))
            if kwargs.get("device") == torch.device("meta"):
                kwargs["device"] = device
            with (self.edge_hook(name, "op") if self.edge_hook else _null()):
                res = node.target(*args, **kwargs)  # collectives here are DTensor's own choice
            if isinstance(res, (tuple, list)):
                outs = list(plan.outputs) + [None] * (len(res) - len(plan.outputs))
                res = type(res)(self._wrap(r, o, name, k) for k, (r, o) in enumerate(zip(res, outs)))
            else:
                res = self._wrap(res, plan.outputs[0], name, 0)
            env[node] = res
        return list(out)


def redistribute(t: DTensor, mesh: DeviceMesh, placements: Sequence) -> DTensor:
    """t at `placements`, Replicate -> Partial included (DTensor's public redistribute refuses
    it; the plan may ask for it, e.g. a bias added to a partial matmul output).  No autograd."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._redistribute import redistribute_local_tensor

    target = DTensorSpec(mesh, tuple(placements), tensor_meta=t._spec.tensor_meta)
    local = redistribute_local_tensor(t._local_tensor, t._spec, target)
    return DTensor(local, target, requires_grad=False)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _local_slice(t: torch.Tensor, mesh: DeviceMesh, placements: list) -> DTensor:
    """A full tensor (same on every rank) -> DTensor at `placements`, without communication."""
    d = DTensor.from_local(t, mesh, [Replicate()] * mesh.ndim, run_check=False)
    if any(p.is_partial() for p in placements):
        raise PlanError(f"an input planned as partial ({placements_str(placements)})")
    return redistribute(d, mesh, placements) if any(p.is_shard() for p in placements) else d


def _step_function(gm_holder: dict) -> type:
    """An autograd Function over plain tensors running the lowered joint step:
    forward -> the loss (the gradients are computed too, and saved); backward -> the saved
    gradients scaled by the incoming one (the gradients are linear in the loss's seed).
    One class per module, so that Dynamo sees the graph it calls as a constant."""

    class _Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *flat):  # type: ignore[override]
            out = gm_holder["step"](*flat)
            grads = out[1:]
            ctx.has_grad = [g is not None for g in grads]
            ctx.n_flat = len(flat)
            ctx.save_for_backward(*[g for g in grads if g is not None])
            return out[0]

        @staticmethod
        def backward(ctx, g):  # type: ignore[override]
            saved = iter(ctx.saved_tensors)
            grads = [next(saved) * g if has else None for has in ctx.has_grad]
            return (*grads, *([None] * (ctx.n_flat - len(grads))))

    return _Step


class ShardedModule(torch.nn.Module):
    """The model's parameters as DTensors at their planned placements; calling it runs one
    planned training step -- the lowered per-rank graph of local ops and collectives
    (autoshard.lower) -- and returns the loss (a plain tensor, the same on every rank);
    `loss.backward()` fills every `p.grad` with a DTensor laid out like `p`.

    `module.compile(**kw)` compiles the lowered step with `torch.compile` (inductor by
    default).  `torch.compile(module)` compiles the whole call instead: the forward is plain
    tensor code (input chunks, `to_local`, one autograd Function over the lowered graph), so
    Dynamo traces the lowered graph into one compiled graph.
    """

    def __init__(self, model: torch.nn.Module, runner: StepRunner, traced, mesh: DeviceMesh,
                 lowered):
        super().__init__()
        self._runner = runner
        self._traced = traced
        self._lowered = lowered
        #: What runs the step: the lowered graph, its compiled form, or the audit's
        #: interpreter (a plain dict entry: the graph must not become a submodule).
        self.__dict__["_step_holder"] = {"step": lowered.gm}
        self._step_cls = _step_function(self.__dict__["_step_holder"])
        self._compiled = False
        self.mesh = mesh
        kinds, names = traced.placeholder_kinds, traced.placeholder_names
        holder = copy.deepcopy(model)
        params = dict(holder.named_parameters())
        buffers = dict(holder.named_buffers())
        self._param_names = [n for k, n in zip(kinds, names) if k == "parameter"]
        self._buffer_names = [n for k, n in zip(kinds, names) if k == "buffer"]
        self._input_names = [n for k, n in zip(kinds, names) if k == "input"]
        self._input_placements = [runner.placements_of(n).outputs[0] for n in self._input_names]
        for n in self._param_names:
            p = params[n]
            dt = _local_slice(p.detach(), mesh, runner.placements_of(n).outputs[0])
            _set_tensor(holder, n, torch.nn.Parameter(dt, requires_grad=p.requires_grad))
        for n in self._buffer_names:
            dt = _local_slice(buffers[n].detach(), mesh, runner.placements_of(n).outputs[0])
            _set_tensor(holder, n, dt, buffer=True)
        for cname, child in holder.named_children():
            self.add_module(cname, child)
        for pname, p in holder.named_parameters(recurse=False):
            self.register_parameter(pname, p)
        for bname, b in holder.named_buffers(recurse=False):
            self.register_buffer(bname, b,
                                 persistent=bname not in holder._non_persistent_buffers_set)

    @property
    def mismatches(self) -> list:
        """Ops whose DTensor output placement differed from the plan while lowering
        (redistributed to the planned one; empty when the plan is exact)."""
        return self._runner.mismatches

    @property
    def step_graph(self) -> torch.fx.GraphModule:
        """The lowered per-rank graph (local ops and functional collectives)."""
        return self._lowered.gm

    def run_step_with(self, fn: Callable) -> Callable:
        """Runs the step with `fn` (called like the lowered graph) from now on; returns the
        previous one (the audit runs the graph node by node this way)."""
        previous = self.__dict__["_step_holder"]["step"]
        self.__dict__["_step_holder"]["step"] = fn
        return previous

    def compile(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Compiles the lowered step with torch.compile (same arguments)."""
        if not self._compiled:
            self.run_step_with(torch.compile(self._lowered.gm, *args, **kwargs))
            self._compiled = True

    def local_inputs(self, *inputs: torch.Tensor) -> list:
        """Full (global) input tensors -> this rank's local shards (no communication)."""
        if len(inputs) != len(self._input_names):
            raise TypeError(f"expected {len(self._input_names)} tensors "
                            f"({', '.join(self._input_names)}), got {len(inputs)}")
        coord = self.mesh.get_coordinate()
        return [_local_chunk(t, self.mesh, pl, coord)
                for t, pl in zip(inputs, self._input_placements)]

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """inputs: the model's inputs then the loss targets, full tensors, in trace order."""
        flat_in = self.local_inputs(*inputs)
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        # to_local() is differentiable: the local gradient comes back as a DTensor laid out
        # like the parameter (the plan's gradient placement is the parameter's).
        ps = [params[n].to_local() for n in self._param_names]
        bs = [buffers[n].to_local() for n in self._buffer_names]
        return self._step_cls.apply(*ps, *bs, *flat_in)


def _local_chunk(t: torch.Tensor, mesh: DeviceMesh, placements: list, coord) -> torch.Tensor:
    """This rank's piece of a full tensor under `placements` (DTensor's chunking: mesh dims
    left to right, torch.chunk sizes, empty pieces past the end)."""
    if any(p.is_partial() for p in placements):
        raise PlanError(f"an input planned as partial ({placements_str(placements)})")
    for i, p in enumerate(placements):
        if p.is_shard():
            dim = p.dim if p.dim >= 0 else p.dim + t.dim()
            pieces = torch.chunk(t, mesh.size(i), dim)
            t = pieces[coord[i]] if coord[i] < len(pieces) else t.narrow(dim, 0, 0)
    return t


def _set_tensor(root: torch.nn.Module, name: str, value, buffer: bool = False) -> None:
    mod_path, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_path) if mod_path else root
    if buffer:
        persistent = leaf not in getattr(mod, "_non_persistent_buffers_set", set())
        mod.register_buffer(leaf, value, persistent=persistent)
    else:
        mod.register_parameter(leaf, value)


def trace_for_apply(model: torch.nn.Module, example_inputs, loss_fn=None, targets=None):
    """Traces the training step on a meta copy of `model` (the model keeps its weights)."""
    from autoshard.tracer.trace import trace_training_step

    return trace_training_step(copy.deepcopy(model), example_inputs, loss_fn, targets)


def apply_placement(model: torch.nn.Module, placements: PlacementsArg, mesh: DeviceMesh,
                    traced=None, *, example_inputs=None, loss_fn: Optional[Callable] = None,
                    targets=None, graph: Optional[dict] = None) -> ShardedModule:
    """Returns a ShardedModule that trains `model` with the planned placements.

    placements: a placements.json path (AutoParallel schema, `autoshard plan -o DIR`), its
        loaded JSON, or its "placements" map (node name -> {"output", "inputs"}).
    mesh: the DeviceMesh the plan was made for (shape and dim names are checked).
    traced: the autoshard.tracer TracedStep the plan's graph was exported from (AutoParallel
        passes its own); otherwise the step is traced here from `example_inputs` (tensors of
        the right shapes, any device), `loss_fn` and `targets`, exactly as autoshard-trace
        does, so the node names match a graph traced with the same arguments.
    graph: the graph JSON dict (to_graph_dict(traced)); computed when omitted.
    """
    if traced is None:
        if example_inputs is None:
            raise TypeError("apply_placement: pass traced= or example_inputs= (and loss_fn, "
                            "targets) so that the training step can be traced")
        traced = trace_for_apply(model, example_inputs, loss_fn, targets)
    if graph is None:
        from autoshard.tracer.export import to_graph_dict

        graph = to_graph_dict(traced)
    plan = load_placements(placements, mesh)
    names = graph_names(traced.gm, graph, traced.placeholder_names)
    exported = {n["name"] for n in graph["nodes"] if n.get("kind") != "output"}
    missing = sorted(exported - set(plan))
    if missing:
        raise PlanError(f"node {missing[0]}: in the graph but not in the placements "
                        f"({len(missing)} missing)")
    unknown = sorted(set(plan) - exported)
    if unknown:
        raise PlanError(f"node {unknown[0]}: in the placements but not in the traced graph")
    runner = StepRunner(traced.gm, plan, names, mesh)
    from .lower import lower_step

    phases = {n["name"]: n.get("phase", "forward") for n in graph["nodes"]}
    lowered = lower_step(runner, traced, mesh, phases)
    return ShardedModule(model, runner, traced, mesh, lowered)
