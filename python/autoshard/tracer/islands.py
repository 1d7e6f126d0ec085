"""Eager islands: the module calls whose code depends on data, marked in the traced graph so
that the runtime can run them as written (autoshard/islands.py).

The trace decides data-dependent sizes and branches by a policy (datadep.py), which is right
for planning and wrong for running: the applied step must run the real code on the real data.
A step with decisions is traced a second time (deterministically, so the planned graph and the
applied graph are the same) with every island module's call bracketed by `aten.alias` marks:

* its tensor arguments pass through an alias each (the island reads the alias: "in" marks);
* its tensor results pass through an alias each ("out" marks);
* the gradient arriving at each out mark and the one leaving each in mark pass through an
  alias in the backward (the recorder's gradient marks), so the island's backward region
  lies between them.

The island of a decision is the module whose forward ran it (the outermost one when islands
nest; the root module, "", makes the whole model one island).  Values decided by a random
draw make no island: the applied step keeps the planned choice (layerdrop's layers all run),
rather than running a whole encoder replicated for a regularizer; nor do defaults flipped
because they raised (a validation check: the applied step does not run the check).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .containers import map_tensors

__all__ = ["IslandCall", "island_modules", "IslandMarker"]


@dataclasses.dataclass
class IslandCall:
    """One call of an island module, as the graph records it (node names)."""

    module: str                       # qualified module name ("" for the root)
    in_nodes: list                    # alias node per tensor argument (flattened order)
    in_grad: list                     # per tensor argument: its gradient mark key, or None
    args_template: Any = None         # (args, kwargs) with tensors replaced by _Slot(i)
    out_nodes: list = dataclasses.field(default_factory=list)   # alias node per result tensor
    out_grad: list = dataclasses.field(default_factory=list)    # per result: grad mark key
    out_shapes: list = dataclasses.field(default_factory=list)  # (shape, dtype) per result
    inner: list = dataclasses.field(default_factory=list)       # forward nodes of the call
    sources: list = dataclasses.field(default_factory=list)     # decisions' source lines


@dataclasses.dataclass(frozen=True)
class _Slot:
    index: int


def island_modules(decisions: list) -> list[str]:
    """The outermost modules among those that ran a forward decision, sorted.  Random draws
    and flipped defaults make none: the applied step runs what was planned there (every
    layerdrop layer; the branch of a check that did not raise)."""
    mods = sorted({d.module for d in decisions
                   if d.module is not None and d.why not in ("random draw", "default flipped")})
    out: list[str] = []
    for m in mods:
        if any(m == o or o == "" or m.startswith(o + ".") for o in out):
            continue
        out.append(m)
    return out


def _template(obj, tensors: list):
    """obj with every tensor replaced by _Slot(k), k its position in `tensors` (appended)."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _Slot(len(tensors) - 1)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_template(v, tensors) for v in obj)
    if isinstance(obj, dict):
        return {k: _template(v, tensors) for k, v in obj.items()}
    return obj


def fill_template(template, tensors: list):
    """The inverse of _template: slots replaced by tensors[k]."""
    if isinstance(template, _Slot):
        return tensors[template.index]
    if isinstance(template, (list, tuple)):
        return type(template)(fill_template(v, tensors) for v in template)
    if isinstance(template, dict):
        return {k: fill_template(v, tensors) for k, v in template.items()}
    return template


class IslandMarker:
    """Forward hooks on the island modules that place the marks (module docstring).

    rec: the tracer's _Recorder (its `alias_name` records an alias and returns its node name;
    its grad marks record the backward marks)."""

    def __init__(self, rec, islands: list[str], decisions: list) -> None:
        self.rec = rec
        self.islands = set(islands)
        self.sources = {m: sorted({d.source for d in decisions if d.module == m
                                   or (d.module or "").startswith(m + ".") or m == ""})
                        for m in islands}
        self.calls: list[IslandCall] = []
        self.open: list[IslandCall] = []
        self.handles: list = []

    def install(self, model: torch.nn.Module) -> None:
        for name, mod in model.named_modules():
            if name in self.islands:
                self.handles.append(mod.register_forward_pre_hook(self._pre(name),
                                                                  with_kwargs=True))
                self.handles.append(mod.register_forward_hook(self._post))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, name: str):
        def hook(mod, args, kwargs):
            if self.open:  # a nested call of an island inside an island: part of the outer
                return None
            tensors: list = []
            template = _template((tuple(args), dict(kwargs)), tensors)
            call = IslandCall(name, [], [], template, sources=self.sources.get(name, []))
            marked = []
            for i, t in enumerate(tensors):
                a, node = self.rec.alias_name(t)
                call.in_nodes.append(node)
                key = ("island", len(self.calls), "in", i)
                if a.requires_grad:
                    a.register_hook(self.rec.grad_hook(key))
                    call.in_grad.append(key)
                else:
                    call.in_grad.append(None)
                marked.append(a)
            self.open.append((call, mod))
            self.rec.island_inner = call.inner
            new_args, new_kwargs = fill_template(template, marked)
            return tuple(new_args), dict(new_kwargs)
        return hook

    def _post(self, mod, args, out):
        if not self.open or self.open[-1][1] is not mod:
            return None
        call = self.open.pop()[0]
        self.rec.island_inner = None
        k = len(self.calls)

        def mark(t):
            a, node = self.rec.alias_name(t)
            i = len(call.out_nodes)
            call.out_nodes.append(node)
            call.out_shapes.append((tuple(a.shape), a.dtype))
            if a.requires_grad:
                key = ("island", k, "out", i)
                a.register_hook(self.rec.grad_hook(key))
                call.out_grad.append(key)
            else:
                call.out_grad.append(None)
            return a
        out = map_tensors(mark, out)
        self.calls.append(call)
        return out
