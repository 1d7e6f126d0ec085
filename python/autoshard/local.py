"""Tensors between their global and local forms on one rank, without autograd.

    local = local_chunk(full, mesh, placements, mesh.get_coordinate())  # this rank's piece
    dt = local_slice(full, mesh, placements)       # the same piece as a DTensor
    dt2 = redistribute(dt, mesh, [Replicate()])    # any placements, Partial targets included

The runtime's building blocks shared by the planned module (autoshard.module), the step runner
(autoshard.apply) and pipeline stages (autoshard.pipeline); kept apart so that none of those
imports another only for them.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from .lower import contiguous_stride


def local_chunk(t: torch.Tensor, mesh: DeviceMesh, placements: list, coord) -> torch.Tensor:
    """This rank's piece of a full tensor under `placements` (DTensor's chunking: mesh dims
    left to right, torch.chunk sizes, empty pieces past the end)."""
    if any(p.is_partial() for p in placements):
        raise ValueError(f"a full tensor cannot be cut to Partial placements ({placements})")
    for i, p in enumerate(placements):
        if p.is_shard():
            dim = p.dim if p.dim >= 0 else p.dim + t.dim()
            pieces = torch.chunk(t, mesh.size(i), dim)
            t = pieces[coord[i]] if coord[i] < len(pieces) else t.narrow(dim, 0, 0)
    return t


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

    target = DTensorSpec(mesh, tuple(placements), tensor_meta=t._spec.tensor_meta)
    local = redistribute_local_tensor(t._local_tensor, t._spec, target)
    meta = t._spec.tensor_meta
    if meta is not None:
        local = memory_order(local, meta.stride)
    return DTensor(local, target, requires_grad=False)


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
