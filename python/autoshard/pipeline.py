"""Run a plan with pipeline stages on torch.distributed.pipelining.

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    pipe = autoshard.apply_pipeline(model, "out/placements.json", mesh,
                                    example_inputs=(tokens_mb,), loss_fn=loss, targets=(labels_mb,))
    opt = torch.optim.AdamW(pipe.parameters(), lr=1e-3)
    loss = pipe.step(tokens, labels)   # full batch; the loss on ranks holding the last stage
    opt.step(); opt.zero_grad()

A plan whose placements.json has a "pipeline" section (docs/pipeline-format.md: the stages, their pp
ranks, the schedule and the number of microbatches; every node's "stage") is traced for ONE
microbatch (example_inputs and targets of the microbatch's shape).  Each pp rank lowers the
whole planned step (autoshard.lower) on mesh[non-pp dims] of its pp slice -- the placements
with the pp position removed -- and cuts out the stages it owns (autoshard.stages).  Each
stage's joint graph is split into forward and backward (autoshard.partition) and wrapped as
a module whose call is one autograd Function (forward graph; backward graph in its backward),
so `torch.distributed.pipelining.PipelineStage` drives it like any stage module: it runs
forwards per microbatch, sends activations to the next stage, and runs autograd backward on
the gradients the next stage sends back.  The stage's collectives run on the process groups
of its pp slice's sub-mesh; the stage-to-stage transfers are the schedule's P2P sends on the
pp dim's group.  The schedule is torch's Schedule<name> class for the plan's schedule name.

Zero bubble (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV): torch runs each stage's
backward as two actions, I (input gradients) and W (weight gradients) (DualPipeV: some as one
FULL_BACKWARD, which runs W right after I).  The stage's backward graph is cut in
two (autoshard.backward_split): the Function's backward runs B and keeps what W needs; W runs
when the schedule's W action calls the runner that PipelineStage's dw_builder returned, and
accumulates the parameters' gradients as autograd would.  ZBVZeroBubble and DualPipeV place
the stages in a V (stage_rank).

Gradient reductions run once per step, as the planner prices them (its stage problems
weigh the redistributions into the optimizer 1/M).  A stage's lowered backward ends, per
parameter, in the collectives that reduce its gradient over the stage's mesh (an all_reduce
or reduce_scatter of a Partial sum, an all_gather of a shard).  autoshard.deferred_grads cuts
them out (before the B/W split, so W is cut too): the backward returns the un-reduced local
gradient, the stage sums it over the microbatches, and after the schedule's last microbatch
`step` runs the cut-out collectives once per parameter and adds the result to `.grad` at the
parameter's placements.  The accumulated value is at most the full gradient's size (an
activation gathered before the sum over tokens that makes it a gradient stays gathered per
microbatch, as planned).  A gradient whose reduction cannot be cut (not linear in one local
value, or read elsewhere) keeps it per microbatch, with a warning naming it.

Loss: the last stage's graph ends with the traced loss of its microbatch (e.g. a mean); the
schedule divides the accumulated gradients by the number of microbatches (scale_grads), and
`step` divides the once-per-step reductions' results likewise, and returns the mean of the
microbatch losses: for a mean loss over equal microbatches, the full batch's loss and
gradients.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh

from .apply import (PlacementsArg, PlanError, StepRunner, graph_names, load_placements,
                    parse_placements, placements_str, planned_twins, read_placements,
                    trace_for_apply, _lowered_alias)
from .deferred_grads import (DeferredReductions, check_once_per_step, defer_reductions,
                             once_per_step_params)
from .inflight import in_flight_limit
from .local import local_chunk, local_slice
from .stages import SHARED, StageError, StageGraph, cut_stages

#: the schedule names of docs/pipeline-format.md -> torch.distributed.pipelining class names
SCHEDULES = {"GPipe": "ScheduleGPipe", "1F1B": "Schedule1F1B",
             "Interleaved1F1B": "ScheduleInterleaved1F1B", "LoopedBFS": "ScheduleLoopedBFS",
             "InterleavedZeroBubble": "ScheduleInterleavedZeroBubble",
             "ZBVZeroBubble": "ScheduleZBVZeroBubble", "DualPipeV": "ScheduleDualPipeV"}
#: schedules that split the backward into input and weight gradients (zero bubble): the
#: stage's backward graph runs as B in autograd's backward and W when the schedule asks
#: (autoshard.backward_split)
_SPLIT_BACKWARD = ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
#: schedules whose stages sit in a V on the pp ranks (torch's stage_index_to_group_rank "v")
_V_SHAPE = ("ZBVZeroBubble", "DualPipeV")


def stage_rank(schedule: str, stage: int, pp_size: int) -> int:
    """The pp rank torch's schedule runs `stage` on: stage mod P, or the V of ZBVZeroBubble
    (stages P..2P-1 back down ranks P-1..0)."""
    if schedule in _V_SHAPE and stage >= pp_size:
        return 2 * pp_size - 1 - stage
    return stage % pp_size


@dataclass
class PipelineSpec:
    """The "pipeline" section of placements.json."""

    mesh_dim: str
    schedule: str
    microbatches: int
    stages_per_rank: int
    stages: list  # dicts: index, pp_rank, layers, first, last


def read_pipeline(doc: Mapping[str, Any], origin: str = "") -> PipelineSpec:
    """Checks and returns doc["pipeline"] (errors name the file and the key)."""
    sec = doc.get("pipeline")
    if not isinstance(sec, Mapping):
        raise PlanError(f"{origin}/pipeline: missing (not a plan with pipeline stages)")
    for key in ("mesh_dim", "schedule", "microbatches", "stages"):
        if key not in sec:
            raise PlanError(f"{origin}/pipeline/{key}: missing")
    if sec["schedule"] not in SCHEDULES:
        raise PlanError(f"{origin}/pipeline/schedule: '{sec['schedule']}' is not one of "
                        f"{', '.join(SCHEDULES)}")
    m = sec["microbatches"]
    if not isinstance(m, int) or m < 1:
        raise PlanError(f"{origin}/pipeline/microbatches: {m!r} is not a positive integer")
    stages = list(sec["stages"])
    for k, st in enumerate(stages):
        if st.get("index") != k or not isinstance(st.get("pp_rank"), int):
            raise PlanError(f"{origin}/pipeline/stages/{k}: index must be {k} and pp_rank an "
                            f"integer")
    return PipelineSpec(str(sec["mesh_dim"]), str(sec["schedule"]), m,
                        int(sec.get("stages_per_rank", 1)), stages)


def _drop_dim(spec: str, k: int, where: str) -> str:
    """One placements string (or a '(A, B)' tuple of them) without mesh dim k."""
    t = spec.strip()
    if t.startswith("(") and t.endswith(")") and "," in t:
        items = [x.strip() for x in t[1:-1].split(",")]
        return "(" + ", ".join(x if x in ("None", "") else _drop_dim(x, k, where)
                               for x in items) + ")"
    ps = parse_placements(t, where)
    if not ps[k].is_replicate():
        raise PlanError(f"{where}placements '{spec}' are not Replicate on the pp dim")
    return placements_str(ps[:k] + ps[k + 1:])


def stage_placements(doc: Mapping[str, Any], pp_dim: int, origin: str = "") -> dict:
    """The plan over the sub-mesh: every spec with the pp position removed."""
    out = {k: v for k, v in doc.items() if k not in ("placements", "pipeline")}
    out["mesh_shape"] = [s for i, s in enumerate(doc["mesh_shape"]) if i != pp_dim]
    out["mesh_dim_names"] = [s for i, s in enumerate(doc["mesh_dim_names"]) if i != pp_dim]
    pl = {}
    for name, entry in doc["placements"].items():
        where = f"{origin}/placements/{name}: "
        pl[name] = {**entry, "output": _drop_dim(entry["output"], pp_dim, where),
                    "inputs": [_drop_dim(x, pp_dim, where) for x in entry.get("inputs", [])]}
    out["placements"] = pl
    return out


@functools.lru_cache(maxsize=None)
def _stage_function() -> type:
    """An autograd Function running one stage's forward graph (saving what its backward
    graph reads) and, in its backward, its backward graph."""

    class _Stage(torch.autograd.Function):
        @staticmethod
        def forward(ctx, module, *flat):  # type: ignore[override]
            res = module._split.forward(*flat)
            n_out = module._split.n_outputs
            ctx.save_for_backward(*res[n_out:])
            ctx.module = module
            return tuple(res[:n_out])

        @staticmethod
        def backward(ctx, *grad_outputs):  # type: ignore[override]
            module = ctx.module
            tangents = module._tangents(grad_outputs)
            n_p = len(module._grad_param_slots)
            per_input: list = [None] * module._n_primals
            if module._parts is not None:
                # Zero bubble: B now; W's inputs wait for the schedule's W action.
                args = (*ctx.saved_tensors, *tangents)
                act_grads, handoff = module._parts.run_input(*args)
                module._pending.append((module._parts.weight_args(args), handoff))
            else:
                grads = list(module._split.backward(*ctx.saved_tensors, *tangents))
                act_grads = grads[n_p:]
                for k, (slot, gr) in enumerate(zip(module._grad_param_slots, grads[:n_p])):
                    if not module._accumulate(k, gr):
                        per_input[slot] = gr
            for k, gr in enumerate(act_grads):
                per_input[module._n_primals - len(module._graph.act_in) + k] = gr
            return (None, *per_input)

    return _Stage


class StageModule(torch.nn.Module):
    """One pipeline stage of a plan: the stage's parameters (DTensors on the stage's sub-mesh,
    at their planned placements, with the model's names) and its lowered graphs.

    `stage(*activations, **inputs)`: activations from the previous stage (local tensors; the
    first stage takes the full microbatch of its model inputs instead), the model inputs other
    stages own as keyword arguments `input<k>` (full microbatches; each stage reads its own).
    Returns the activations for the next stage, or the microbatch's loss on the last stage."""

    def __init__(self, model: torch.nn.Module, graph: StageGraph, split: Any, runner: StepRunner,
                 traced: Any, mesh: DeviceMesh, reduce_once_per_step: bool = True):
        super().__init__()
        from .module import _set_tensor

        self.index = graph.index
        self.mesh = mesh
        self._graph = graph
        self._split = split
        names, kinds = traced.placeholder_names, traced.placeholder_kinds
        self._slots = [(names[k], kinds[k], runner.placements_of(names[k]).outputs[0])
                       for k in graph.placeholders]
        self._n_primals = len(graph.placeholders) + len(graph.act_in)
        pos = {k: i for i, k in enumerate(graph.placeholders)}
        self._grad_param_slots = [pos[k] for k in graph.grad_params]
        self._input_index = {names[k]: [k2 for k2, kk in enumerate(kinds) if kk == "input"]
                             .index(k) for k in graph.placeholders if kinds[k] == "input"}
        own = {n for n, _, _ in self._slots}
        holder = copy.deepcopy(model)
        from .context_parallel import permute_placeholder

        self._layout = runner.layout  # load-balanced CP: sequences cut in head-tail order
        # The gradient reductions run once per step on the microbatches' sum
        # (autoshard.deferred_grads); the backward returns the un-reduced local gradients.
        full = [traced.flat_args[graph.placeholders[slot]].numel()
                for slot in self._grad_param_slots]
        self._deferred = (defer_reductions(split.backward, len(self._grad_param_slots), full,
                                           in_flight=in_flight_limit(mesh))
                          if reduce_once_per_step else
                          DeferredReductions(backward=split.backward, lowered=split.backward))
        self._split = dataclasses.replace(split, backward=self._deferred.backward)
        self._unreduced: dict = {}  # param-gradient index -> sum over this step's microbatches
        self._parts = None  # BackwardParts when the schedule splits the backward
        #: lowered nodes the B/W split put in the other part than the plan's "part" says
        self.part_mismatches: list = []
        self._pending: list = []  # per B not yet followed by its W: (W's inputs, handoff)

        for n, p in list(holder.named_parameters()):
            if n not in own:
                _remove(holder, n, buffer=False)
            else:
                pl = runner.placements_of(n).outputs[0]
                dt = local_slice(p.detach(), mesh, pl)
                _set_tensor(holder, n, torch.nn.Parameter(dt, requires_grad=p.requires_grad))
        for n, b in list(holder.named_buffers()):
            if n not in own:
                _remove(holder, n, buffer=True)
            else:
                pl = runner.placements_of(n).outputs[0]
                b = permute_placeholder(b.detach(), n, self._layout)
                _set_tensor(holder, n, local_slice(b, mesh, pl), True)
        self.add_module("model", holder)

    @property
    def first(self) -> bool:
        """Whether this is the pipeline's first stage (it receives no activations)."""
        return not self._graph.act_in

    def _param_names(self) -> list:
        return [self._slots[slot][0] for slot in self._grad_param_slots]

    @property
    def lowered_backward(self) -> torch.fx.GraphModule:
        """The backward graph as lowered: every gradient reduction still in it."""
        return self._deferred.lowered

    @property
    def deferred_params(self) -> list:
        """The parameters whose gradient reductions run once per step (finish_step)."""
        names = self._param_names()
        return [names[k] for k in sorted(self._deferred.reductions)]

    @property
    def per_microbatch_params(self) -> dict:
        """Parameter -> why a collective of its gradient's redistribution into the optimizer's
        placement, which the planner prices once per step, still runs in every backward.
        (A collective of a gradient the plan puts before the optimizer's edge, such as the
        gather of an activation before the sum that makes it a norm weight's gradient, runs
        per microbatch as planned and is not listed.)"""
        names = self._param_names()
        why = {names[k]: w for k, w in self._deferred.kept.items()}
        return {name: why.get(name, "its result is read by other values of the backward")
                for name in self._deferred.left}

    def _accumulate(self, k: int, grad: Optional[torch.Tensor]) -> bool:
        """Adds parameter gradient k, if its reduction is deferred, to the step's sum of its
        un-reduced values; False when the gradient goes to the parameter as it is."""
        if k not in self._deferred.reductions:
            return False
        if grad is not None:
            acc = self._unreduced.get(k)
            if acc is None:
                self._unreduced[k] = grad.detach().clone()
            else:
                acc.add_(grad)
        return True

    def finish_step(self, scale: float) -> None:
        """After the step's last microbatch: reduces each deferred gradient's sum once, divides
        it by `scale` (the schedule's scale_grads, as it divided the other gradients) and adds it
        to the parameter's .grad, at the parameter's placements as the backward would have."""
        from torch.distributed.tensor import DTensor

        if not self._unreduced:
            return
        order = sorted(self._deferred.reductions)
        if set(self._unreduced) != set(order):
            missing = [self._param_names()[k] for k in order if k not in self._unreduced]
            raise RuntimeError(f"stage {self.index}: no gradient this step for {missing}")
        reduced = self._deferred.step(*[self._unreduced[k] for k in order])
        self._unreduced = {}
        params = dict(self.model.named_parameters())
        names = self._param_names()
        for k, red in zip(order, reduced):
            p = params[names[k]]
            d = DTensor.from_local(red / scale if scale != 1 else red, p.device_mesh,
                                   p.placements, run_check=False, shape=p.shape,
                                   stride=p.stride())
            if p.grad is None:
                p.grad = d
            else:
                p.grad += d

    def split_backward(self, planned: Optional[Mapping[str, str]] = None) -> list:
        """Runs the backward as B (in autograd's backward: activation gradients) and W
        (weight_runner(), when the zero-bubble schedule runs its W action).  Returns the nodes
        split otherwise than `planned` (planned node -> its "part" in the plan) says."""
        from .backward_split import part_mismatches, split_backward

        self._parts = split_backward(self._split.backward, len(self._grad_param_slots))
        return part_mismatches(self._parts, planned or {})

    def weight_runner(self) -> Callable[[], None]:
        """The W of the backward that just ran (torch's PipelineStage dw_builder): computes
        the parameter gradients and accumulates them into the parameters' .grad, as autograd
        does for the whole backward."""
        if self._parts is None or not self._pending:
            raise RuntimeError(f"stage {self.index}: no input-gradient backward to follow")
        args, handoff = self._pending.pop()
        parts = self._parts
        params = dict(self.model.named_parameters())
        names = self._param_names()

        def run() -> None:
            from torch.distributed.tensor import DTensor

            for k, (name, g) in enumerate(zip(names, parts.run_weight(*args, *handoff))):
                if self._accumulate(k, g) or g is None:
                    continue
                p = params[name]
                d = DTensor.from_local(g, p.device_mesh, p.placements, run_check=False,
                                       shape=p.shape, stride=p.stride())
                if p.grad is None:
                    p.grad = d
                else:
                    p.grad += d

        return run

    def _tangents(self, grad_outputs: Sequence[Optional[torch.Tensor]]) -> list:
        """The gradients of the stage's outputs, as its backward graph's tangents: the
        loss's seed on the last stage, else the next stage's gradients (zeros for none)."""
        out = []
        for g, v in zip(grad_outputs, self._graph.act_out_meta):
            out.append(torch.zeros(v.shape, dtype=v.dtype) if g is None else g)
        return out

    def forward(self, *acts: torch.Tensor, **inputs: torch.Tensor) -> Any:
        """The stage's forward for one microbatch: the previous stage's activations (none on the
        first stage) and this stage's own inputs by name; returns what it sends on."""
        from .context_parallel import permute_placeholder

        params = dict(self.model.named_parameters())
        buffers = dict(self.model.named_buffers())
        coord = self.mesh.get_coordinate()
        flat = []
        it = iter(acts) if self.first else iter(())
        for name, kind, pl in self._slots:
            if kind == "parameter":
                flat.append(params[name].to_local())
            elif kind == "buffer":
                flat.append(buffers[name].to_local())
            else:
                key = f"input{self._input_index[name]}"
                t = next(it, None) if self.first and key not in inputs else inputs.get(key)
                if t is None:
                    raise TypeError(f"stage {self.index}: no tensor for input '{name}'")
                flat.append(local_chunk(permute_placeholder(t, name, self._layout), self.mesh,
                                        pl, coord))
        if not self.first:
            flat.extend(acts)
        out = _stage_function().apply(self, *flat)
        return out[0] if len(out) == 1 else out


def _remove(root: torch.nn.Module, name: str, buffer: bool) -> None:
    mod_path, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_path) if mod_path else root
    (mod._buffers if buffer else mod._parameters).pop(leaf, None)


class PipelineRunner:
    """This rank's stages of a pipelined plan and the schedule that runs them.

    step(*inputs, *targets): full-batch tensors (the same on every rank, trace order); runs one
    training step of the schedule (forward and backward of every microbatch, then the
    gradient reductions once; gradients in the stage modules' parameters, averaged over
    microbatches).  Returns the mean of the microbatch losses on a rank holding the last
    stage, else None.  Run the schedule through `step` only: it alone finishes the
    reductions."""

    def __init__(self, spec: PipelineSpec, stages: list, schedule: Any, n_inputs: int,
                 first_inputs: list, pipe_stages: list):
        self.spec = spec
        self.stages = stages            # this rank's StageModule objects
        self.pipeline_stages = pipe_stages  # the PipelineStage objects
        self.schedule = schedule
        self._n_inputs = n_inputs
        self._first_inputs = first_inputs  # input indices the first stage takes positionally

    def parameters(self) -> list:
        """The parameters of this rank's stages (DTensors), for the optimizer."""
        return [p for s in self.stages for p in s.parameters()]

    def named_parameters(self) -> list:
        """(name, parameter) of this rank's stages, named as in the original model."""
        return [(n[len("model."):], p) for s in self.stages for n, p in s.named_parameters()]

    @property
    def has_last(self) -> bool:
        """Whether this rank holds the last stage (the one that computes the loss)."""
        return any(s.index == len(self.spec.stages) - 1 for s in self.stages)

    def step(self, *tensors: torch.Tensor) -> Optional[torch.Tensor]:
        """One training step over all microbatches: the full batch's inputs then targets, cut into
        the plan's microbatches; gradients are accumulated (and reduced once per step).
        Returns the mean microbatch loss on the rank with the last stage, else None."""
        if len(tensors) != self._n_inputs:
            raise TypeError(f"expected {self._n_inputs} tensors (inputs then targets), got "
                            f"{len(tensors)}")
        has_first = any(s.first for s in self.stages)
        args = [tensors[k] for k in self._first_inputs] if has_first else []
        kwargs = {f"input{k}": t for k, t in enumerate(tensors) if k not in self._first_inputs}
        m = self.spec.microbatches
        for s in self.stages:  # no partial sums left by a step cut short
            s._unreduced.clear()
        losses: list = []
        if self.has_last:
            self.schedule.step(*args, target=torch.zeros(m), losses=losses,
                               return_outputs=False, **kwargs)
        else:
            self.schedule.step(*args, return_outputs=False, **kwargs)
        scale = m if self.schedule.scale_grads else 1
        for s in self.stages:  # the same order on every rank of a stage
            s.finish_step(scale)
        if not self.has_last:
            return None
        return torch.stack([x.detach().reshape(()) for x in losses]).mean()


def _identity_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The last stage's output is its microbatch's loss already (the traced loss)."""
    return output


def apply_pipeline(model: torch.nn.Module, placements: PlacementsArg, mesh: DeviceMesh,
                   traced=None, *, example_inputs=None, loss_fn: Optional[Callable] = None,
                   targets=None, graph: Optional[dict] = None,
                   reduce_once_per_step: bool = True) -> PipelineRunner:
    """Builds this rank's pipeline stages of a plan with a "pipeline" section and the
    schedule that runs them.

    placements: placements.json (path or loaded) of a plan over the FULL mesh (pp dim included).
    mesh: that mesh (shape and dim names checked against the plan).
    traced / example_inputs, loss_fn, targets / graph: as for apply_placement, for ONE
        microbatch (the graph the plan was made for).
    reduce_once_per_step: the gradient reductions run once per step, on the microbatches'
        sum, as planned (autoshard.deferred_grads); False: once per microbatch, in each
        backward, as the lowered graph has them (to compare).
    """
    from torch.distributed import pipelining

    from .lower import lower_step
    from .partition import partition

    doc, origin = read_placements(placements)
    spec = read_pipeline(doc, origin)
    names = list(mesh.mesh_dim_names or [])
    if spec.mesh_dim not in names:
        raise PlanError(f"{origin}/pipeline/mesh_dim: '{spec.mesh_dim}' is not a dim of the "
                        f"mesh {names}")
    if list(doc.get("mesh_shape", [])) != list(mesh.shape):
        raise PlanError(f"{origin}/mesh_shape: plan is for mesh {doc.get('mesh_shape')}, the "
                        f"mesh is {list(mesh.shape)}")
    pp = names.index(spec.mesh_dim)
    rest = tuple(n for n in names if n != spec.mesh_dim)
    if not rest:
        raise PlanError(f"{origin}/mesh_dim_names: a pipeline runs its stages on the other "
                        f"mesh dims; the mesh has only '{spec.mesh_dim}'")
    sub = mesh[rest] if len(rest) > 1 else mesh[rest[0]]
    my_pp = mesh.get_coordinate()[pp]
    if traced is None:
        if example_inputs is None:
            raise TypeError("apply_pipeline: pass traced= or example_inputs= (one microbatch)")
        traced = trace_for_apply(model, example_inputs, loss_fn, targets)
    if graph is None:
        from autoshard.tracer.export import to_graph_dict

        graph = to_graph_dict(traced)
    sdoc = stage_placements(doc, pp, origin)
    plan = load_placements(sdoc, sub, origin)
    node_stage = {}
    for name, entry in doc["placements"].items():
        if "stage" not in entry:
            raise PlanError(f"{origin}/placements/{name}/stage: missing")
        node_stage[name] = int(entry["stage"])
    n_stages = len(spec.stages)
    for st in spec.stages:  # torch's schedules: stage s on pp rank s mod P ("loop") or a V
        want = stage_rank(spec.schedule, st["index"], mesh.size(pp))
        if st["pp_rank"] != want:
            raise PlanError(f"{origin}/pipeline/stages/{st['index']}: pp_rank {st['pp_rank']}, "
                            f"the schedule runs stage {st['index']} on pp rank {want}")
    wanted = [st["index"] for st in spec.stages if st["pp_rank"] == my_pp]
    if not wanted:
        raise PlanError(f"{origin}/pipeline/stages: no stage on pp rank {my_pp}")
    runner = StepRunner(traced.gm, plan, graph_names(traced.gm, graph, traced.placeholder_names),
                        sub)
    runner.twins = planned_twins(doc.get("schedule"), plan, origin)
    from .context_parallel import ContextParallelError, planned_layout

    try:
        runner.layout = planned_layout(doc, graph, plan, traced.placeholder_names,
                                       traced.placeholder_kinds, sub, origin)
    except ContextParallelError as e:
        raise PlanError(str(e)) from None
    phases = {n["name"]: n.get("phase", "forward") for n in graph["nodes"]}
    lowered = lower_step(runner, traced, sub, phases)
    gm = lowered.gm
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    kinds = traced.placeholder_kinds
    param_index = [k for k, kd in enumerate(kinds) if kd == "parameter"]
    ph_stage = [node_stage.get(n, SHARED) for n in traced.placeholder_names]
    try:
        cuts = cut_stages(gm, ph_stage, node_stage, n_stages,
                          _lowered_alias(gm, traced.loss_tangent), out[0], list(out[1:]),
                          param_index, wanted)
    except StageError as e:
        raise PlanError(f"{origin}{e}") from None
    device = torch.device(mesh.device_type)
    group = mesh.get_group(pp)
    once_per_step = once_per_step_params(doc.get("schedule"), origin)
    parts = {n: e["part"] for n, e in doc["placements"].items() if "part" in e}
    modules, pipe_stages = [], []
    for cut in cuts:
        limit = in_flight_limit(sub)
        split = partition(cut.gm, cut.out_nodes, cut.grad_nodes, cut.tangent_nodes,
                          in_flight=limit, schedule=doc.get("schedule"))
        mod = StageModule(model, cut, split, runner, traced, sub, reduce_once_per_step)
        if reduce_once_per_step:
            check_once_per_step(mod.index, mod.deferred_params, mod.per_microbatch_params,
                                once_per_step, origin)
        dw = None
        if spec.schedule in _SPLIT_BACKWARD:
            mod.part_mismatches = mod.split_backward(parts)
            dw = mod.weight_runner
        modules.append(mod)
        first_in = tuple(_full_example(traced, k) for k in cut.placeholders
                         if kinds[k] == "input") if cut.index == 0 else \
            tuple(_activation(v) for v in cut.act_in_meta)
        outs = tuple(_activation(v) for v in cut.act_out_meta)
        pipe_stages.append(pipelining.PipelineStage(mod, cut.index, n_stages, device,
                                                    input_args=first_in, output_args=outs,
                                                    group=group, dw_builder=dw))
    cls = getattr(pipelining, SCHEDULES[spec.schedule])
    if issubclass(cls, pipelining.schedules.PipelineScheduleSingle):
        if len(pipe_stages) != 1:
            raise PlanError(f"{origin}/pipeline: schedule {spec.schedule} runs one stage per "
                            f"rank, pp rank {my_pp} has {len(pipe_stages)}")
        schedule = cls(pipe_stages[0], spec.microbatches, loss_fn=_identity_loss)
    else:
        schedule = cls(pipe_stages, spec.microbatches, loss_fn=_identity_loss)
    inputs = [k for k, kd in enumerate(kinds) if kd == "input"]
    first_ph = set(cuts[0].placeholders) if cuts[0].index == 0 else set()
    first_inputs = [i for i, k in enumerate(inputs) if k in first_ph and ph_stage[k] == 0]
    return PipelineRunner(spec, modules, schedule, len(inputs), first_inputs, pipe_stages)


def _full_example(traced: Any, k: int) -> torch.Tensor:
    """The full microbatch tensor of traced input placeholder k (zeros of its shape)."""
    meta = traced.flat_args[k]
    return torch.zeros(meta.shape, dtype=meta.dtype)


def _activation(v: torch.Tensor) -> torch.Tensor:
    """An example of an activation crossing stages (its local shape; it carries a gradient
    back, so the receiving stage's buffer requires grad)."""
    return torch.empty(v.shape, dtype=v.dtype, requires_grad=v.is_floating_point())
