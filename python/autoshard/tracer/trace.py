"""Tracing one training step (forward, loss, backward) into an ATen-level FX graph.

The step is `loss = loss_fn(model(*inputs), *targets); grads = autograd.grad(loss, params)`,
run through `make_fx` with everything on the meta device: no weights are allocated and no
arithmetic is done, only shapes are propagated.  Parameters, buffers, inputs and targets are
passed as one flat list so that FX placeholders map back to them by position.

While tracing, a temporary wrapper around `torch.fx.Graph.create_node` stamps every new node
with (a) the phase ("forward" until `autograd.grad` starts, then "backward"), (b) the qualified
name of the innermost module whose forward is running (module pre/post hooks keep a stack) and
(c) the first user-code frame ("file.py:line").  This works the same on 1.13, where make_fx
records neither `nn_module_stack` nor `stack_trace`, and on 2.x.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import sys

import torch
import torch.fx

from . import _compat
from .meta_init import to_meta

_META_KEY = "autoshard"  # node.meta[_META_KEY] = {"phase":..., "module":..., "source":...}


@dataclasses.dataclass
class TracedStep:
    """The traced training step and how its placeholders map back to the model."""

    gm: torch.fx.GraphModule
    flat_args: list            # the meta tensors the graph was traced with (placeholder order)
    placeholder_kinds: list    # per placeholder: "parameter" | "buffer" | "input"
    placeholder_names: list    # per placeholder: parameter/buffer name or input name
    grad_params: list          # names of params whose gradient is returned (output order)
    missing_grads: list        # trainable params with no gradient (unused in the loss)


# --- recording module / phase / source while make_fx builds the graph ------------------------
def _internal_files():
    here = os.path.dirname(os.path.abspath(__file__))
    return {os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")}


class _Recorder:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.phase = "forward"
        self.stack: list[str] = []
        self.in_fns: list[set] = []
        self.fn_module: dict = {}      # autograd node -> module path of the forward that made it
        self.bwd_module = ""           # module of the autograd node running in backward
        self.backward_hooked = False
        self.handles = []
        self.saved_create_node = None
        self.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self.stdlib_dir = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
        self.internal = _internal_files()
        self._file_ok: dict[str, bool] = {}

    # Module stack via hooks.  The post-hook also labels the autograd nodes the module created
    # (walking grad_fn edges from its outputs back to its inputs), so that backward ops can be
    # attributed to the module whose forward they differentiate (see _label_backward).
    def _push(self, name):
        def hook(mod, args):
            self.stack.append(name)
            self.in_fns.append({t.grad_fn for t in _tensors(args) if t.grad_fn is not None})
        return hook

    def _pop(self, mod, args, out):
        if not self.stack:
            return
        name = self.stack.pop()
        stop = self.in_fns.pop() if self.in_fns else set()
        # Walk through the children's (already labelled, innermost wins) nodes too: the ops
        # between two children belong to this module.  Stop at the module's inputs.
        todo = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
        seen = set()
        while todo:
            fn = todo.pop()
            if fn is None or fn in stop or fn in seen:
                continue
            seen.add(fn)
            self.fn_module.setdefault(fn, name)
            todo.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)

    def _label_backward(self, loss):
        """Registers autograd pre-hooks that set the module of the backward ops to come."""
        seen, todo = set(), [loss.grad_fn]
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            todo.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
            if not hasattr(fn, "register_prehook"):
                continue
            name = self.fn_module.get(fn, "")

            def prehook(grad_outputs, _name=name):
                self.bwd_module = _name

            try:
                fn.register_prehook(prehook)
                self.backward_hooked = True
            except Exception:  # pragma: no cover - e.g. AccumulateGrad on exotic releases
                pass

    def _user_file(self, filename: str) -> bool:
        ok = self._file_ok.get(filename)
        if ok is None:
            path = os.path.abspath(filename)
            ok = not (path.startswith(self.torch_dir) or path.startswith(self.stdlib_dir)
                      or path in self.internal or filename.startswith("<"))
            self._file_ok[filename] = ok
        return ok

    def _source(self) -> str:
        f = sys._getframe(2)
        while f is not None:
            if self._user_file(f.f_code.co_filename):
                return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
            f = f.f_back
        return ""

    def __enter__(self):
        for name, mod in self.model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._push(name)))
            self.handles.append(mod.register_forward_hook(self._pop))
        rec = self
        original = torch.fx.Graph.create_node
        self.saved_create_node = original

        def create_node(graph, *args, **kwargs):
            node = original(graph, *args, **kwargs)
            if rec.phase == "forward":
                info = {"phase": "forward", "module": rec.stack[-1] if rec.stack else ""}
            else:
                info = {"phase": "backward", "module": rec.bwd_module,
                        "module_known": rec.backward_hooked}
            if rec.phase == "forward" and node.op == "call_function":
                info["source"] = rec._source()
            node.meta[_META_KEY] = info
            return node

        torch.fx.Graph.create_node = create_node
        return self

    def __exit__(self, *exc):
        torch.fx.Graph.create_node = self.saved_create_node
        for h in self.handles:
            h.remove()
        self.handles.clear()
        return False


def _tensors(obj):
    """All tensors in a (nested) tuple / list / dict."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


# --- input normalisation -------------------------------------------------------------------
def _split_inputs(model, example_inputs):
    """-> (positional tensors, keyword tensors, names in flat order)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs), list(example_inputs)
    args = tuple(example_inputs)
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params[:len(args)]]
    except (TypeError, ValueError):
        names = []
    names += [f"input_{i}" for i in range(len(names), len(args))]
    return args, {}, names


def _split_targets(targets):
    if targets is None:
        return (), {}, []
    if isinstance(targets, torch.Tensor):
        targets = (targets,)
    if isinstance(targets, dict):
        return (), dict(targets), list(targets)
    targets = tuple(targets)
    return targets, {}, [f"target_{i}" if len(targets) > 1 else "target"
                         for i in range(len(targets))]


def default_loss(output, *targets, **kw):
    """Loss used when none is given: the mean of the (first) output, in float32."""
    while isinstance(output, (tuple, list)):
        output = output[0]
    if isinstance(output, dict):
        output = next(iter(output.values()))
    return output.float().mean()


def trace_training_step(model: torch.nn.Module, example_inputs, loss_fn=None, targets=None,
                        *, train: bool = True, decompose: str | None = None) -> TracedStep:
    """Traces forward + loss + backward of `model` at ATen level on the meta device.

    example_inputs: a tensor, a tuple/list of positional model arguments, or a dict of keyword
        arguments.  targets: extra tensors for the loss (tuple or dict), passed as
        `loss_fn(output, *targets)` / `loss_fn(output, **targets)`.  loss_fn defaults to the
        mean of the output.  Model and tensors are moved to meta first if they are not there.
    decompose: None (ATen as dispatched) or "core_aten" (PyTorch's Core ATen opset, through
        `torch._decomp.core_aten_decompositions()`; PyTorch >= 2.1).
    """
    table = _compat.decomposition_table(decompose)
    _compat.ensure_meta_kernels()
    model = to_meta(model)
    if train:
        model.train()
    loss_fn = loss_fn or default_loss
    pos, kw, input_names = _split_inputs(model, to_meta(example_inputs))
    tpos, tkw, target_names = _split_targets(to_meta(targets))
    for n in target_names:
        if n in input_names:
            raise ValueError(f"target name {n!r} clashes with a model input name")

    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    pnames, bnames = list(params), list(buffers)
    trainable = [n for n in pnames if params[n].requires_grad]
    flat = ([params[n] for n in pnames] + [buffers[n] for n in bnames] + list(pos)
            + list(kw.values()) + list(tpos) + list(tkw.values()))
    for i, t in enumerate(flat):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"inputs and targets must be tensors; argument {i} is {type(t)}")
    counts = [len(pnames), len(bnames), len(pos), len(kw), len(tpos), len(tkw)]

    rec = _Recorder(model)
    unused: list[str] = []

    def step(flat_args):
        it = iter(flat_args)
        take = lambda n: [next(it) for _ in range(n)]  # noqa: E731
        p = dict(zip(pnames, take(counts[0])))
        b = dict(zip(bnames, take(counts[1])))
        a = take(counts[2])
        k = dict(zip(kw, take(counts[3])))
        ta = take(counts[4])
        tk = dict(zip(tkw, take(counts[5])))
        rec.phase = "forward"
        out = _compat.functional_call(model, {**p, **b}, a, k)
        loss = loss_fn(out, *ta, **tk)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("loss_fn must return a one-element tensor")
        rec.phase = "backward"
        rec._label_backward(loss)
        wrt = [p[n] for n in trainable]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True) if wrt else ()
        unused[:] = [n for n, g in zip(trainable, grads) if g is None]
        return [loss] + [g for g in grads if g is not None]

    with rec:
        gm = _compat.make_fx(step, decomposition_table=table, tracing_mode=_compat.TRACING_MODE)(flat)

    kinds = (["parameter"] * counts[0] + ["buffer"] * counts[1]
             + ["input"] * (counts[2] + counts[3] + counts[4] + counts[5]))
    names = pnames + bnames + input_names + target_names
    return TracedStep(gm=gm, flat_args=flat, placeholder_kinds=kinds, placeholder_names=names,
                      grad_params=[n for n in trainable if n not in unused],
                      missing_grads=list(unused))
