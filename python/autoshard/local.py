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
from typing import Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from .lower import contiguous_stride


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
    should do it (always with a `_StridedShard` on either side).  DTensor 2.13 runs this move
    as a synchronous op (`shard_dim_alltoall`: the caller waits where it is issued), so no
    compute overlaps it; as `all_to_all_single` its wait is a node of its own that the
    schedule leaves at the use.  Only for the innermost split of both tensor dims (what a
    local chunk of the shard is), even splits, and process groups with an all-to-all (not
    gloo)."""
    from torch.distributed import get_backend
    from torch.distributed._functional_collectives import all_to_all_single
    from torch.distributed.tensor import Shard

    src, dst = list(t.placements), list(placements)
    if any(is_strided(p) for p in (*src, *dst)):
        return None  # a strided shard's piece is not the innermost split: DTensor moves it
    changed = [m for m in range(mesh.ndim) if src[m] != dst[m]]
    if len(changed) != 1:
        return None
    m = changed[0]
    a, b = src[m], dst[m]
    if not (isinstance(a, Shard) and isinstance(b, Shard)) or type(a) is not Shard \
            or type(b) is not Shard:
        return None
    nd = t.ndim
    i, j = a.dim % nd, b.dim % nd
    later = [p for p in src[m + 1:] if isinstance(p, Shard)]
    if i == j or any(p.dim % nd in (i, j) for p in later):
        return None
    group = mesh.get_group(m)
    if "gloo" in str(get_backend(group)).lower():
        return None
    def splits(ps: list, d: int) -> int:
        return math.prod(mesh.size(k) for k, p in enumerate(ps) if isinstance(p, Shard)
                         and p.dim % nd == d)

    if t.shape[i] % splits(src, i) or t.shape[j] % splits(dst, j):
        return None  # uneven shards: ranks hold different sizes
    n = mesh.size(m)
    send = torch.stack(t._local_tensor.chunk(n, dim=j)).contiguous()
    recv = all_to_all_single(send, None, None, group)
    local = torch.cat(list(recv.unbind(0)), dim=i)
    meta = t._spec.tensor_meta
    if meta is not None:
        local = memory_order(local, meta.stride)
    return DTensor.from_local(local, mesh, dst, run_check=False, shape=t.shape, stride=t.stride())


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
    order = sorted(range(local.dim()), key=lambda d: (-stride[d], d))
    if order == list(range(local.dim())) or local.permute(order).is_contiguous():
        return local
    inverse = [order.index(d) for d in range(local.dim())]
    return local.permute(order).contiguous().permute(inverse)
