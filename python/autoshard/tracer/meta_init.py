"""Build models without allocating their weights.

`meta_init(factory, *args, **kwargs)` calls `factory` so that every tensor it creates lives on
the `meta` device (shapes and dtypes only, no storage), so an 8B-parameter model costs a few MB:

* PyTorch >= 2.0: `with torch.device("meta"):` -- the documented way.
* PyTorch 1.13 (no device context manager): a `TorchFunctionMode` that adds `device="meta"` to
  tensor factory calls (`torch.empty`, `zeros`, `randn`, `arange`, ...) that do not name a device.
  Module constructors (`nn.Linear`, `nn.Conv2d`, `nn.Embedding`, torchvision models...) create
  their parameters with such calls, so they come out on meta.  Calls that name a device
  explicitly are left alone, as with `torch.device`.

In both cases the `torch.nn.init.*` initialisers are skipped for meta tensors (they would only
burn time: a meta tensor has no values).  Afterwards `materialize_check(model)` (or
`export_training_graph`) moves any stray CPU tensor to meta with `.to("meta")`.
"""
from __future__ import annotations

import contextlib
import functools

import torch

from ._compat import has_device_context

# Functions that create tensors from nothing and accept a `device=` keyword.
_FACTORIES = {
    "empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "randint", "randperm",
    "arange", "range", "linspace", "logspace", "eye", "tensor", "as_tensor", "scalar_tensor",
    "normal", "tril_indices", "triu_indices", "bartlett_window", "blackman_window",
    "hamming_window", "hann_window", "kaiser_window",
}


def _is_factory(func) -> bool:
    name = getattr(func, "__name__", "")
    mod = getattr(func, "__module__", "") or ""
    # torch.empty & co. have __module__ "torch" (or None for some builtins, hence the fallback).
    return name in _FACTORIES and (mod in ("torch", "torch._C._VariableFunctions", "")
                                   or getattr(torch, name, None) is func)


def _is_init_on_meta(func, args) -> bool:
    mod = getattr(func, "__module__", "") or ""
    if mod != "torch.nn.init":
        return False
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_meta


if hasattr(torch.overrides, "TorchFunctionMode"):

    class _MetaDeviceMode(torch.overrides.TorchFunctionMode):
        """Defaults tensor factories to the meta device and skips nn.init on meta tensors."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if _is_init_on_meta(func, args):
                return args[0]
            if _is_factory(func) and kwargs.get("device") is None:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

else:  # pragma: no cover - torch < 1.13
    _MetaDeviceMode = None


@contextlib.contextmanager
def _skip_init_on_meta():
    """Makes torch.nn.init.* no-ops on meta tensors (used with the 2.x device context)."""
    init = torch.nn.init
    saved = {}
    for name in dir(init):
        fn = getattr(init, name)
        if name.endswith("_") and not name.startswith("_") and callable(fn):
            saved[name] = fn

            def wrapper(tensor, *a, __fn=fn, **k):
                if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                    return tensor
                return __fn(tensor, *a, **k)

            setattr(init, name, functools.wraps(fn)(wrapper))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)


@contextlib.contextmanager
def meta_device():
    """Context in which new tensors (hence module parameters) default to the meta device."""
    if has_device_context():
        with torch.device("meta"), _skip_init_on_meta():
            yield
    elif _MetaDeviceMode is not None:
        with _MetaDeviceMode():
            yield
    else:  # pragma: no cover
        raise RuntimeError("this PyTorch has neither torch.device contexts nor TorchFunctionMode")


def meta_init(factory, *args, **kwargs):
    """Calls `factory(*args, **kwargs)` inside `meta_device()` and returns its result."""
    with meta_device():
        return factory(*args, **kwargs)


def to_meta(obj):
    """Moves a module / tensor / (nested) tuple, list or dict of them to meta; others unchanged.

    Modules already on meta are left as they are (no copy).
    """
    if isinstance(obj, torch.nn.Module):
        if any(not t.is_meta for t in list(obj.parameters()) + list(obj.buffers())):
            obj = obj.to("meta")
        return obj
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_meta else obj.to("meta")
    if isinstance(obj, tuple):
        return tuple(to_meta(o) for o in obj)
    if isinstance(obj, list):
        return [to_meta(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_meta(v) for k, v in obj.items()}
    return obj


def param_bytes_allocated(model: torch.nn.Module) -> int:
    """Bytes of real (non-meta) storage held by the model's parameters and buffers."""
    return sum(t.numel() * t.element_size()
               for t in list(model.parameters()) + list(model.buffers()) if not t.is_meta)
