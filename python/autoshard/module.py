"""The planned module: a stage's parameters as DTensors, its call the lowered, split step.

    step = apply_placement(model, "out/placements.json", mesh, loss_fn=loss_fn)  # one stage
    pipe = apply_pipeline(model, "out/placements.json", mesh, ...)  # pipe.stages: one per stage

One module class runs every plan.  A plan without pipeline stages is the one-stage case of a
pipelined one: the same lowering (autoshard.lower), the same cut into stages
(autoshard.stages, which with one stage keeps the whole step), the same forward/backward split
(autoshard.partition), the same autograd Function.  `ShardedModule` holds the stage's
parameters and buffers as DTensors at their planned placements (with the model's own names,
so `state_dict`, optimizers and `torch.distributed.checkpoint` see the model they know); its
call runs the stage's forward graph on the local shards and keeps what the backward graph
reads; autograd's backward runs the backward graph.

Contract.  `module(*tensors, **inputs)`:
  * the first stage (the whole step, for a plan without stages) takes the model's inputs then
    the loss targets (trace order), or those of them not passed by name as `input<k>`; a
    later stage takes the previous stage's activations (local tensors) and its own model
    inputs by name.  A module built for local inputs (apply_placement) takes each rank's shards
    (`input_placements`, `input_slices()`, `shard_inputs(*full)`); a pipeline stage takes full
    microbatches and cuts its shard itself.
  * the last stage returns the loss -- a plain tensor, the same on every rank -- or, for a step
    traced without a loss function, the model's outputs as DTensors at their planned
    placements (any loss of them back-propagates, its gradient entering the backward graph
    where the tracer marked the outputs' gradients); an earlier stage returns the activations
    it sends on.
  * after `backward`, every `p.grad` is a DTensor laid out like `p`.  Where the plan reduces a
    gradient once per step (a pipeline's "once_per_step", autoshard.deferred_grads), the
    backward keeps the un-reduced local sum and `finish_step(scale)` reduces it; where the
    plan's schedule splits the backward into input and weight gradients (zero bubble,
    autoshard.backward_split), `weight_runner()` runs the weight part.

Why one class: the two runtimes it replaces repeated the parameter handling and the autograd
Function and drifted apart (which inputs are local, which gradients reach `.grad`); with one,
a fix to either reaches every plan.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate

from .backward_split import split_backward
from .context_parallel import permute_placeholder
from .deferred_grads import DeferredReductions
from .inflight import compile_in_order
from .local import contiguous_pieces, local_chunk, local_slice, redistribute
from .lower import contiguous_stride
from .partition import SplitStep
from .placements import to_string
from .stages import StageGraph

class _BoxedCall(torch.fx.graph.CodeGen):
    """Code generation for a graph called with one list of its arguments, which the generated
    code unpacks and clears: the caller keeps no reference, so the graph's own `x = None`
    after each value's last use frees an argument as early as an intermediate."""

    def gen_fn_def(self, free_vars: list, maybe_return_annotation: str, **kwargs: Any) -> str:
        names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
        head = f"def forward(self, args_list){maybe_return_annotation}:"
        if names:
            head += f"\n    {', '.join(names)}, = args_list\n    args_list.clear()"
        return head


def _boxed_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm`'s graph as a module called with one list of arguments (_BoxedCall)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    graph.set_codegen(_BoxedCall())
    return torch.fx.GraphModule(gm, graph)


class _Step(torch.autograd.Function):
    """A stage's step over plain tensors: forward runs the forward graph and saves what the
    backward graph reads; backward runs the backward graph (or its input-gradient part, when
    the schedule runs the weight gradients apart).  The graphs are read from the module's
    holder at each call, so `compile()` and the audit's interpreter take effect at once."""

    @staticmethod
    def forward(ctx, module, *flat):  # type: ignore[override]
        holder = module.__dict__["_holder"]
        n_out = module._split.n_outputs
        res = holder["forward"](*flat)
        ctx.save_for_backward(*res[n_out:])
        ctx.module = module
        return tuple(res[:n_out])

    @staticmethod
    def backward(ctx, *grad_outputs):  # type: ignore[override]
        saved = list(ctx.saved_tensors)
        # Autograd's own references go now (unless the graph is retained), so that the
        # backward graph, called boxed, frees each saved activation after its last use, as
        # the planner's memory model counts it; otherwise all of them would live to the end.
        ctx.maybe_clear_saved_tensors()
        return (None, *ctx.module._backward(saved, grad_outputs))


class ShardedModule(torch.nn.Module):
    """One stage of a plan (the whole step, for a plan without pipeline stages): its
    parameters as DTensors at their planned placements; calling it runs the planned step of
    the stage on this rank (module docstring: what it takes and returns).

    `module.compile(**kw)` compiles the two graphs with `torch.compile` (inductor by default).
    `torch.compile(module)` compiles the whole call instead: the forward is plain tensor code
    (input chunks, `to_local`, one autograd Function over the graphs).
    """

    def __init__(self, model: torch.nn.Module, runner: Any, traced: Any, mesh: DeviceMesh,
                 lowered: Any, stage: StageGraph, split: SplitStep,
                 outputs: Optional[Sequence[tuple]] = None,
                 tangents: Optional[Sequence[list]] = None, *, outputs_mode: bool = False,
                 local_inputs: bool = True, in_flight: Optional[int] = None,
                 deferred: Optional[DeferredReductions] = None):
        """outputs / tangents: on the last stage, per output its (global shape, placements)
        and the placements the plan gave its gradient (None: the stage's outputs are local
        activations whose gradients arrive local).  outputs_mode: return the outputs as
        DTensors.  local_inputs: the call takes this rank's shards of the model inputs (else
        full tensors, cut here).  deferred: the backward with the once-per-step reductions cut
        out (None: every reduction runs in the backward)."""
        super().__init__()
        self.index = stage.index
        self.mesh = mesh
        self._in_flight = in_flight
        self._runner = runner
        self._traced = traced
        self._lowered = lowered
        self._graph = stage
        self._local_inputs = local_inputs
        self._deferred = deferred or DeferredReductions(backward=split.backward,
                                                        lowered=split.backward)
        self._split = dataclasses.replace(split, backward=self._deferred.backward)
        #: outputs: (global shape, placements) of what the call returns; tangents: per
        #: output, (shape, placements its gradient arrives at, placements the plan gave it).
        #: The gradient of a partial sum is the same on every rank: a Partial output's gradient
        #: arrives replicated (DTensor.from_local's backward keeps it so).
        self._outputs_mode = outputs_mode
        self._outputs = list(outputs or [])
        self._tangent_specs = [(shape, [Replicate() if p.is_partial() else p for p in pl],
                                planned) for (shape, pl), planned in
                               zip(self._outputs, tangents or [])]
        #: What runs the graphs (the graphs, their compiled forms, or the audit's interpreter):
        #: plain dict entries, so that the graphs do not become submodules.
        self.__dict__["_holder"] = {"forward": self._split.forward,
                                    "backward_graph": self._split.backward}
        self._compiled = False
        names, kinds = traced.placeholder_names, traced.placeholder_kinds
        #: the stage's primals: (name, kind, placements) in traced placeholder order
        self._slots = [(names[k], kinds[k], runner.placements_of(names[k]).outputs[0])
                       for k in stage.placeholders]
        self._n_primals = len(stage.placeholders) + len(stage.act_in)
        pos = {k: i for i, k in enumerate(stage.placeholders)}
        self._grad_param_slots = [pos[k] for k in stage.grad_params]
        all_inputs = [k for k, kd in enumerate(kinds) if kd == "input"]
        #: the stage's inputs: name -> index among the step's inputs (its `input<k>` name)
        self._input_index = {names[k]: all_inputs.index(k) for k in stage.placeholders
                             if kinds[k] == "input"}
        self._param_names = [n for n, k, _ in self._slots if k == "parameter"]
        self._buffer_names = [n for n, k, _ in self._slots if k == "buffer"]
        self._input_names = [n for n, k, _ in self._slots if k == "input"]
        self._input_placements = [pl for _, k, pl in self._slots if k == "input"]
        meta = dict(zip(names, traced.flat_args))
        #: global shapes of the inputs (the traced step's)
        self._input_shapes = [tuple(meta[n].shape) for n in self._input_names]
        #: this rank's shard shape of each input (checked on every call: computed once)
        self._input_local_shapes = [_local_shape(shape, mesh, pl) for shape, pl in
                                    zip(self._input_shapes, self._input_placements)]
        self._unreduced: dict = {}  # param-gradient index -> sum over this step's microbatches
        self._parts = None  # BackwardParts when the schedule splits the backward
        self._pending: list = []  # per B not yet followed by its W: (W's inputs, handoff)
        others = {n for n, k in zip(names, kinds) if k in ("parameter", "buffer")} - \
            {n for n, _, _ in self._slots}
        _adopt(self, model, runner, mesh, self._param_names, self._buffer_names, others)

    @property
    def first(self) -> bool:
        """Whether this is the first stage (it receives no activations)."""
        return not self._graph.act_in

    @property
    def mismatches(self) -> list:
        """Ops whose DTensor output placement differed from the plan while lowering
        (redistributed to the planned one; empty when the plan is exact)."""
        return self._runner.mismatches

    @property
    def unbalanced_attention(self) -> list:
        """Load-balanced context-parallel attention nodes run with contiguous positions, as
        the plan cuts the sequence after its sources (autoshard.context_parallel)."""
        return self._runner.unbalanced

    @property
    def step_graph(self) -> torch.fx.GraphModule:
        """The lowered per-rank joint graph (local ops and functional collectives)."""
        return self._lowered.gm

    @property
    def split(self) -> SplitStep:
        """The forward and backward graphs the module runs."""
        return self._split

    @property
    def lowered_backward(self) -> torch.fx.GraphModule:
        """The backward graph as lowered: every gradient reduction still in it."""
        return self._deferred.lowered

    def _grad_names(self) -> list:
        return [self._slots[slot][0] for slot in self._grad_param_slots]

    @property
    def deferred_params(self) -> list:
        """The parameters whose gradient reductions run once per step (finish_step)."""
        names = self._grad_names()
        return [names[k] for k in sorted(self._deferred.reductions)]

    @property
    def per_microbatch_params(self) -> dict:
        """Parameter -> why a collective of its gradient's redistribution into the optimizer's
        placement, which the planner prices once per step, still runs in every backward.
        (A collective of a gradient the plan puts before the optimizer's edge, such as the
        gather of an activation before the sum that makes it a norm weight's gradient, runs
        per microbatch as planned and is not listed.)"""
        names = self._grad_names()
        why = {names[k]: w for k, w in self._deferred.kept.items()}
        planned = self._deferred.planned
        left = [n for n in self._deferred.left
                if planned is None or n in {names[k] for k in planned}]
        return {name: why.get(name, "its result is read by other values of the backward")
                for name in left}

    def run_graphs_with(self, forward: Callable, backward: Callable) -> tuple:
        """Runs the forward and backward graphs with these callables (called like the graphs)
        from now on; returns the previous pair (the audit runs them node by node this way)."""
        h = self.__dict__["_holder"]
        previous = (h["forward"], h["backward_graph"])
        h["forward"], h["backward_graph"] = forward, backward
        return previous

    def compile(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Compiles the forward and backward graphs with torch.compile (same arguments),
        each keeping its order of collectives, waits and compute: the plan's schedule
        (autoshard.inflight.compile_in_order)."""
        if not self._compiled:
            self.run_graphs_with(
                compile_in_order(self._split.forward, self._in_flight, *args, **kwargs),
                compile_in_order(self._split.backward, self._in_flight, *args, **kwargs))
            self._compiled = True

    # --- backward ---------------------------------------------------------------------------
    def _backward(self, saved: Sequence[torch.Tensor], grad_outputs: Sequence) -> list:
        """The backward graph -> one gradient per primal (None for buffers and inputs).  The
        incoming gradients (the loss's seed, the model outputs' gradients, or the next stage's)
        enter as the graph's tangents."""
        tangents = self._tangents(grad_outputs)
        n_p = len(self._grad_param_slots)
        per_input: list = [None] * self._n_primals
        if self._parts is not None:
            # Zero bubble: B now; W's inputs wait for the schedule's W action.
            args = (*saved, *tangents)
            act_grads, handoff = self._parts.run_input(*args)
            self._pending.append((self._parts.weight_args(args), handoff))
        else:
            saved.extend(tangents)
            grads = list(self._run_backward_graph(saved))
            act_grads = grads[n_p:]
            for k, (slot, gr) in enumerate(zip(self._grad_param_slots, grads[:n_p])):
                if not self._accumulate(k, gr):
                    per_input[slot] = gr
        for k, gr in enumerate(act_grads):
            per_input[self._n_primals - len(self._graph.act_in) + k] = gr
        return per_input

    def _run_backward_graph(self, args: list) -> Sequence:
        """The backward graph on `args`, which it empties: the plain graph runs as its boxed
        copy (regenerated when the graph is), so each argument is freed after its last use; a
        compiled or interpreted graph is called with the arguments."""
        fn = self.__dict__["_holder"]["backward_graph"]
        if fn is not self._split.backward:
            call_args = tuple(args)
            args.clear()
            return fn(*call_args)
        code, boxed = self.__dict__.get("_boxed", (None, None))
        if code is not fn.code:
            boxed = _boxed_copy(fn)
            self.__dict__["_boxed"] = (fn.code, boxed)
        return boxed(args)

    def _tangents(self, grad_outputs: Sequence[Optional[torch.Tensor]]) -> list:
        """The gradients of the stage's outputs as its backward graph's tangents, at the
        placements the plan gave them (zeros for an output without a gradient)."""
        if not self._tangent_specs:  # local activations: their gradients arrive local
            return [torch.zeros(v.shape, dtype=v.dtype) if g is None else g
                    for g, v in zip(grad_outputs, self._graph.act_out_meta)]
        return [self._tangent(g, spec) for g, spec in zip(grad_outputs, self._tangent_specs)]

    def _tangent(self, g: Optional[torch.Tensor], spec: tuple) -> torch.Tensor:
        shape, arrives, planned = spec
        if g is None:
            return torch.zeros(_local_shape(shape, self.mesh, planned))
        if tuple(arrives) == tuple(planned):
            return g
        d = DTensor.from_local(g, self.mesh, arrives, run_check=False, shape=torch.Size(shape),
                               stride=contiguous_stride(shape))
        return redistribute(d, self.mesh, planned).to_local()

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

    def _add_grad(self, name: str, local: torch.Tensor) -> None:
        """Adds a local gradient to parameter `name`'s .grad, laid out like the parameter."""
        p = dict(self.named_parameters())[name]
        d = DTensor.from_local(local, p.device_mesh, p.placements, run_check=False,
                               shape=p.shape, stride=p.stride())
        if p.grad is None:
            p.grad = d
        else:
            p.grad += d

    def finish_step(self, scale: float = 1) -> None:
        """After the step's last microbatch: reduces each deferred gradient's sum once, divides
        it by `scale` (the schedule's scale_grads, as it divided the other gradients) and adds it
        to the parameter's .grad, at the parameter's placements as the backward would have."""
        if not self._unreduced:
            return
        order = sorted(self._deferred.reductions)
        names = self._grad_names()
        if set(self._unreduced) != set(order):
            missing = [names[k] for k in order if k not in self._unreduced]
            raise RuntimeError(f"stage {self.index}: no gradient this step for {missing}")
        reduced = self._deferred.step(*[self._unreduced[k] for k in order])
        self._unreduced = {}
        for k, red in zip(order, reduced):
            self._add_grad(names[k], red / scale if scale != 1 else red)

    def split_backward(self, parts: Mapping[str, str]) -> None:
        """Runs the backward as B (in autograd's backward: activation gradients) and W
        (weight_runner(), when the zero-bubble schedule runs its W action), each lowered node
        in the part the plan gives its planned node (`parts`: planned node -> its "part",
        autoshard.backward_split)."""
        self._parts = split_backward(self._split.backward, len(self._grad_param_slots), parts)

    def weight_runner(self) -> Callable[[], None]:
        """The W of the backward that just ran (torch's PipelineStage dw_builder): computes
        the parameter gradients and accumulates them into the parameters' .grad, as autograd
        does for the whole backward."""
        if self._parts is None or not self._pending:
            raise RuntimeError(f"stage {self.index}: no input-gradient backward to follow")
        args, handoff = self._pending.pop()
        parts = self._parts
        names = self._grad_names()

        def run() -> None:
            for k, (name, g) in enumerate(zip(names, parts.run_weight(*args, *handoff))):
                if not self._accumulate(k, g) and g is not None:
                    self._add_grad(name, g)

        return run

    # --- inputs -----------------------------------------------------------------------------
    @property
    def input_placements(self) -> list:
        """Per input (trace order: the model's inputs, then the loss targets), its planned
        placements over the mesh: how the global batch is split among the ranks."""
        return [list(pl) for pl in self._input_placements]

    def _check_count(self, inputs: Sequence) -> None:
        if len(inputs) != len(self._input_names):
            raise TypeError(f"expected {len(self._input_names)} tensors "
                            f"({', '.join(self._input_names)}), got {len(inputs)}")

    def shard_inputs(self, *inputs: torch.Tensor) -> list:
        """Full (global) input tensors, the same on every rank -> this rank's local shards,
        what the module's call takes (no communication): the full-batch convenience."""
        self._check_count(inputs)
        return [self._cut(t, n, pl) for t, n, pl in
                zip(inputs, self._input_names, self._input_placements)]

    def _cut(self, t: torch.Tensor, name: str, placements: Sequence) -> torch.Tensor:
        """This rank's shard of the full input `name` (load-balanced context parallelism:
        cut from the head-tail order)."""
        return local_chunk(permute_placeholder(t, name, self._runner.layout), self.mesh,
                           placements, self.mesh.get_coordinate())

    def input_slices(self) -> list:
        """Per input, the part of the global tensor this rank loads: a tuple of slices, one per
        dim (what a per-rank data loader reads, as with DistributedSampler).  Raises
        ValueError for an input the plan permutes (load-balanced context parallelism: use
        shard_inputs on the full tensor) or splits into several blocks (an uneven strided
        shard, local.contiguous_pieces)."""
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        out = []
        for i, (n, pl) in enumerate(zip(self._input_names, self._input_placements)):
            if self._runner.layout is not None and self._runner.layout.permute.get(n):
                raise ValueError(f"input {n}: its sequence is permuted for load-balanced "
                                 f"context parallelism; cut it with shard_inputs()")
            shape = self._input_shapes[i]
            if not contiguous_pieces(shape, tuple(self.mesh.shape), pl):
                raise ValueError(f"input {n}: at {to_string(list(pl))} a rank's piece is not "
                                 f"one slice of the global tensor; cut it with shard_inputs()")
            local, offset = compute_local_shape_and_global_offset(list(shape), self.mesh,
                                                                  list(pl))
            out.append(tuple(slice(o, o + s) for o, s in zip(offset, local)))
        return out

    def _check_local(self, inputs: Sequence[torch.Tensor]) -> None:
        """A clear error for full tensors passed where local shards are expected."""
        for t, n, shape, pl, want in zip(inputs, self._input_names, self._input_shapes,
                                         self._input_placements, self._input_local_shapes):
            if list(t.shape) != want:
                hint = (" (the full tensor: pass module.shard_inputs(*full))"
                        if list(t.shape) == list(shape) else "")
                raise ValueError(f"input {n}: shape {list(t.shape)}, but this rank's shard at "
                                 f"{to_string(list(pl))} is {want}{hint}")

    def _stage_inputs(self, tensors: Sequence[torch.Tensor], named: Mapping) -> list:
        """The stage's model inputs in slot order: positional on the first stage (those not
        passed by name as `input<k>`), by name on the others; local shards, or cut here."""
        if self.first and not named:
            self._check_count(tensors)
        it = iter(tensors) if self.first else iter(())
        out = []
        for name in self._input_names:
            key = f"input{self._input_index[name]}"
            t = named.get(key) if key in named else next(it, None)
            if t is None:
                raise TypeError(f"stage {self.index}: no tensor for input '{name}'")
            out.append(t)
        if self._local_inputs:
            self._check_local(out)
            return out
        return [self._cut(t, n, pl) for t, n, pl in
                zip(out, self._input_names, self._input_placements)]

    @torch.compiler.disable
    def _run_compiled_graphs(self, *flat: torch.Tensor) -> Any:
        """The step under `torch.compile(module)`: the two planned graphs, each compiled on its
        own (as `module.compile()` does), called from outside the traced frame.  Were Dynamo to
        trace through the autograd Function, AOTAutograd would partition the joint graph anew:
        it saves every gathered parameter for the backward instead of re-gathering it (the
        plan's memory) and sinks the gradient reductions' waits to the end (the plan's
        overlap).  The graph break keeps the planned forward/backward split and its order."""
        self.compile()
        return _Step.apply(self, *flat)

    def forward(self, *tensors: torch.Tensor, **inputs: torch.Tensor) -> Any:
        """tensors: on the first stage this rank's shards of the model's inputs then the loss
        targets, in trace order (shard_inputs cuts them from full tensors; a pipeline stage
        takes full microbatches); on a later stage the previous stage's activations.
        inputs: `input<k>`, the stage's model inputs that are not positional."""
        model_inputs = iter(self._stage_inputs(tensors, inputs))
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        # to_local() is differentiable: the local gradient comes back as a DTensor laid out
        # like the parameter (the plan's gradient placement is the parameter's).
        flat = [params[n].to_local() if k == "parameter" else
                buffers[n].to_local() if k == "buffer" else next(model_inputs)
                for n, k, _ in self._slots]
        if not self.first:
            flat.extend(tensors)
        if torch.compiler.is_compiling():
            out = self._run_compiled_graphs(*flat)
        else:
            out = _Step.apply(self, *flat)
        if self._outputs_mode:
            out = tuple(DTensor.from_local(o, self.mesh, pl, run_check=False,
                                           shape=torch.Size(shape),
                                           stride=contiguous_stride(shape))
                        for o, (shape, pl) in zip(out, self._outputs))
        return out[0] if len(out) == 1 else out


def _local_shape(shape: Sequence[int], mesh: DeviceMesh, placements: Sequence) -> list:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    return list(compute_local_shape_and_global_offset(list(shape), mesh, list(placements))[0])


def _adopt(module: torch.nn.Module, model: torch.nn.Module, runner: Any, mesh: DeviceMesh,
           param_names: Sequence[str], buffer_names: Sequence[str],
           others: set = frozenset()) -> None:
    """Gives `module` a copy of `model`'s submodules with every parameter and buffer of the
    stage replaced by a DTensor at its planned placements (cut locally from the full tensor:
    every rank must hold the same initial weights), and those of other stages (`others`)
    removed."""
    holder = copy.deepcopy(model)
    params = dict(holder.named_parameters())
    buffers = dict(holder.named_buffers())
    for n in others:
        _remove(holder, n, buffer=n in buffers)
    for n in param_names:
        p = params[n]
        dt = local_slice(p.detach(), mesh, runner.placements_of(n).outputs[0])
        _set_tensor(holder, n, torch.nn.Parameter(dt, requires_grad=p.requires_grad))
    for n in buffer_names:
        pl = runner.placements_of(n).outputs[0]
        dt = local_slice(permute_placeholder(buffers[n].detach(), n, runner.layout), mesh, pl)
        _set_tensor(holder, n, dt, buffer=True)
    for cname, child in holder.named_children():
        module.add_module(cname, child)
    for pname, p in holder.named_parameters(recurse=False):
        module.register_parameter(pname, p)
    for bname, b in holder.named_buffers(recurse=False):
        module.register_buffer(bname, b,
                               persistent=bname not in holder._non_persistent_buffers_set)


def _set_tensor(root: torch.nn.Module, name: str, value, buffer: bool = False) -> None:
    mod_path, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_path) if mod_path else root
    if buffer:
        persistent = leaf not in getattr(mod, "_non_persistent_buffers_set", set())
        mod.register_buffer(leaf, value, persistent=persistent)
    else:
        mod.register_parameter(leaf, value)


def _remove(root: torch.nn.Module, name: str, buffer: bool) -> None:
    mod_path, _, leaf = name.rpartition(".")
    mod = root.get_submodule(mod_path) if mod_path else root
    (mod._buffers if buffer else mod._parameters).pop(leaf, None)
