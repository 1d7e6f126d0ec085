"""The recording mode's side of the data-dependent policy (datadep.py): which ATen ops it
answers itself, and the values it tracks.

`DataDependentOps.handler(func)` gives, for the ops a meta tensor cannot run (nonzero, boolean
index, masked_select, `_local_scalar_dense`: what `.item()` dispatches to) and for the uniform
draws it seeds, a function run instead of the op; `propagate` computes the values of small
tensors whose inputs are all known (on CPU copies).  Values are keyed by `id()` of tensors the
recorder keeps alive for the whole trace (dispatch_trace._Recording.keep), so ids are never
reused while this runs.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .datadep import MAX_KNOWN, DataDependentPolicy

_aten = torch.ops.aten
_BOOL_INDEX = (torch.bool, torch.uint8)


def _flat(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(_flat(a))
        else:
            out.append(a)
    return out


class DataDependentOps:
    """Known values and the op handlers of one trace under `policy`."""

    def __init__(self, policy: DataDependentPolicy) -> None:
        self.policy = policy
        self.known: dict[int, tuple[torch.Tensor, bool]] = {}  # id -> (CPU value, from a draw)
        self._handlers: dict = {
            _aten.nonzero.default: self._nonzero,
            _aten.index.Tensor: self._index,
            _aten.masked_select.default: self._masked_select,
            _aten._local_scalar_dense.default: self._scalar,
            _aten.rand.default: self._draw,
            _aten.rand_like.default: self._draw,
            _aten.uniform_.default: self._draw,
            _aten.uniform.default: self._draw,
        }

    def handler(self, func) -> Optional[Callable]:
        """The function answering `func` (called as fn(func, args, kwargs)), or None."""
        return self._handlers.get(func)

    # -- sizes ------------------------------------------------------------------------------
    def _nonzero(self, func, args, kwargs):
        x = args[0]
        if not x.is_meta:
            return func(*args, **kwargs)
        n = self.policy.decide_size("nonzero", x.numel())
        out = torch.empty(n, x.dim(), dtype=torch.long, device=x.device)
        if n == x.numel() and n <= MAX_KNOWN:  # the upper bound: every index, in order
            self.known[id(out)] = (torch.ones(x.shape, dtype=torch.bool).nonzero(), False)
        return out

    def _index(self, func, args, kwargs):
        x, indices = args[0], list(args[1])
        masks = [i for i in indices if isinstance(i, torch.Tensor) and i.dtype in _BOOL_INDEX]
        if not masks or not x.is_meta:
            return func(*args, **kwargs)
        new: list = []
        for i in indices:
            if isinstance(i, torch.Tensor) and i.dtype in _BOOL_INDEX:
                n = self.policy.decide_size("index.Tensor", i.numel())
                new.extend(torch.empty(n, dtype=torch.long, device=x.device)
                           for _ in range(i.dim()))
            else:
                new.append(i)
        return func(x, new)

    def _masked_select(self, func, args, kwargs):
        x, mask = args[0], args[1]
        if not (x.is_meta or mask.is_meta):
            return func(*args, **kwargs)
        bound = torch.broadcast_shapes(x.shape, mask.shape).numel()
        n = self.policy.decide_size("masked_select", bound)
        return torch.empty(n, dtype=x.dtype, device="meta")

    # -- values -----------------------------------------------------------------------------
    def _scalar(self, func, args, kwargs):
        x = args[0]
        entry = self.known.get(id(x))
        if entry is None and not x.is_meta:
            return func(*args, **kwargs)  # a real tensor: its own value
        known = entry[0].item() if entry is not None else None
        return self.policy.decide_value("item", x.dtype, known,
                                        entry is not None and entry[1])

    def _draw(self, func, args, kwargs):
        out = func(*args, **kwargs)
        if out.numel() <= MAX_KNOWN:
            top = 1.0
            if func in (_aten.uniform_.default, _aten.uniform.default):
                top = float(args[2]) if len(args) > 2 else float(kwargs.get("to", 1.0))
            value = torch.full(out.shape, top, dtype=out.dtype)
            if not out.is_meta:
                out.fill_(top)  # a real draw: its value made the policy's too
            self.known[id(out)] = (value, True)
        return out

    def propagate(self, func, args, kwargs, out) -> None:
        """Records the values of `out` when every tensor input is known or real (and small)."""
        flat = _flat(list(args) + list(kwargs.values()))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        hit = [self.known.get(id(t)) for t in tensors]
        if not any(h is not None for h in hit):
            return
        if any(h is None and (t.is_meta or t.numel() > MAX_KNOWN) for t, h in zip(tensors, hit)):
            return
        if func._schema.is_mutable and any(h is None for h in hit):
            return  # a real tensor already changed in place: its value before is gone
        random = any(h is not None and h[1] for h in hit)
        values = {id(t): (h[0] if h is not None else t.detach().cpu())
                  for t, h in zip(tensors, hit)}
        cpu = self._on_cpu(func, args, kwargs, values)
        if cpu is None:
            return
        outs = out if isinstance(out, (tuple, list)) else [out]
        vals = cpu if isinstance(cpu, (tuple, list)) else [cpu]
        for o, v in zip(outs, vals):
            if isinstance(o, torch.Tensor) and isinstance(v, torch.Tensor) \
                    and o.numel() <= MAX_KNOWN and list(o.shape) == list(v.shape):
                self.known[id(o)] = (v, random)

    @staticmethod
    def _on_cpu(func, args, kwargs, values: dict) -> Any:
        """func on the CPU values of its tensors (None when the op refuses them)."""
        def sub(a):
            if isinstance(a, torch.Tensor):
                return values[id(a)]
            if isinstance(a, (list, tuple)):
                return type(a)(sub(x) for x in a)
            if isinstance(a, torch.device):
                return torch.device("cpu")
            return a
        kw = {k: sub(v) for k, v in kwargs.items()}
        if "device" in kw:
            kw["device"] = torch.device("cpu")
        try:
            return func(*[sub(a) for a in args], **kw)
        except (RuntimeError, TypeError, IndexError, ValueError, NotImplementedError):
            return None
