"""Context-parallel attention: the SDPA nodes a plan shards on the sequence dim over a mesh dim.

A plan marks such a node (placements.json "context_parallel": {"mesh_dim", "kind",
"load_balance"}, docs/pipeline-format.md); q, k, v and the output are sharded on dim 2 of
[B, H, S, D] (the logsumexp on dim 2 of [B, H, S]) over that mesh dim, so each rank holds the
queries, keys and values of its own positions.  Attention needs every key of a query's past,
so the lowering (autoshard.apply.StepRunner -> autoshard.lower) replaces the op by:

  * "allgather" (Llama 3 paper, Dubey et al. 2024, section 3.3.2): K and V all-gathered over
    the dim (functional collectives), local attention of the rank's queries against all keys
    with the causal mask of their global positions; the backward gathers K and V again and
    reduce-scatters dK and dV.
  * "ring" (Liu et al. 2023, "Ring Attention with Blockwise Transformers"): P steps; in step i
    the rank attends to the K/V chunk of rank r - i while the next chunk is already in flight
    (torch.distributed batch_isend_irecv to r + 1, from r - 1), the partial results merged by
    their logsumexp (online softmax: lse = logaddexp(lse_a, lse_b), out = out_a e^(lse_a - lse)
    + out_b e^(lse_b - lse)).  The backward passes K, V and the dK/dV accumulators around the
    ring (dK/dV one step more, back to their owner).  Both run as custom ops
    (autoshard::ring_attention_{forward,backward}) so that the lowered graph holds one node
    each and the P2P exchange runs eagerly inside it.

Load balancing ("load_balance": true): the sequence is cut into 2P chunks and rank r holds
chunks r and 2P - 1 - r (the head-tail layout of torch's context_parallel), so every rank has
the same causal work.  The runtime permutes the sequence dim of every input and buffer the
plan shards over that mesh dim into that order before cutting its shards (the positions of
rank r's rows are `positions(r, P, S_local, True)`); a mean loss is unchanged.

Supported: the CPU flash kernel (aten._scaled_dot_product_flash_attention_for_cpu and its
backward), no dropout, no attention mask, equal heads for q, k and v.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

KINDS = ("ring", "allgather")


class ContextParallelError(ValueError):
    """A context-parallel node the runtime cannot run (the message names the node)."""


@dataclass(frozen=True)
class CPConfig:
    """A node's "context_parallel" entry, with the mesh dim as an index."""

    mesh_dim: int
    kind: str
    load_balance: bool


def parse_config(entry: Any, dim_names: Sequence[str], where: str) -> CPConfig:
    """placements.json's {"mesh_dim": "cp", "kind": ..., "load_balance": ...} -> CPConfig."""
    if not isinstance(entry, dict):
        raise ContextParallelError(f"{where}context_parallel: not an object")
    name = entry.get("mesh_dim")
    if name not in list(dim_names):
        raise ContextParallelError(f"{where}context_parallel/mesh_dim: '{name}' is not a dim "
                                   f"of the mesh {list(dim_names)}")
    kind = entry.get("kind", "ring")
    if kind not in KINDS:
        raise ContextParallelError(f"{where}context_parallel/kind: '{kind}' is not one of "
                                   f"{', '.join(KINDS)}")
    return CPConfig(list(dim_names).index(name), kind, bool(entry.get("load_balance", False)))


# --- positions and the head-tail layout -----------------------------------------------------
def positions(rank: int, world: int, local: int, load_balance: bool) -> torch.Tensor:
    """Global sequence positions of rank `rank`'s `local` rows."""
    if not load_balance:
        return torch.arange(rank * local, (rank + 1) * local)
    if local % 2:
        raise ContextParallelError(f"load balancing needs an even local sequence, got {local}")
    c = local // 2
    head = torch.arange(rank * c, (rank + 1) * c)
    tail = torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)
    return torch.cat([head, tail])


def head_tail_order(seq: int, world: int) -> torch.Tensor:
    """The global positions in the order the ranks hold them (rank 0's rows first)."""
    if seq % (2 * world):
        raise ContextParallelError(f"load balancing cuts the sequence ({seq}) into "
                                   f"{2 * world} chunks: it must divide")
    local = seq // world
    return torch.cat([positions(r, world, local, True) for r in range(world)])


def permute_sequence(t: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """A full tensor with its dim `dim` in head-tail order (what the ranks' shards hold)."""
    return t.index_select(dim, head_tail_order(t.shape[dim], world).to(t.device))


# --- local attention pieces (float32 math; positions decide the causal mask) ----------------
def _scores(q, k, qpos, kpos, causal: bool, scale: float):
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(kpos.to(q.device)[None, :] > qpos.to(q.device)[:, None], float("-inf"))
    return s


def _safe(lse):
    """lse with fully masked rows (-inf) at 0, so that exp(-inf - 0) = 0 instead of nan."""
    return torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)


def attend(q, k, v, qpos, kpos, causal: bool, scale: float):
    """(out [B,H,Lq,D] float32, lse [B,H,Lq]) of q against one K/V chunk."""
    s = _scores(q, k, qpos, kpos, causal, scale)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - _safe(lse)[..., None])
    return torch.matmul(p, v.float()), lse


def attend_backward(dout, q, k, v, out, lse, qpos, kpos, causal: bool, scale: float):
    """(dq, dk, dv) contributions of one K/V chunk, given the final out and lse of q's rows."""
    s = _scores(q, k, qpos, kpos, causal, scale)
    p = torch.exp(s - _safe(lse.float())[..., None])
    dout = dout.float()
    dv = torch.matmul(p.transpose(-2, -1), dout)
    dp = torch.matmul(dout, v.float().transpose(-2, -1))
    delta = (dout * out.float()).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, k.float()) * scale
    dk = torch.matmul(ds.transpose(-2, -1), q.float()) * scale
    return dq, dk, dv


def merge(out_a, lse_a, out_b, lse_b):
    """Online softmax: two partial attentions of the same queries -> one."""
    lse = torch.logaddexp(lse_a, lse_b)
    safe = _safe(lse)
    wa = torch.exp(lse_a - safe)[..., None]
    wb = torch.exp(lse_b - safe)[..., None]
    return out_a * wa + out_b * wb, lse


# --- the all-gather kind (functional collectives: traced into the lowered graph) ------------
def allgather_forward(q, k, v, group, rank: int, world: int, causal: bool, scale: float,
                      load_balance: bool):
    from torch.distributed import _functional_collectives as fc

    local = q.shape[2]
    kk = fc.all_gather_single(k.contiguous(), 2, group)
    vv = fc.all_gather_single(v.contiguous(), 2, group)
    kpos = torch.cat([positions(r, world, local, load_balance) for r in range(world)])
    out, lse = attend(q, kk, vv, positions(rank, world, local, load_balance), kpos, causal, scale)
    return out.to(q.dtype), lse


def allgather_backward(dout, q, k, v, out, lse, group, rank: int, world: int, causal: bool,
                       scale: float, load_balance: bool):
    from torch.distributed import _functional_collectives as fc

    local = q.shape[2]
    kk = fc.all_gather_single(k.contiguous(), 2, group)
    vv = fc.all_gather_single(v.contiguous(), 2, group)
    kpos = torch.cat([positions(r, world, local, load_balance) for r in range(world)])
    dq, dk, dv = attend_backward(dout, q, kk, vv, out, lse,
                                 positions(rank, world, local, load_balance), kpos, causal, scale)
    dk = fc.reduce_scatter_single(dk.contiguous(), "sum", 2, group)
    dv = fc.reduce_scatter_single(dv.contiguous(), "sum", 2, group)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# --- the ring kind (custom ops: eager P2P inside one lowered node) --------------------------
def _shift(tensors: list, group) -> tuple[list, list]:
    """Starts sending `tensors` to the next rank of the ring and receiving the previous
    rank's; -> (the receive buffers, the requests to wait for)."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    nxt = dist.get_global_rank(group, (rank + 1) % world)
    prv = dist.get_global_rank(group, (rank - 1) % world)
    bufs = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), nxt, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, prv, group) for b in bufs]
    return bufs, dist.batch_isend_irecv(ops)


def _wait(reqs: list) -> None:
    for r in reqs:
        r.wait()


def _ring_forward(q, k, v, group_name: str, causal: bool, scale: float, load_balance: bool):
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    local = q.shape[2]
    qpos = positions(rank, world, local, load_balance)
    out = lse = None
    kv = [k, v]
    for i in range(world):
        src = (rank - i) % world
        nxt, reqs = _shift(kv, group) if i < world - 1 else (None, [])
        o, s = attend(q, kv[0], kv[1], qpos, positions(src, world, local, load_balance),
                      causal, scale)
        out, lse = (o, s) if out is None else merge(out, lse, o, s)
        _wait(reqs)
        kv = nxt
    return out.to(q.dtype), lse


def _ring_backward(dout, q, k, v, out, lse, group_name: str, causal: bool, scale: float,
                   load_balance: bool):
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    local = q.shape[2]
    qpos = positions(rank, world, local, load_balance)
    dq = torch.zeros(q.shape, dtype=torch.float32)
    kv = [k, v]
    acc = [torch.zeros(k.shape, dtype=torch.float32), torch.zeros(v.shape, dtype=torch.float32)]
    for i in range(world):
        src = (rank - i) % world
        nxt, reqs = _shift(kv, group) if i < world - 1 else (None, [])
        a, b, c = attend_backward(dout, q, kv[0], kv[1], out, lse, qpos,
                                  positions(src, world, local, load_balance), causal, scale)
        dq += a
        acc = [acc[0] + b, acc[1] + c]
        # the accumulators follow their chunk: after the last step, back to its owner
        acc, acc_reqs = _shift(acc, group)
        _wait(reqs + acc_reqs)
        kv = nxt
    return dq.to(q.dtype), acc[0].to(k.dtype), acc[1].to(v.dtype)


@functools.lru_cache(maxsize=None)
def ring_ops() -> tuple:
    """Registers autoshard::ring_attention_{forward,backward} (once) and returns them."""
    fwd = torch.library.custom_op("autoshard::ring_attention_forward",
                                  mutates_args=())(_ring_forward_op)
    fwd.register_fake(_ring_forward_fake)
    bwd = torch.library.custom_op("autoshard::ring_attention_backward",
                                  mutates_args=())(_ring_backward_op)
    bwd.register_fake(_ring_backward_fake)
    return fwd, bwd


def _ring_forward_fake(q, k, v, group_name, causal, scale, load_balance):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def _ring_backward_fake(dout, q, k, v, out, lse, group_name, causal, scale, load_balance):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _ring_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str,
                     causal: bool, scale: float, load_balance: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _ring_forward(q, k, v, group_name, causal, scale, load_balance)
    return out.contiguous(), lse.contiguous()  # contiguous, as the fake kernel says


def _ring_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      out: torch.Tensor, lse: torch.Tensor, group_name: str, causal: bool,
                      scale: float, load_balance: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(t.contiguous() for t in  # contiguous, as the fake kernel says
                 _ring_backward(dout, q, k, v, out, lse, group_name, causal, scale, load_balance))


def _kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """t [B, H, S(, D)] in the flash kernel's memory layout (S before H), so that the graph's
    views after a transpose stay valid, as they are for the kernel's own outputs."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


#: SDPA kernels whose dim 2 is the sequence (q, k, v, output [B, H, S, D])
SDPA_OPS = frozenset(f"_scaled_dot_product_{k}_attention{sfx}"
                     for k in ("flash", "efficient", "cudnn")
                     for sfx in ("", "_backward")) | {
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"}


def check_uncovered(op: Any, inputs: Sequence, name: str) -> None:
    """An SDPA node whose planned q/k/v are split on the sequence (dim 2) without a
    "context_parallel" entry would attend within each shard only: refused."""
    base = getattr(op, "__name__", "").split(".")[0]
    if base not in SDPA_OPS:
        return
    for k, pl in enumerate(inputs[:4]):
        if any(p.is_shard() and p.dim == 2 for p in pl):
            raise ContextParallelError(
                f"node {name}: {base} input {k} is planned split on the sequence (dim 2) but "
                f"the node has no \"context_parallel\" entry (which ring or all-gather "
                f"exchange to run)")


# --- the runner's entry point ---------------------------------------------------------------
_FWD = "_scaled_dot_product_flash_attention_for_cpu"
_BWD = "_scaled_dot_product_flash_attention_for_cpu_backward"


def run_node(op: Any, args: list, kwargs: dict, mesh: Any, cfg: CPConfig, outputs: list,
             name: str, head_tail: bool) -> tuple:
    """Runs a context-parallel SDPA node on DTensors at the planned placements (q, k, v,
    output sharded on dim 2 over cfg.mesh_dim) -> its outputs as DTensors at `outputs`."""
    from torch.distributed.tensor import DTensor

    base = op.__name__.split(".")[0] if hasattr(op, "__name__") else str(op)
    if base not in (_FWD, _BWD):
        raise ContextParallelError(f"node {name}: context parallelism of {base} is not "
                                   f"supported (only the CPU flash kernel)")
    backward = base == _BWD
    tensors = args[:6] if backward else args[:3]
    dropout = args[6] if backward else (args[3] if len(args) > 3 else 0.0)
    causal = bool(args[7] if backward else (args[4] if len(args) > 4 else False))
    if dropout or kwargs.get("attn_mask") is not None:
        raise ContextParallelError(f"node {name}: context parallelism with dropout or a mask")
    if not all(isinstance(t, DTensor) for t in tensors):
        raise ContextParallelError(f"node {name}: expected DTensor inputs")
    for t in tensors:
        p = t.placements[cfg.mesh_dim]
        if not (p.is_shard() and p.dim == 2):
            raise ContextParallelError(f"node {name}: inputs must be Shard(2) on the "
                                       f"context-parallel mesh dim, got {t.placements}")
    d = tensors[-1 if not backward else 1].shape[-1]
    scale = kwargs.get("scale") or 1.0 / math.sqrt(d)
    local = [t.to_local() for t in tensors]
    balance = cfg.load_balance and head_tail  # the positions the shards really hold
    group = (mesh, cfg.mesh_dim)
    rank, world = mesh.get_coordinate()[cfg.mesh_dim], mesh.size(cfg.mesh_dim)
    if cfg.kind == "allgather":
        res = (allgather_backward(*local, group, rank, world, causal, scale, balance)
               if backward else
               allgather_forward(*local, group, rank, world, causal, scale, balance))
    else:
        fwd, bwd = ring_ops()
        gname = mesh.get_group(cfg.mesh_dim).group_name
        res = (bwd(*local, gname, causal, scale, balance) if backward
               else fwd(*local, gname, causal, scale, balance))
    shapes = [tensors[i].shape for i in ((1, 2, 3) if backward else (0,))]
    if not backward:
        q = tensors[0]
        shapes.append(torch.Size(q.shape[:3]))
    out = []
    for r, shape, pl in zip(res, shapes, outputs):
        r = _kernel_layout(r)
        if pl is None:
            raise ContextParallelError(f"node {name}: the plan gives an output no placement")
        stride = _kernel_layout(torch.empty(shape, device="meta")).stride()
        out.append(DTensor.from_local(r, mesh, pl, run_check=False, shape=torch.Size(shape),
                                      stride=stride))
    return tuple(out)


def load_balanced_dims(plan: dict, mesh: Any) -> dict:
    """mesh dim -> its size, for the mesh dims a load-balanced CP node of `plan` (name ->
    apply.NodePlan) uses."""
    return {p.context_parallel.mesh_dim: mesh.size(p.context_parallel.mesh_dim)
            for p in plan.values()
            if p.context_parallel is not None and p.context_parallel.load_balance}


@dataclass
class SequenceLayout:
    """Whether the step's sequence is in head-tail order, and what to permute for it.

    head_tail: every sequence-indexed input and buffer is cut on its sequence over the
        load-balanced mesh dims (the plan establishes the layout at its sources), so the
        whole step sees the sequence in head-tail order and CP attention balances its work.
        Otherwise the shards are contiguous pieces of the natural order (a sequence split
        made later, e.g. from a replicated or batch-split tensor) and CP attention runs
        with contiguous positions: the same numbers, without the balance.
    permute: placeholder name -> [(tensor dim, mesh dim size)] to put in head-tail order."""

    head_tail: bool = False
    permute: dict = field(default_factory=dict)


def planned_layout(doc: dict, plan: dict, mesh: Any, origin: str = "") -> SequenceLayout:
    """The plan's sequence layout: placements.json's "sequence_layout", which the planner
    writes for every load-balanced CP plan (C++ planner/sequence_layout.h: which sources it
    cuts in head-tail order is its decision, not the runtime's).  A plan without load-balanced
    CP attention has none (no layout); a load-balanced plan without one (an older writer) is
    refused with a one-line error naming the key: plan it again."""
    entry = doc.get("sequence_layout")
    where = f"{origin}/sequence_layout"
    if entry is None:
        balanced = load_balanced_dims(plan, mesh)
        if balanced:
            raise ContextParallelError(f"{where}: missing, and the plan has load-balanced "
                                       f"context-parallel attention over "
                                       f"{sorted(balanced)} (a file from an older writer: "
                                       f"plan it again)")
        return SequenceLayout()
    if (not isinstance(entry, dict) or not isinstance(entry.get("head_tail"), bool)
            or not isinstance(entry.get("permute"), dict)):
        raise ContextParallelError(f"{where}: expected {{\"head_tail\": bool, \"permute\": "
                                   f"{{name: [[dim, size], ...]}}}}")
    permute: dict = {}
    for name, dims in entry["permute"].items():
        if not isinstance(dims, list) or not all(
                isinstance(d, list) and len(d) == 2 and all(isinstance(x, int) for x in d)
                for d in dims):
            raise ContextParallelError(f"{where}/permute/{name}: expected [[dim, size], ...]")
        permute[name] = [(d, world) for d, world in dims]
    return SequenceLayout(entry["head_tail"], permute)


def permute_placeholder(t: torch.Tensor, name: str, layout: "SequenceLayout | None"
                        ) -> torch.Tensor:
    """A full input or buffer in the head-tail order the layout gives it (before its shards
    are cut); unchanged when it has none."""
    if layout is None:
        return t
    for d, world in layout.permute.get(name, ()):
        t = permute_sequence(t, d, world)
    return t
