"""Tensors inside the nested containers a model takes and returns (tuples, lists, dicts,
dataclasses such as Hugging Face's ModelOutput): flattened in a fixed order, or mapped keeping
the container types.  One module, so that the tracer and the island marks (islands.py) read
containers the same way without importing each other."""
from __future__ import annotations

import dataclasses

import torch


def _children(obj):
    """(keys, values) of a container the tracer looks into, or None for a leaf."""
    if isinstance(obj, dict):  # also Hugging Face ModelOutput (an OrderedDict dataclass)
        return list(obj.keys()), list(obj.values())
    if isinstance(obj, (tuple, list)):
        return list(range(len(obj))), list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]
        return names, [getattr(obj, n) for n in names]
    return None


def flatten_tensors(obj) -> list:
    """Tensors in a (nested) tuple / list / dict / dataclass, depth first, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    kv = _children(obj)
    if kv is None:
        return []
    return [t for v in kv[1] for t in flatten_tensors(v)]


def map_tensors(fn, obj):
    """`obj` with every tensor replaced by fn(tensor) (same container types)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    kv = _children(obj)
    if kv is None:
        return obj
    keys, vals = kv
    new = [map_tensors(fn, v) for v in vals]
    if isinstance(obj, dict):
        if dataclasses.is_dataclass(obj):  # Hugging Face ModelOutput
            return type(obj)(**dict(zip(keys, new)))
        return type(obj)(zip(keys, new)) if type(obj) is not dict else dict(zip(keys, new))
    if isinstance(obj, tuple):
        return type(obj)(*new) if hasattr(obj, "_fields") else tuple(new)
    if isinstance(obj, list):
        return new
    return dataclasses.replace(obj, **dict(zip(keys, new)))
