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
an autoshard.module.ShardedModule: the path and the class `apply_placement` runs a plan
without stages with (apply.build_stages; that plan is the one-stage case), its call one
autograd Function (forward graph; backward graph in its backward), so
`torch.distributed.pipelining.PipelineStage` drives it like any stage module: it runs
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
or reduce_scatter of a Partial sum, an all_gather of a shard).  For the parameters the plan
lists ("once_per_step" of its schedule), autoshard.deferred_grads cuts them out (before
the B/W split, so W is cut too): the backward returns the un-reduced local gradient, the
stage sums it over the microbatches, and after the schedule's last microbatch
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

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import torch
from torch.distributed.device_mesh import DeviceMesh

from .apply import ALL_DEFERRABLE, StepRunner, build_stages, graph_names, trace_for_apply
from .backward_split import BackwardSplitError, planned_parts
from .context_parallel import ContextParallelError, planned_layout
from .deferred_grads import check_once_per_step, once_per_step_params
from .plan_file import (PlacementsArg, PlanError, load_placements, parse_placements,
                        placements_str, planned_order, planned_twins, read_placements)
from .stages import SHARED

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
        self.stages = stages            # this rank's stage modules (ShardedModule)
        self.pipeline_stages = pipe_stages  # the PipelineStage objects
        self.schedule = schedule
        self._n_inputs = n_inputs
        self._first_inputs = first_inputs  # input indices the first stage takes positionally

    def parameters(self) -> list:
        """The parameters of this rank's stages (DTensors), for the optimizer."""
        return [p for s in self.stages for p in s.parameters()]

    def named_parameters(self) -> list:
        """(name, parameter) of this rank's stages, named as in the original model."""
        return [(n, p) for s in self.stages for n, p in s.named_parameters()]

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
    names = graph_names(traced.gm, graph, traced.placeholder_names)
    runner = StepRunner(traced.gm, plan, names, sub)
    runner.order = planned_order(traced.gm, names, doc.get("schedule"), origin)
    runner.twins = planned_twins(doc.get("schedule"), plan, origin)
    try:
        runner.layout = planned_layout(doc, plan, sub, origin)
    except ContextParallelError as e:
        raise PlanError(str(e)) from None
    once_per_step = None
    if reduce_once_per_step:
        once_per_step = once_per_step_params(doc.get("schedule"), origin)
        if once_per_step is None:
            warnings.warn(f"{origin}/schedule/once_per_step: missing (a file from an older "
                          f"writer): every gradient reduction that can run once per step "
                          f"does; plan it again to run the planned ones", stacklevel=2)
            once_per_step = ALL_DEFERRABLE
    modules = build_stages(model, runner, traced, graph, sub, doc, node_stage=node_stage,
                           n_stages=n_stages, wanted=wanted, local_inputs=False,
                           once_per_step=once_per_step, origin=origin)
    kinds = traced.placeholder_kinds
    ph_stage = [node_stage.get(n, SHARED) for n in traced.placeholder_names]
    device = torch.device(mesh.device_type)
    group = mesh.get_group(pp)
    parts = planned_parts(doc)
    pipe_stages = []
    for mod in modules:
        cut = mod._graph
        if reduce_once_per_step:
            check_once_per_step(mod.index, mod.deferred_params, mod.per_microbatch_params,
                                once_per_step_params(doc.get("schedule"), origin), origin)
        dw = None
        if spec.schedule in _SPLIT_BACKWARD:
            try:
                mod.split_backward(parts)
            except BackwardSplitError as e:
                raise PlanError(f"{origin}/placements: stage {mod.index}: {e}") from None
            dw = mod.weight_runner
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
    first_ph = set(modules[0]._graph.placeholders) if modules[0].index == 0 else set()
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
