"""The planned module: the model's parameters as DTensors, its call the lowered, split step.

`ShardedModule` holds every parameter and buffer as a DTensor at its planned placements (with
the model's own names, so `state_dict`, optimizers and `torch.distributed.checkpoint` see the
model they know).  Its call runs the forward graph of the lowered step (autoshard.lower, split
by autoshard.partition) on the local shards; `backward()` runs the backward graph.  Either it
returns the loss (a step traced with a loss function), or the model's outputs as DTensors at
their planned placements (a step traced without one, as AutoParallel does): then any loss of
them back-propagates, its gradient entering the backward graph where the tracer marked the
outputs' gradients.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate

from .inflight import compile_in_order
from .local import contiguous_pieces, local_chunk, local_slice, redistribute
from .lower import contiguous_stride
from .partition import SplitStep
from .placements import to_string


def _step_function(holder: dict) -> type:
    """An autograd Function over plain tensors: forward runs the forward graph and saves what
    the backward graph reads; backward runs the backward graph.  One class per module, so that
    Dynamo sees the graphs it calls as constants (`torch.compile(module)` compiles them)."""

    class _Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *flat):  # type: ignore[override]
            n_out = holder["n_outputs"]
            res = holder["forward"](*flat)
            ctx.save_for_backward(*res[n_out:])
            ctx.n_flat = len(flat)
            outs = tuple(res[:n_out])
            return outs[0] if n_out == 1 else outs

        @staticmethod
        def backward(ctx, *grad_outputs):  # type: ignore[override]
            grads = holder["backward"](ctx.saved_tensors, grad_outputs)
            return (*grads, *([None] * (ctx.n_flat - len(grads))))

    return _Step


class ShardedModule(torch.nn.Module):
    """The model's parameters as DTensors at their planned placements; calling it runs the
    planned step on this rank.

    `module(*inputs, *targets)` takes this rank's local shards of the inputs and loss targets
    (trace order; `input_placements` says how each is split, `input_slices()` which part of
    the global tensor this rank loads) and returns the loss -- a plain tensor, the same on
    every rank -- or, for a step traced without a loss function, the model's outputs as
    DTensors.  `module(*module.shard_inputs(*full))` runs it from full tensors (the same on
    every rank).  `loss.backward()` fills every `p.grad` with a DTensor laid out like `p`.

    `module.compile(**kw)` compiles the two graphs with `torch.compile` (inductor by default).
    `torch.compile(module)` compiles the whole call instead: the forward is plain tensor code
    (input chunks, `to_local`, one autograd Function over the graphs).
    """

    def __init__(self, model: torch.nn.Module, runner: Any, traced: Any, mesh: DeviceMesh,
                 lowered: Any, split: SplitStep, outputs: Sequence[tuple],
                 tangents: Sequence[list], outputs_mode: bool,
                 in_flight: Optional[int] = None):
        super().__init__()
        self._in_flight = in_flight
        self._runner = runner
        self._traced = traced
        self._lowered = lowered
        self._split = split
        #: outputs: (global shape, placements) of what the call returns; tangents: per
        #: output, (shape, placements its gradient arrives at, placements the plan gave it)
        self._outputs_mode = outputs_mode
        self._outputs = list(outputs)
        # The gradient of a partial sum is the same on every rank: a Partial output's gradient
        # arrives replicated (DTensor.from_local's backward keeps it so).
        self._tangent_specs = [(shape, [Replicate() if p.is_partial() else p for p in pl],
                                planned) for (shape, pl), planned in zip(outputs, tangents)]
        self.mesh = mesh
        #: What runs the graphs (the graphs, their compiled forms, or the audit's interpreter):
        #: plain dict entries, so that the graphs do not become submodules.
        self.__dict__["_holder"] = {"forward": split.forward, "n_outputs": split.n_outputs,
                                    "backward": self._run_backward,
                                    "backward_graph": split.backward}
        self._step_cls = _step_function(self.__dict__["_holder"])
        self._compiled = False
        kinds, names = traced.placeholder_kinds, traced.placeholder_names
        self._param_names = [n for k, n in zip(kinds, names) if k == "parameter"]
        self._buffer_names = [n for k, n in zip(kinds, names) if k == "buffer"]
        self._input_names = [n for k, n in zip(kinds, names) if k == "input"]
        self._input_placements = [runner.placements_of(n).outputs[0] for n in self._input_names]
        meta = dict(zip(names, traced.flat_args))
        #: global shapes of the inputs (the traced step's)
        self._input_shapes = [tuple(meta[n].shape) for n in self._input_names]
        #: this rank's shard shape of each input (checked on every call: computed once)
        self._input_local_shapes = [_local_shape(shape, mesh, pl) for shape, pl in
                                    zip(self._input_shapes, self._input_placements)]
        _adopt(self, model, runner, mesh, self._param_names, self._buffer_names)

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

    def _run_backward(self, saved: Sequence[torch.Tensor], grad_outputs: Sequence) -> list:
        """The backward graph -> one local gradient per parameter.  The incoming gradients
        (the loss's seed, or the model outputs' gradients) enter as the graph's tangents, at
        the placements the plan gave the traced gradient nodes."""
        backward = self.__dict__["_holder"]["backward_graph"]
        tangents = [self._tangent(g, spec) for g, spec in zip(grad_outputs, self._tangent_specs)]
        return list(backward(*saved, *tangents))

    def _tangent(self, g: Optional[torch.Tensor], spec: tuple) -> torch.Tensor:
        shape, arrives, planned = spec
        if g is None:
            return torch.zeros(_local_shape(shape, self.mesh, planned))
        if tuple(arrives) == tuple(planned):
            return g
        d = DTensor.from_local(g, self.mesh, arrives, run_check=False, shape=torch.Size(shape),
                               stride=contiguous_stride(shape))
        return redistribute(d, self.mesh, planned).to_local()

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
        from .context_parallel import permute_placeholder

        coord = self.mesh.get_coordinate()
        # load-balanced context parallelism: sequences cut from the head-tail order
        return [local_chunk(permute_placeholder(t, n, self._runner.layout), self.mesh, pl, coord)
                for t, n, pl in zip(inputs, self._input_names, self._input_placements)]

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
        self._check_count(inputs)
        for t, n, shape, pl, want in zip(inputs, self._input_names, self._input_shapes,
                                         self._input_placements, self._input_local_shapes):
            if list(t.shape) != want:
                hint = (" (the full tensor: pass module.shard_inputs(*full))"
                        if list(t.shape) == list(shape) else "")
                raise ValueError(f"input {n}: shape {list(t.shape)}, but this rank's shard at "
                                 f"{to_string(list(pl))} is {want}{hint}")

    @torch.compiler.disable
    def _run_compiled_graphs(self, *flat: torch.Tensor) -> Any:
        """The step under `torch.compile(module)`: the two planned graphs, each compiled on its
        own (as `module.compile()` does), called from outside the traced frame.  Were Dynamo to
        trace through the autograd Function, AOTAutograd would partition the joint graph anew:
        it saves every gathered parameter for the backward instead of re-gathering it (the
        plan's memory) and sinks the gradient reductions' waits to the end (the plan's
        overlap).  The graph break keeps the planned forward/backward split and its order."""
        self.compile()
        return self._step_cls.apply(*flat)

    def forward(self, *inputs: torch.Tensor) -> Any:
        """inputs: this rank's shards of the model's inputs then the loss targets, in trace
        order (shard_inputs cuts them from full tensors)."""
        self._check_local(inputs)
        flat_in = list(inputs)
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        # to_local() is differentiable: the local gradient comes back as a DTensor laid out
        # like the parameter (the plan's gradient placement is the parameter's).
        ps = [params[n].to_local() for n in self._param_names]
        bs = [buffers[n].to_local() for n in self._buffer_names]
        if torch.compiler.is_compiling():
            out = self._run_compiled_graphs(*ps, *bs, *flat_in)
        else:
            out = self._step_cls.apply(*ps, *bs, *flat_in)
        if not self._outputs_mode:
            return out
        outs = (out,) if len(self._outputs) == 1 else out
        wrapped = tuple(DTensor.from_local(o, self.mesh, pl, run_check=False,
                                           shape=torch.Size(shape), stride=contiguous_stride(shape))
                        for o, (shape, pl) in zip(outs, self._outputs))
        return wrapped[0] if len(wrapped) == 1 else wrapped


def _local_shape(shape: Sequence[int], mesh: DeviceMesh, placements: Sequence) -> list:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    return list(compute_local_shape_and_global_offset(list(shape), mesh, list(placements))[0])


def _adopt(module: torch.nn.Module, model: torch.nn.Module, runner: Any, mesh: DeviceMesh,
           param_names: Sequence[str], buffer_names: Sequence[str]) -> None:
    """Gives `module` a copy of `model`'s submodules with every parameter and buffer replaced
    by a DTensor at its planned placements (cut locally from the full tensor: every rank must
    hold the same initial weights)."""
    holder = copy.deepcopy(model)
    params = dict(holder.named_parameters())
    buffers = dict(holder.named_buffers())
    for n in param_names:
        p = params[n]
        dt = local_slice(p.detach(), mesh, runner.placements_of(n).outputs[0])
        _set_tensor(holder, n, torch.nn.Parameter(dt, requires_grad=p.requires_grad))
    for n in buffer_names:
        from .context_parallel import permute_placeholder

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
