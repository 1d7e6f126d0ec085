"""Checkpoints of a planned module (the nn.Module that `autoshard.apply.apply_placement` returns).

    from autoshard import checkpoint

    checkpoint.save("ckpt/step100", module, opt, step=100)     # every rank, sharded (DCP)
    info = checkpoint.load("ckpt/step100", module2, opt2)      # module2 may use another plan
    start = info["step"]

    checkpoint.load_full_state_dict(module, pretrained.state_dict())   # no communication
    model.load_state_dict(checkpoint.full_state_dict(module))          # back to a plain model
    model.load_state_dict(checkpoint.read_full_state_dict("ckpt/step100"))  # no module needed

The module's parameters (and persistent buffers) are DTensors at the plan's placements, named
like the original model's (FQNs).  `save` and `load` use torch.distributed.checkpoint (DCP):
each rank writes only the shards it owns and reads only the ones it needs, so a checkpoint saved
under one plan (or mesh, or world size) loads into a module made from another plan of the same
model: DCP reshards DTensors by their global offsets.  The optimizer's state (AdamW's exp_avg,
exp_avg_sq: DTensors laid out like their parameter; step) is keyed by parameter FQN, so it
reshards the same way, and a fresh optimizer gets its state created by `load`.

`save`, `load` and `full_state_dict` are collective: every rank of the default process group
calls them, in the same order.  `load_full_state_dict` communicates nothing: each rank cuts its
own shards out of the full tensors it was given (the same on every rank).

Strided shards (`_StridedShard`, a plan's `_S(d,sf)`: shard orders, issue 39) are saved and
loaded like any DTensor: DCP records each rank's piece by its global offset and shape, which
torch 2.13 computes right for a piece that is one block of the full tensor -- always so for a
plan's evenly divisible strided shards (FSDP2 over TP's `_S(0,tp)S(0)`).  A piece that is not
one block (a strided dim that does not divide evenly, autoshard.local.contiguous_pieces) would
be recorded at the wrong place, so such a tensor is saved in the default order (each
`_StridedShard(d, sf)` a `Shard(d)`, one redistribution) and read back the same way, then moved
to the module's layout.  Either way the checkpoint holds every element at its place and loads
into any plan, or whole (`read_full_state_dict`).

Parameters planned as Partial (a pending sum over a mesh dim) have no single value per element to
save or to cut out of a full tensor: every function here refuses them with an error naming the
parameter, except `full_state_dict`, which reduces them.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Union

if TYPE_CHECKING:  # torch is imported on first use only (no import-time side effects)
    import torch

__all__ = ["CheckpointError", "save", "load", "load_full_state_dict", "full_state_dict",
           "read_full_state_dict"]

#: Version of the layout `save` writes (the "autoshard" entry of the DCP checkpoint).
FORMAT_VERSION = 1

_MODEL, _OPTIM, _INFO = "model", "optim", "autoshard"

PathArg = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError):
    """A state dict or checkpoint that does not fit the module (the message names the key)."""


# --- the module's tensors -------------------------------------------------------------------
def _state_tensors(module: "torch.nn.Module") -> dict[str, "torch.Tensor"]:
    """FQN -> the module's own parameter / persistent buffer objects (its state_dict keys)."""
    import torch

    out = {k: v for k, v in module.state_dict(keep_vars=True).items()
           if isinstance(v, torch.Tensor)}
    for name, _ in module.named_parameters():
        if name not in out:  # the module renames its parameters: not a planned module
            raise CheckpointError(f"parameter '{name}' is not in the module's state_dict()")
    return out


def _partial_dims(t: "torch.Tensor") -> list[int]:
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return []
    return [i for i, p in enumerate(t.placements) if p.is_partial()]


def _refuse_partial(key: str, t: "torch.Tensor", what: str) -> None:
    dims = _partial_dims(t)
    if dims:
        from autoshard.plan_file import placements_str

        raise CheckpointError(f"{what}: '{key}' is planned as Partial "
                              f"({placements_str(t.placements)}, mesh dim {dims[0]}): a pending "
                              f"sum has no per-element value, unsupported")


def _placements_of(module: "torch.nn.Module") -> dict[str, str]:
    from torch.distributed.tensor import DTensor

    from autoshard.plan_file import placements_str

    return {k: placements_str(t.placements) for k, t in _state_tensors(module).items()
            if isinstance(t, DTensor)}


# --- strided shards ------------------------------------------------------------------------
def _block_placements(t: Any) -> Optional[tuple]:
    """For a DTensor whose local piece is not one block of the full tensor on some rank (an
    uneven `_StridedShard`, or split factors that fit no shard order): its placements with each
    `_StridedShard(d, sf)` a `Shard(d)` (the default order, where every piece is a block).
    None for every other tensor, which DCP takes as it is: DTensor's global offset (the first
    element of the piece) and local shape are then its chunk's metadata."""
    from torch.distributed.tensor import DTensor, Shard

    from autoshard.local import contiguous_pieces, is_strided

    if not isinstance(t, DTensor) or not any(is_strided(p) for p in t.placements):
        return None
    if contiguous_pieces(tuple(t.shape), tuple(t.device_mesh.shape), t.placements):
        return None
    return tuple(Shard(p.dim) if is_strided(p) else p for p in t.placements)


def _to_blocks(state: dict, at: tuple = ()) -> list[tuple[tuple, tuple]]:
    """Replaces, in the nested dict `state`, every DTensor `_block_placements` names by a copy
    at those placements (collective: every rank holds the same keys); -> [(key path, the
    original placements)]."""
    from autoshard.local import redistribute

    moved = []
    for k, v in list(state.items()):
        if isinstance(v, dict):
            moved += _to_blocks(v, (*at, k))
            continue
        blocks = _block_placements(v)
        if blocks is not None:
            state[k] = redistribute(v.detach(), v.device_mesh, blocks)
            moved.append(((*at, k), tuple(v.placements)))
    return moved


def _from_blocks(state: dict, moved: list[tuple[tuple, tuple]]) -> None:
    """Moves the tensors `_to_blocks` replaced back to their original placements."""
    from autoshard.local import redistribute

    for path, placements in moved:
        holder = state
        for k in path[:-1]:
            holder = holder[k]
        t = holder[path[-1]]
        holder[path[-1]] = redistribute(t, t.device_mesh, placements)


# --- sharded checkpoints (DCP) --------------------------------------------------------------
def _dist() -> tuple[bool, int]:
    """(is the default process group up, this rank in it)."""
    import torch.distributed as dist

    up = dist.is_available() and dist.is_initialized()
    return up, (dist.get_rank() if up else 0)


def _barrier() -> None:
    import torch.distributed as dist

    if _dist()[0]:
        dist.barrier()


@contextlib.contextmanager
def _quiet_single_process(up: bool) -> Iterator[None]:
    """Silences DCP's warning that it runs in a single process (no process group: intended)."""
    import warnings

    with warnings.catch_warnings():
        if not up:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _options():
    """Sharded state dicts (DTensors as they are), the optimizer's in the flat layout that keys
    every entry by parameter FQN ("state.<fqn>.exp_avg", "param_groups.<fqn>.lr")."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=False, flatten_optimizer_state_dict=True)


def save(path: PathArg, module: "torch.nn.Module",
         optimizer: Optional["torch.optim.Optimizer"] = None, *, step: Optional[int] = None,
         extra: Optional[Mapping[str, Any]] = None) -> None:
    """Saves the module's sharded parameters (and the optimizer's state) to the directory `path`.

    Collective: every rank calls it with the same path on a file system they all see.  Each
    rank writes the shards it owns (replicated ones once); DCP's metadata records the global
    shapes and offsets, so `load` can reshard into another plan.  `step` and `extra` (a
    JSON-serialisable mapping) come back from `load`.

    The write is atomic per checkpoint: DCP writes `<path>.incomplete`, which rank 0 renames to
    `path` once every rank has finished (an existing `path` is replaced only then).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                         get_optimizer_state_dict)

    path = os.path.normpath(os.fspath(path))
    tensors = _state_tensors(module)
    for key, t in tensors.items():
        _refuse_partial(key, t, "save")
    mesh = getattr(module, "mesh", None)
    info = {"format": FORMAT_VERSION, "step": step, "extra": dict(extra or {}),
            "placements": _placements_of(module),
            "mesh_shape": list(mesh.shape) if mesh is not None else None,
            "mesh_dim_names": list(mesh.mesh_dim_names or ()) if mesh is not None else None}
    try:
        info_text = json.dumps(info)
    except TypeError as e:
        raise CheckpointError(f"save: step / extra are not JSON-serialisable ({e})") from None
    state: dict[str, Any] = {_MODEL: get_model_state_dict(module, options=_options()),
                             _INFO: info_text}
    if optimizer is not None:
        state[_OPTIM] = get_optimizer_state_dict(module, optimizer, options=_options())

    _to_blocks(state)  # strided shards that are not one block each: saved in the default order
    up, rank = _dist()
    tmp = path + ".incomplete"
    if rank == 0:
        _remove(tmp)
    _barrier()
    with _quiet_single_process(up):
        dcp.save(state, checkpoint_id=tmp, no_dist=not up)
    # dcp.save returns once the coordinator has written the metadata: the checkpoint is whole.
    if rank == 0:
        old = path + ".old"
        _remove(old)
        if os.path.lexists(path):
            os.replace(path, old)
        os.replace(tmp, path)
        _remove(old)
    _barrier()


def _metadata(path: str):
    import torch.distributed.checkpoint as dcp

    if not os.path.isdir(path):
        raise FileNotFoundError(f"load: no checkpoint directory at {path}")
    try:
        return dcp.FileSystemReader(path).read_metadata()
    except FileNotFoundError:
        raise CheckpointError(f"load: {path} has no DCP metadata (an unfinished save?)") from None


def _check_model_keys(path: str, saved: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """Missing / unexpected parameter keys and global shape mismatches, named, before DCP runs."""
    prefix = _MODEL + "."
    have = {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}
    missing = [k for k in tensors if k not in have]
    if missing:
        raise CheckpointError(f"load: '{missing[0]}' is not in the checkpoint {path} "
                              f"({len(missing)} module keys missing)")
    unexpected = [k for k in have if k not in tensors]
    if unexpected:
        raise CheckpointError(f"load: the checkpoint {path} has '{unexpected[0]}', which the "
                              f"module lacks ({len(unexpected)} unexpected keys)")
    for k, t in tensors.items():
        size = getattr(have[k], "size", None)
        if size is not None and tuple(size) != tuple(t.shape):
            raise CheckpointError(f"load: '{k}' has shape {list(size)} in the checkpoint "
                                  f"{path}, the module's is {list(t.shape)}")


def load(path: PathArg, module: "torch.nn.Module",
         optimizer: Optional["torch.optim.Optimizer"] = None) -> dict[str, Any]:
    """Loads a checkpoint written by `save` into `module` (and `optimizer`), in place.

    Collective.  `module` may come from a different plan (or mesh) of the same model than the
    one saved: each rank reads the pieces of the saved shards that overlap its own.  A fresh
    `optimizer` (no state yet) gets its state created, then filled; its hyperparameters
    (lr, betas, ...) are the saved ones.  Existing gradients are kept, not loaded.

    Returns the saved info: {"step", "extra", "placements" (the saved plan's, FQN -> string),
    "mesh_shape", "mesh_dim_names", "format"}.
    """
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                         get_optimizer_state_dict,
                                                         set_model_state_dict,
                                                         set_optimizer_state_dict)

    path = os.path.normpath(os.fspath(path))
    saved = _metadata(path).state_dict_metadata
    tensors = _state_tensors(module)
    for key, t in tensors.items():
        _refuse_partial(key, t, "load")
    _check_model_keys(path, saved, tensors)
    has_optim = any(k.startswith(_OPTIM + ".") for k in saved)
    if optimizer is not None and not has_optim:
        raise CheckpointError(f"load: the checkpoint {path} has no optimizer state")

    state: dict[str, Any] = {_MODEL: get_model_state_dict(module, options=_options())}
    if _INFO in saved:
        state[_INFO] = ""
    if optimizer is not None:
        # DCP creates a fresh optimizer's state by one zero-gradient step at lr 0, which it
        # skips when gradients exist: park them meanwhile.
        grads = {}
        if not optimizer.state:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        grads[p] = p.grad
                        p.grad = None
        try:
            state[_OPTIM] = get_optimizer_state_dict(module, optimizer, options=_options())
        finally:
            for p, g in grads.items():
                p.grad = g
        missing = [k for k in _flat_keys(state[_OPTIM], _OPTIM)
                   if k.startswith(f"{_OPTIM}.state.") and k not in saved]
        if missing:
            raise CheckpointError(f"load: the optimizer's '{missing[0]}' is not in the "
                                  f"checkpoint {path} (another optimizer type saved?)")
    moved = _to_blocks(state)  # read in the default order, then moved to the module's
    up, _ = _dist()
    with _quiet_single_process(up):
        dcp.load(state, checkpoint_id=path, no_dist=not up)
    _from_blocks(state, moved)
    with torch.no_grad():
        set_model_state_dict(module, state[_MODEL], options=_options())
        if optimizer is not None:
            set_optimizer_state_dict(module, optimizer, state[_OPTIM], options=_options())
    info = json.loads(state[_INFO]) if state.get(_INFO) else {"format": None, "step": None}
    info.setdefault("extra", {})
    return info


def read_full_state_dict(path: PathArg) -> dict[str, "torch.Tensor"]:
    """The module's tensors of a checkpoint written by `save`, each whole and keyed by FQN (a
    plain model's `load_state_dict` takes them), read without a module.

    No communication: each calling rank reads every saved shard, which DCP places in the
    full tensors by their offsets (the chunk metadata).  Tensors keep their saved dtype.
    """
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    path = os.path.normpath(os.fspath(path))
    prefix = _MODEL + "."
    full = {k[len(prefix):]: torch.empty(tuple(m.size), dtype=m.properties.dtype)
            for k, m in _metadata(path).state_dict_metadata.items()
            if k.startswith(prefix) and isinstance(m, TensorStorageMetadata)}
    if not full:
        raise CheckpointError(f"read_full_state_dict: the checkpoint {path} holds no module "
                              f"tensors")
    with _quiet_single_process(False):
        dcp.load({_MODEL: full}, checkpoint_id=path, no_dist=True)
    return full


def _flat_keys(d: Mapping[str, Any], prefix: str) -> list[str]:
    """The keys DCP flattens a nested dict to ('optim.state.w.exp_avg')."""
    out = []
    for k, v in d.items():
        key = f"{prefix}.{k}"
        out.extend(_flat_keys(v, key) if isinstance(v, Mapping) else [key])
    return out


# --- full (unsharded) state dicts -----------------------------------------------------------
def load_full_state_dict(module: "torch.nn.Module",
                         state_dict: Mapping[str, "torch.Tensor"]) -> None:
    """Loads a full state dict of the original model (e.g. a pretrained checkpoint; the same on
    every rank) into the planned module, in place and without communication.

    Each full tensor is cut to this rank's shard by its parameter's placements (and cast to
    the parameter's dtype).  Every key is checked before anything is copied: a missing or
    unexpected key, a non-tensor value or a shape mismatch raises CheckpointError naming the
    key, and leaves the module unchanged.  Parameters planned as Partial are refused.
    """
    import torch
    from torch.distributed.tensor import DTensor, distribute_tensor

    tensors = _state_tensors(module)
    for key, t in tensors.items():
        if key not in state_dict:
            missing = sum(k not in state_dict for k in tensors)
            raise CheckpointError(f"load_full_state_dict: '{key}' is missing from the state "
                                  f"dict ({missing} missing)")
    for key in state_dict:
        if key not in tensors:
            unexpected = sum(k not in tensors for k in state_dict)
            raise CheckpointError(f"load_full_state_dict: unexpected key '{key}' (not a "
                                  f"parameter or persistent buffer of the module; "
                                  f"{unexpected} unexpected)")
    for key, t in tensors.items():
        full = state_dict[key]
        if isinstance(full, DTensor) or not isinstance(full, torch.Tensor):
            raise CheckpointError(f"load_full_state_dict: '{key}' is a "
                                  f"{type(full).__name__}, not a full torch.Tensor")
        if tuple(full.shape) != tuple(t.shape):
            raise CheckpointError(f"load_full_state_dict: '{key}' has shape {list(full.shape)},"
                                  f" the module's is {list(t.shape)}")
        _refuse_partial(key, t, "load_full_state_dict")
    with torch.no_grad():
        for key, t in tensors.items():
            full = state_dict[key].detach()
            if isinstance(t, DTensor):
                # src_data_rank=None: every rank slices its own shard of its own copy.
                shard = distribute_tensor(full, t.device_mesh, t.placements, src_data_rank=None)
                t.to_local().copy_(shard.to_local())
            else:
                t.copy_(full)


def full_state_dict(module: "torch.nn.Module", *,
                    device: Optional[Union[str, "torch.device"]] = None
                    ) -> dict[str, "torch.Tensor"]:
    """Every parameter and persistent buffer of the planned module as a full tensor, keyed like
    the original model's state_dict(), so `model.load_state_dict(full_state_dict(module))`
    works on a plain model.

    Collective (each sharded or partial tensor is gathered or reduced on every rank).  The
    tensors are detached copies, never views of the module's; `device` moves each one as it
    is gathered (e.g. "cpu", to keep a GPU model's full copy off the GPU).
    """
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    for key, t in _state_tensors(module).items():
        t = t.detach()
        if isinstance(t, DTensor):
            full = t.full_tensor()
            if full.untyped_storage().data_ptr() == t.to_local().untyped_storage().data_ptr():
                full = full.clone()  # replicated: full_tensor() is the local tensor itself
        else:
            full = t.clone()
        out[key] = full.to(device) if device is not None else full
    return out
