"""Tensors between their global and local forms on one rank, without autograd.

    local = local_chunk(full, mesh, placements, mesh.get_coordinate())  # this rank's piece
    dt = local_slice(full, mesh, placements)       # the same piece as a DTensor
    dt2 = redistribute(dt, mesh, [Replicate()])    # any placements, Partial targets included

The runtime's building blocks shared by the planned module (autoshard.module), the step runner
(autoshard.apply) and pipeline stages (autoshard.pipeline); kept apart so that none of those
imports another only for them.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from .lower import contiguous_stride, exchange_shards


def local_chunk(t: torch.Tensor, mesh: DeviceMesh, placements: list, coord) -> torch.Tensor:
    """This rank's piece of a full tensor under `placements` (DTensor's chunking: mesh dims
    left to right, torch.chunk sizes, empty pieces past the end; a `_StridedShard` takes its
    rank's chunk of each of its split-factor pieces, see `strided_chunk`)."""
    if any(p.is_partial() for p in placements):
        raise ValueError(f"a full tensor cannot be cut to Partial placements ({placements})")
    for i, p in enumerate(placements):
        if is_strided(p):
            t = strided_chunk(t, p.dim % max(t.dim(), 1), int(p.split_factor), mesh.size(i),
                              coord[i])
        elif p.is_shard():
            dim = p.dim if p.dim >= 0 else p.dim + t.dim()
            t = _chunk(t, mesh.size(i), dim, coord[i])
    return t


def is_strided(p: object) -> bool:
    """Is `p` torch's `_StridedShard` (whose is_shard() is False in torch 2.13)?"""
    return type(p).__name__ == "_StridedShard"


def _chunk(t: torch.Tensor, n: int, dim: int, k: int) -> torch.Tensor:
    """Piece k of torch.chunk(t, n, dim), empty past the last piece."""
    pieces = torch.chunk(t, n, dim)
    return pieces[k] if k < len(pieces) else t.narrow(dim, 0, 0)


def strided_chunk(t: torch.Tensor, dim: int, split_factor: int, n: int, k: int) -> torch.Tensor:
    """Rank k's piece of `t` under `_StridedShard(dim, split_factor)` on a mesh dim of n ranks
    (torch 2.13's layout, placement_types.py): `t` is chunked into split_factor pieces along
    dim, each piece into n chunks, and rank k holds its chunk of every piece, concatenated.
    With even sizes that is the contiguous block the later mesh dims' cut and then this one's
    give; with uneven sizes it may be several blocks (see `contiguous_pieces`)."""
    firsts = torch.chunk(t, split_factor, dim) if t.size(dim) else (t,)
    parts = [_chunk(piece, n, dim, k) for piece in firsts]
    parts += [t.narrow(dim, 0, 0)] * (split_factor - len(firsts))
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0]


def contiguous_pieces(shape: Sequence[int], mesh_shape: Sequence[int],
                      placements: Sequence) -> bool:
    """Is every rank's piece of a tensor of `shape` under `placements` one block of the full
    tensor?  Always so without `_StridedShard`; with one, so when the sizes divide evenly and
    the split factors describe a shard order, not always otherwise (torch 2.13 chunks an
    uneven strided dim piece by piece).  A block is what DTensor's global offset (and DCP's
    chunk metadata, and a data loader's slice) describes.  Checked by cutting each strided
    tensor dim's positions for every mesh coordinate that cuts it (O(size + coordinates))."""
    import itertools

    ndim = len(shape)
    for d in sorted({p.dim % ndim for p in placements if is_strided(p)}):
        cutting = [m for m, p in enumerate(placements)
                   if (is_strided(p) or p.is_shard()) and p.dim % ndim == d]
        positions = torch.arange(int(shape[d]))
        for coords in itertools.product(*(range(mesh_shape[m]) for m in cutting)):
            idx = positions
            for m, k in zip(cutting, coords):
                p = placements[m]
                idx = (strided_chunk(idx, 0, int(p.split_factor), mesh_shape[m], k)
                       if is_strided(p) else _chunk(idx, mesh_shape[m], 0, k))
            if idx.numel() > 1 and not bool((idx[1:] - idx[:-1] == 1).all()):
                return False
    return True


def local_slice(t: torch.Tensor, mesh: DeviceMesh, placements: list) -> DTensor:
    """A full tensor (same on every rank) -> DTensor at `placements`, without communication."""
    return DTensor.from_local(local_chunk(t, mesh, placements, mesh.get_coordinate()), mesh,
                              placements, run_check=False, shape=t.shape,
                              stride=contiguous_stride(t.shape))


def redistribute(t: DTensor, mesh: DeviceMesh, placements: Sequence) -> DTensor:
    """t at `placements`, Replicate -> Partial included (DTensor's public redistribute refuses
    it; the plan may ask for it, e.g. a bias added to a partial matmul output).  No autograd."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._redistribute import redistribute_local_tensor

    t = _unmask(t, placements)
    moved = _all_to_all(t, mesh, placements)
    if moved is not None:
        return moved
    target = DTensorSpec(mesh, tuple(placements), tensor_meta=t._spec.tensor_meta)
    local = redistribute_local_tensor(t._local_tensor, t._spec, target)
    meta = t._spec.tensor_meta
    if meta is not None:
        local = memory_order(local, meta.stride)
    return DTensor(local, target, requires_grad=False)


def _all_to_all(t: DTensor, mesh: DeviceMesh, placements: Sequence) -> "DTensor | None":
    """Shard(i) -> Shard(j) on one mesh dim as one functional all-to-all, or None where DTensor
    should do it.  DTensor 2.13 runs this move as a synchronous op (`shard_dim_alltoall`: the
    caller waits where it is issued), and a move to or from a `_StridedShard` through a
    whole-tensor all-gather; as `all_to_all_single` its wait is a node of its own that the
    schedule leaves at the use.  Only where the mesh dim's split of both tensor dims is the
    innermost one of the local tensor (`_innermost`) and every split is even."""
    src, dst = list(t.placements), list(placements)
    changed = [m for m in range(mesh.ndim) if src[m] != dst[m]]
    if len(changed) != 1:
        return None
    m = changed[0]
    nd = t.ndim
    i, j = _innermost(src, m, nd, mesh), _innermost(dst, m, nd, mesh)
    if i is None or j is None or i == j:
        return None

    def splits(ps: list, d: int) -> int:
        return math.prod(mesh.size(k) for k, p in enumerate(ps)
                         if (p.is_shard() or is_strided(p)) and p.dim % nd == d)

    if t.shape[i] % splits(src, i) or t.shape[j] % splits(dst, j):
        return None  # uneven shards: ranks hold different sizes
    group = mesh.get_group(m)
    local = t._local_tensor
    meta = t._spec.tensor_meta
    order = _dim_order(meta.stride) if meta is not None else list(range(nd))
    if order != list(range(nd)) and local.permute(order).is_contiguous():
        # laid out in the global memory order already: exchange in that order, so that the
        # result is too (no copy into it afterwards)
        inverse = [order.index(d) for d in range(nd)]
        local = exchange_shards(local.permute(order), order.index(i), order.index(j),
                                mesh.size(m), group).permute(inverse)
    else:
        local = exchange_shards(local, i, j, mesh.size(m), group)
    if meta is not None:
        local = memory_order(local, meta.stride)
    return DTensor.from_local(local, mesh, dst, run_check=False, shape=t.shape, stride=t.stride())


#: the reshape-type views of a traced ATen graph (flatten and unflatten become these)
_RESHAPES = frozenset({"view", "_unsafe_view", "reshape"})


def nested_cuts(src: Sequence, dst: Sequence) -> bool:
    """Do two mesh dims cut one tensor dim on one side of a view and two dims on the other?
    The planner's nested view rows (strategy/view_rules.cc, "Nested cuts"): [b, s, h] cut
    S(0) over dp and S(1) over cp flattened to [b * s, h] cut S(0)S(0), or the split back."""
    cuts = [(p.dim, q.dim) for p, q in zip(src, dst)
            if type(p).__name__ == "Shard" and type(q).__name__ == "Shard"]
    return any((a[0] == b[0]) != (a[1] == b[1]) for i, a in enumerate(cuts) for b in cuts[i + 1:])


def nested_view(op: Any, args: Sequence, placements: Sequence, mesh: DeviceMesh) -> "DTensor | None":
    """A reshape-type view with nested cuts (`nested_cuts`), run on this rank's shard: the
    planner accepts such a view only where every rank's piece is one block of the flattened
    positions on both sides, so the local view of the local shard is the output's shard.
    DTensor 2.13 runs the flatten (as S(0) then _StridedShard(0, sf=1), which would then be
    gathered to reach the planned S(0)S(0)) but not the split; the local view communicates
    nothing, as the planner priced it.  None for any other op (DTensor runs it)."""
    name = getattr(getattr(op, "overloadpacket", None), "__name__", "")
    x = args[0] if args else None
    if name not in _RESHAPES or not isinstance(x, DTensor) or placements is None:
        return None
    if not nested_cuts(x.placements, placements):
        return None
    shape = _view_shape(x.numel(), args[1])
    local_shape = _chunked_shape(shape, mesh, placements)
    local = x._local_tensor
    if math.prod(local_shape) != local.numel():
        raise ValueError(f"a view of {tuple(x.shape)} cut {list(x.placements)} to {tuple(shape)} "
                         f"cut {list(placements)}: the pieces do not coincide")
    out = op(local, list(local_shape))
    return DTensor.from_local(out, mesh, list(placements), run_check=False, shape=shape,
                              stride=contiguous_stride(shape))


def _view_shape(numel: int, size: Sequence[int]) -> torch.Size:
    """The global shape a view to `size` gives a tensor of `numel` elements (one -1 inferred);
    computed, not run, so that nothing of it enters a graph being traced."""
    size = [int(s) for s in size]
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        size[size.index(-1)] = numel // known if known else 0
    return torch.Size(size)


def _chunked_shape(shape: Sequence[int], mesh: DeviceMesh, placements: Sequence) -> list:
    """This rank's piece of a tensor of `shape` under plain Shard/Replicate/Partial placements
    (torch.chunk sizes, mesh dims left to right), from the mesh coordinate alone (DTensor's
    compute_local_shape_and_global_offset also derives offsets, which make_fx cannot trace)."""
    local = [int(s) for s in shape]
    coord = mesh.get_coordinate()
    for m, p in enumerate(placements):
        if type(p).__name__ == "Shard":
            d = p.dim % len(local)
            piece = -(-local[d] // mesh.size(m))
            local[d] = max(0, min(piece, local[d] - coord[m] * piece))
    return local


def _unmask(t: DTensor, placements: Sequence) -> DTensor:
    """`t` with each masked partial (a vocabulary-parallel embedding's output, DTensor's
    `_MaskPartial`) that must stay a plain Partial(sum) turned into one: the rows of ids outside
    this rank's shard are zeroed, which is what the masked reduction would do.  DTensor 2.13
    refuses MaskPartial -> Partial, which a plan may ask for (a sum kept partial past the
    embedding)."""
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor.placement_types import _MaskPartial

    src = list(t.placements)
    dims = [i for i, (p, q) in enumerate(zip(src, placements)) if isinstance(p, _MaskPartial)
            and q.is_partial() and not isinstance(q, _MaskPartial)]
    if not dims:
        return t
    local = t._local_tensor.clone()
    for i in dims:
        src[i].mask_buffer.apply_mask(local)
        src[i] = Partial(src[i].reduce_op)
    return DTensor.from_local(local, t.device_mesh, src, run_check=False, shape=t.shape,
                              stride=t.stride())


def memory_order(local: torch.Tensor, stride: Sequence[int]) -> torch.Tensor:
    """`local` laid out in memory in the dim order of the global `stride` (a collective's
    output is contiguous; an op's output, e.g. the flash kernel's [B, H, S, D] stored as
    [B, S, H, D], is not, and the traced graph's views after a transpose rely on it)."""
    if local.dim() != len(stride) or local.dim() < 2:
        return local
    order = _dim_order(stride)
    if order == list(range(local.dim())) or local.permute(order).is_contiguous():
        return local
    inverse = [order.index(d) for d in range(local.dim())]
    return local.permute(order).contiguous().permute(inverse)


def _innermost(placements: Sequence, m: int, nd: int, mesh: DeviceMesh) -> "int | None":
    """The tensor dim that mesh dim m shards, when its split is the innermost one of the local
    tensor along that dim (its local pieces are chunks of the local tensor): a Shard(d) that
    no later mesh dim splits further, or a `_StridedShard(d, sf)` whose split factor is the
    later mesh dims' split of d (torch 2.13's layout: they cut d first, m within each of
    their pieces).  None otherwise."""
    from torch.distributed.tensor import Shard

    p = placements[m]
    if not (type(p) is Shard or is_strided(p)):
        return None
    d = p.dim % nd
    later = [k for k in range(m + 1, mesh.ndim)
             if (placements[k].is_shard() or is_strided(placements[k]))
             and placements[k].dim % nd == d]
    if any(is_strided(placements[k]) for k in later):
        return None
    if is_strided(p):
        return d if int(p.split_factor) == math.prod(mesh.size(k) for k in later) else None
    return None if later else d


def _dim_order(stride: Sequence[int]) -> list:
    """The dims of a tensor with `stride`, outermost in memory first."""
    return sorted(range(len(stride)), key=lambda d: (-stride[d], d))
