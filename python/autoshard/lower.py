"""Lowering a plan to a per-rank graph: local-tensor ATen ops and explicit collectives.

    lowered = lower_step(runner, traced, mesh, phases)   # runner: apply.StepRunner
    outs = lowered.gm(*local_params, *local_buffers, *local_inputs)   # [loss, grads...]

The traced training step (forward, loss, backward: one joint ATen graph, the graph the planner
planned) is run once, on this rank, by the DTensor step runner (apply.StepRunner) with every
tensor a DTensor at its planned placements -- under `make_fx` on fake tensors.  DTensor's
dispatch therefore happens only while tracing: each op becomes the local op it runs on this
rank's shard (view and expand sizes are rewritten to local sizes, vocabulary-parallel
embeddings get their rank's offset, uneven shards get this rank's extent), and each
redistribution becomes the functional collectives DTensor issues for it
(`_c10d_functional.all_gather_into_tensor`, `reduce_scatter_tensor`, `all_reduce`,
`all_to_all_single`, each followed by `wait_tensor`) on the process group of its mesh dim;
a shard-to-shard move is an all-to-all on a CPU mesh too (cpu_all_to_all).
No collective runs while tracing (fake tensors), so every rank lowers on its own.

The result is an ordinary `torch.fx.GraphModule` over plain tensors: FX's code generator frees
every intermediate after its last use, so the step's peak memory follows the schedule's
liveness (what the planner charged), and `torch.compile` can compile it.  Every node carries
`node.meta["autoshard"]`: the planned node it came from (`node`), the plan edge a collective
belongs to (`edge`: "consumer:slot", "grad:<param>:-1", "<node>:output"), and the `phase`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, Set

import torch
import torch.fx
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate

META_KEY = "autoshard"

#: `_c10d_functional` ops that move data between ranks, by the audit's collective names.
COLLECTIVES = {
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_reduce": "all_reduce",
    "all_to_all_single": "all_to_all",
}

#: meta flag of an all-reduce that does an all-gather (autoshard.inflight.gathers_as_sums):
#: the audit and the graph passes still see the gather it stands for.
GATHER_AS_SUM = "autoshard_gather_as_sum"


class LoweringError(ValueError):
    """The plan cannot be lowered (the message names the node)."""


@dataclass
class LoweredStep:
    """One rank's training step as a graph of local ops and collectives.

    gm: called with the local tensors of (parameters, buffers, inputs) in the traced step's
        placeholder order; returns [loss] + one gradient per parameter (None where the loss
        does not depend on it), each local to the parameter's planned placements.
    loss_placements: the loss's (replicated on every mesh dim).
    """

    gm: torch.fx.GraphModule
    loss_placements: list


def collective_kind(node: torch.fx.Node) -> Optional[str]:
    """The audit's name of a functional collective node ('all_gather', ...), else None."""
    if node.op != "call_function":
        return None
    target = node.target
    if getattr(target, "namespace", "") != "_c10d_functional":
        return None
    if node.meta.get(GATHER_AS_SUM):
        return "all_gather"
    return COLLECTIVES.get(target.__name__.split(".")[0])


# --- stamping the nodes make_fx creates -----------------------------------------------------
class _Stamp:
    """While active, every FX node created gets meta["autoshard"] = the current context."""

    def __init__(self) -> None:
        self.context: dict = {}
        self._saved: Optional[Callable] = None

    @contextlib.contextmanager
    def at(self, **context: Any) -> Iterator[None]:
        saved = self.context
        self.context = {**saved, **context}
        try:
            yield
        finally:
            self.context = saved

    def __enter__(self) -> "_Stamp":
        original = torch.fx.Graph.create_node
        self._saved = original
        stamp = self

        def create_node(graph, *args, **kwargs):
            node = original(graph, *args, **kwargs)
            node.meta[META_KEY] = dict(stamp.context)
            return node

        torch.fx.Graph.create_node = create_node
        return self

    def __exit__(self, *exc: Any) -> bool:
        torch.fx.Graph.create_node = self._saved
        return False


def exchange_shards(local: torch.Tensor, gather_dim: int, shard_dim: int, n: int,
                    group: Any) -> torch.Tensor:
    """This rank's piece after moving the split of `local` from `gather_dim` to `shard_dim`
    over a group of n ranks: chunk k of `shard_dim` goes to rank k, and the pieces received
    are laid end to end along `gather_dim` in rank order (both dims split evenly).  The
    chunks are stacked by a view where they are blocks of memory already (`shard_dim` the
    outermost dim of a contiguous tensor), and laid end to end by one where `gather_dim` is
    the outermost: no copy on that side."""
    from torch.distributed._functional_collectives import all_to_all_single

    send = local.unflatten(shard_dim, (n, -1)).movedim(shard_dim, 0).contiguous()
    recv = all_to_all_single(send, None, None, group)
    return recv.movedim(0, gather_dim).flatten(gather_dim, gather_dim + 1)


@contextlib.contextmanager
def cpu_all_to_all() -> Iterator[None]:
    """While active, DTensor's shard-to-shard move on a CPU mesh is one functional
    `all_to_all_single`, as on a GPU.  DTensor 2.13 does it there as an all-gather of the
    whole tensor and a local chunk ("CPU process group does not support alltoall yet"),
    which on gloo runs as a sum of zero-padded buffers (autoshard.inflight): n times the
    bytes on the wire, a zeroed buffer, a concatenation and a copy of the chunk, against the
    all-to-all the plan priced.  gloo has an all-to-all (`ProcessGroupGloo::alltoall_base`).
    DTensor pads an uneven split before the move (Shard._pad_for_new_shard_dim), so the
    pieces are always even here."""
    from torch.distributed.tensor import placement_types

    original = placement_types.shard_dim_alltoall

    def move(local, gather_dim, shard_dim, mesh, mesh_dim):
        if mesh.device_type != "cpu":
            return original(local, gather_dim, shard_dim, mesh, mesh_dim)
        return exchange_shards(local, gather_dim, shard_dim, mesh.size(mesh_dim),
                               mesh.get_group(mesh_dim))

    placement_types.shard_dim_alltoall = move
    try:
        yield
    finally:
        placement_types.shard_dim_alltoall = original


# --- lowering -------------------------------------------------------------------------------
def backward_nodes(gm: torch.fx.GraphModule, tangents: Set[torch.fx.Node]) -> dict:
    """node -> True when it belongs to the backward: a tangent, a node the lowering stamped
    with the planned node's backward phase, or anything computed from those."""
    backward: dict = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            backward[node] = False
            continue
        stamp = node.meta.get(META_KEY, {})
        backward[node] = (node in tangents or stamp.get("phase") == "backward"
                          or any(backward[i] for i in node.all_input_nodes))
    return backward


def _local_example(shape: Sequence[int], dtype: torch.dtype, placements: Sequence,
                   mesh: DeviceMesh) -> torch.Tensor:
    """An uninitialised tensor of this rank's local shape (only its metadata is traced)."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local_shape, _ = compute_local_shape_and_global_offset(list(shape), mesh, list(placements))
    return torch.empty(local_shape, dtype=dtype, device=mesh.device_type)


def contiguous_stride(shape: Sequence[int]) -> tuple:
    """Strides of a contiguous tensor of `shape`."""
    stride, acc = [], 1
    for s in reversed(list(shape)):
        stride.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(stride))


def lower_step(runner: Any, traced: Any, mesh: DeviceMesh,
               phases: Optional[dict] = None) -> LoweredStep:
    """Lowers the planned step on this rank.

    runner: the apply.StepRunner over the traced graph and the plan (its placements and
        names); its edge hook is used while tracing to stamp collectives with their edge.
    traced: the autoshard.tracer TracedStep (placeholders, their kinds and names, the meta
        tensors the step was traced with).
    phases: graph node name -> "forward" | "backward" (from the graph JSON), for the stamps.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    from .dtensor_rules import ensure_registered
    from .tracer.meta_kernels import scoped_meta_kernels

    ensure_registered()
    names = traced.placeholder_names
    kinds = traced.placeholder_kinds
    specs = []
    for name, meta in zip(names, traced.flat_args):
        outs = runner.placements_of(name).outputs
        if outs[0] is None:
            raise LoweringError(f"node {name}: the plan gives no placement")
        specs.append((name, tuple(meta.shape), meta.dtype, list(outs[0])))
    for name, _, _, pl in specs:
        if any(p.is_partial() for p in pl):
            raise LoweringError(f"node {name}: a parameter, buffer or input planned as "
                                f"partial cannot be fed from full tensors")
    param_names = [n for n, k in zip(names, kinds) if k == "parameter"]
    by_param = dict(zip(traced.grad_params, range(len(traced.grad_params))))
    replicate = [Replicate()] * mesh.ndim
    stamp = _Stamp()
    phases = phases or {}

    @contextlib.contextmanager
    def edge_hook(node: str, slot: Any) -> Iterator[None]:
        phase = phases.get(node, "backward" if str(node).startswith("grad:") else "forward")
        with stamp.at(node=node, phase=phase, edge=f"{node}:{slot}"):
            yield

    def step(*local: torch.Tensor) -> list:
        wrapped = []
        for t, (name, shape, _, pl) in zip(local, specs):
            # the placeholder's own view: stamped with it (its stage, in a pipelined plan)
            with stamp.at(node=name, phase="forward"):
                wrapped.append(DTensor.from_local(t, mesh, pl, run_check=False,
                                                  shape=torch.Size(shape),
                                                  stride=contiguous_stride(shape)))
        outs = runner.run(wrapped)
        loss, grads = outs[0], outs[1:]
        if isinstance(loss, DTensor):
            if tuple(loss.placements) != tuple(replicate):
                loss = runner._to(loss, replicate, "loss", "output")
            loss = loss._local_tensor
        result = [loss]
        params = {n: pl for n, _, _, pl in specs}
        for n in param_names:
            k = by_param.get(n)
            g = grads[k] if k is not None else None
            if isinstance(g, DTensor):
                g = runner._to(g, params[n], f"grad:{n}", -1)._local_tensor
            result.append(g)
        return result

    examples = [_local_example(shape, dtype, pl, mesh) for _, shape, dtype, pl in specs]
    saved_hook = runner.edge_hook
    runner.edge_hook = edge_hook
    try:
        with stamp, torch.no_grad(), scoped_meta_kernels(), cpu_all_to_all():
            gm = make_fx(step, tracing_mode="fake")(*examples)
    finally:
        runner.edge_hook = saved_hook
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return LoweredStep(gm=gm, loss_placements=replicate)
