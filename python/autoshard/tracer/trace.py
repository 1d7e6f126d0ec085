"""Tracing one training step (forward, loss, backward) into an ATen-level FX graph.

The step is `loss = loss_fn(model(*inputs), *targets); grads = autograd.grad(loss, params)`,
run through `make_fx` with everything on the meta device: no weights are allocated and no
arithmetic is done, only shapes are propagated.  Parameters, buffers, inputs and targets are
passed as one flat list so that FX placeholders map back to them by position.

While tracing, every new node is stamped (by the dispatch recorder, which calls
`_Recorder.stamp` on each node it records; under make_fx by a temporary wrapper around
`torch.fx.Graph.create_node`) with (a) the phase ("forward" until `autograd.grad` starts, then "backward"), (b) the qualified
name of the innermost module whose forward is running (module pre/post hooks keep a stack) and
(c) the first user-code frame ("file.py:line").  This works the same on 1.13, where make_fx
records neither `nn_module_stack` nor `stack_trace`, and on 2.x.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import os
import sys
import warnings

import torch
import torch.fx

from . import _compat
from .containers import flatten_tensors, map_tensors  # noqa: F401 (flatten_tensors: re-exported)
from .islands import IslandMarker, island_modules
from .meta_init import to_meta
from .datadep import DataDependentWarning
from .meta_kernels import scoped_meta_kernels

_META_KEY = "autoshard"  # node.meta[_META_KEY] = {"phase":..., "module":..., "source":...}


@dataclasses.dataclass
class TracedStep:
    """The traced training step and how its placeholders map back to the model."""

    gm: torch.nn.Module        # holds .graph (a torch.fx.Graph) and its constants; from the
    #                            dispatch tracer a TracedRoot (.graph built on first use)
    flat_args: list            # the meta tensors the graph was traced with (placeholder order)
    placeholder_kinds: list    # per placeholder: "parameter" | "buffer" | "input"
    placeholder_names: list    # per placeholder: parameter/buffer name or input name
    grad_params: list          # names of params whose gradient is returned (output order)
    missing_grads: list        # trainable params with no gradient (unused in the loss)
    output_nodes: list = dataclasses.field(default_factory=list)
    """With mark_outputs: the FX node names of the `alias` ops marking the model's output
    tensors (flattening order of `flatten_tensors`), for output constraints."""
    tangent_nodes: list = dataclasses.field(default_factory=list)
    """With mark_outputs: per output node, the `alias` node marking the gradient flowing into
    it in the backward (None when the output gets none): where a planned module's backward
    starts from the gradients of the user's own loss (autoshard.partition)."""
    loss_tangent: str | None = None
    """The `alias` node marking the loss's gradient (the backward's seed), where the planned
    module's backward starts from the incoming gradient."""
    islands: list = dataclasses.field(default_factory=list)
    """Per call of a module whose code depends on data: islands.IslandCall (its marks), which
    the runtime runs eagerly (autoshard/islands.py)."""
    data_dependent: list = dataclasses.field(default_factory=list)
    """What the trace decided instead of the data (datadep.Decision per data-dependent size or
    value read in Python, in trace order): the policy of docs/tracer.md, "Data-dependent
    code"."""


# --- recording module / phase / source while make_fx builds the graph ------------------------
def _internal_files():
    here = os.path.dirname(os.path.abspath(__file__))
    return {os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")}


class _FusedAttention(torch.overrides.TorchFunctionMode):
    """Routes F.scaled_dot_product_attention to the fused flash kernel of `device`."""

    def __init__(self, device: str):
        super().__init__()
        if device not in ("cpu", "cuda"):
            raise ValueError(f"attention must be None, 'cpu' or 'cuda', got {device!r}")
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            out = self._fused(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)

    def _fused(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
        if attn_mask is not None or enable_gqa or q.shape[1] != k.shape[1] or q.dim() != 4:
            return None  # the math path, as dispatched
        if self.device == "cpu":
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(
                q, k, v, dropout_p, is_causal, scale=scale)[0]
        return torch.ops.aten._scaled_dot_product_flash_attention.default(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]


def _fused_attention(device: str | None):
    import contextlib

    return _FusedAttention(device) if device is not None else contextlib.nullcontext()


def _grad_marker(rec, key):
    """A tensor hook passing the gradient through `aten.alias`, recorded as rec.grad_marks[key]."""
    def hook(grad):
        rec.marking_grad = key
        return torch.ops.aten.alias.default(grad)
    return hook


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
        self.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self.stdlib_dir = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
        self.internal = _internal_files()
        self._file_ok: dict[str, str] = {}
        self.marking = False           # the next call_function node marks a model output
        self.marked: list[str] = []
        self.marking_grad = None       # the next call_function node marks a gradient: key
        self.grad_marks: dict = {}     # key (output index or "loss") -> node name
        self._next_fns: dict = {}      # autograd node -> its non-None next_functions
        self.island_inner = None       # list collecting the forward nodes of an open island
        self._captured: list | None = None  # alias_name: the node recorded for the alias

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
            todo.extend(self._next(fn))

    def _next(self, fn) -> list:
        """fn.next_functions without the None edges, cached: every enclosing module walks its
        children's autograd nodes again, and each next_functions read builds new tuples."""
        nxt = self._next_fns.get(fn)
        if nxt is None:
            nxt = self._next_fns[fn] = [n for n, _ in fn.next_functions if n is not None]
        return nxt

    def _label_backward(self, loss):
        """Registers autograd pre-hooks that set the module of the backward ops to come."""
        seen, todo = set(), [loss.grad_fn]
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            todo.extend(self._next(fn))
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

    def _user_file(self, filename: str) -> str:
        """The file's base name when it is user code (not torch, the standard library or this
        tracer), else ""; cached per file name."""
        base = self._file_ok.get(filename)
        if base is None:
            path = os.path.abspath(filename)
            user = not (path.startswith(self.torch_dir) or path.startswith(self.stdlib_dir)
                        or path in self.internal or filename.startswith("<"))
            base = self._file_ok[filename] = os.path.basename(filename) if user else ""
        return base

    def _source(self) -> str:
        f = sys._getframe(2)
        known = self._file_ok
        while f is not None:
            filename = f.f_code.co_filename
            base = known.get(filename)  # _user_file's cache, read here: a call per frame less
            if base is None:
                base = self._user_file(filename)
            if base:
                return f"{base}:{f.f_lineno}"
            f = f.f_back
        return ""

    def stamp(self, node) -> None:
        """Labels a new node (FX node or dispatch_trace.TraceNode) with the phase, module and
        source in force, and takes it as the pending output / gradient mark, if any."""
        if self.phase == "forward":
            info = {"phase": "forward", "module": self.stack[-1] if self.stack else ""}
            if node.op == "call_function":
                info["source"] = self._source()
        else:
            info = {"phase": "backward", "module": self.bwd_module,
                    "module_known": self.backward_hooked}
        node.meta[_META_KEY] = info
        if node.op == "call_function":
            if self._captured is not None:
                self._captured.append(node.name)
                return
            if self.island_inner is not None and self.phase == "forward":
                self.island_inner.append(node.name)
            if self.marking:
                self.marked.append(node.name)
                self.marking = False
            if self.marking_grad is not None:
                self.grad_marks[self.marking_grad] = node.name
                self.marking_grad = None

    def alias_name(self, t: torch.Tensor) -> tuple:
        """(aten.alias(t), the name of its recorded node): an island mark (tracer/islands.py)."""
        self._captured = []
        try:
            a = torch.ops.aten.alias.default(t)
        finally:
            names, self._captured = self._captured, None
        return a, names[0]

    def grad_hook(self, key):
        """A tensor hook marking the gradient through aten.alias as grad_marks[key]."""
        return _grad_marker(self, key)

    def __enter__(self):
        for name, mod in self.model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._push(name)))
            self.handles.append(mod.register_forward_hook(self._pop))
        return self

    def stamping_fx(self):
        """A context in which every torch.fx.Graph.create_node stamps its node (make_fx's
        graph; the dispatch recorder calls `stamp` itself)."""
        rec = self

        @contextlib.contextmanager
        def patched():
            original = torch.fx.Graph.create_node

            def create_node(graph, *args, **kwargs):
                node = original(graph, *args, **kwargs)
                rec.stamp(node)
                return node

            torch.fx.Graph.create_node = create_node
            try:
                yield
            finally:
                torch.fx.Graph.create_node = original
        return patched()

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles.clear()
        # The autograd nodes' pre-hooks close over this recorder, which maps those nodes: a
        # cycle holding the step's whole autograd graph (and its tensors) until Python's
        # collector finds it.  Dropping the maps lets reference counting free it here.
        self.fn_module.clear()
        self._next_fns.clear()
        self.in_fns.clear()
        return False


def _record(step, flat: list, table, tracer: str, rec, policy):
    """Runs the step under the chosen recorder -> the traced module."""
    if tracer == "dispatch" and table is None:
        from .datadep_ops import DataDependentOps
        from .dispatch_trace import dispatch_trace

        return dispatch_trace(step, flat, table, on_node=rec.stamp,
                              datadep=DataDependentOps(policy))
    with rec.stamping_fx():
        return _compat.make_fx(step, decomposition_table=table, tracing_mode="real")(flat)


def _policy_and_marker(rec, data_dependent, first_decisions) -> tuple:
    """The trace's data-dependent policy (reading source lines and modules from `rec`) and,
    when a first trace took decisions, the island marker of this (second) one."""
    from .datadep import as_policy

    policy = as_policy(data_dependent)
    policy.source = rec._source
    policy.module = lambda: (None if rec.phase != "forward"
                             else rec.stack[-1] if rec.stack else "")
    marker = None
    if first_decisions:
        marker = IslandMarker(rec, island_modules(first_decisions), first_decisions)
    return policy, marker


@contextlib.contextmanager
def _installed(marker, model):
    """The island marks' hooks on `model` for the block (none when marker is None)."""
    if marker is None:
        yield
        return
    marker.install(model)
    try:
        yield
    finally:
        marker.remove()


def _island_calls(marker, rec) -> list:
    """The marker's island calls with their gradient mark keys resolved to node names."""
    if marker is None:
        return []
    for call in marker.calls:
        call.in_grad = [rec.grad_marks.get(k) if k is not None else None for k in call.in_grad]
        call.out_grad = [rec.grad_marks.get(k) if k is not None else None
                         for k in call.out_grad]
    return marker.calls


def _tensors(obj):
    """All tensors in a (nested) tuple / list / dict / dataclass."""
    return flatten_tensors(obj)


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
    """Loss used when none is given: the mean of the (first) output tensor, in float32."""
    tensors = [t for t in flatten_tensors(output) if t.is_floating_point()]
    if not tensors:
        raise ValueError("the model returned no floating-point tensor to take a loss of")
    return tensors[0].float().mean()


def _meta_like(t: torch.Tensor, dtype=None) -> torch.Tensor:
    """A meta tensor like `t` (same requires_grad); `t` itself when already on meta."""
    if t.is_meta and (dtype is None or t.dtype == dtype):
        return t
    m = torch.empty_strided(t.shape, t.stride(), dtype=dtype or t.dtype, device="meta")
    return m.requires_grad_(t.requires_grad) if m.is_floating_point() else m


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the block (restored after).

    Tracing allocates hundreds of thousands of long-lived objects (FX nodes, meta tensors,
    metadata), and every allocation burst triggers a collection that walks all of them
    again: on LLaMA-3 8B (9,000 ops) about half of the trace's CPU time and two thirds of
    the export's went to the collector (docs/benchmarks.md, "Python").  Nothing the tracer
    makes is cyclic garbage that must go early; reference counting still frees the rest."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def trace_training_step(model: torch.nn.Module, example_inputs, loss_fn=None, targets=None,
                        *, train: bool = True, decompose: str | None = None,
                        param_dtype=None, mark_outputs: bool = False,
                        tracer: str = "dispatch", attention: str | None = None,
                        data_dependent=None) -> TracedStep:
    """Traces forward + loss + backward of `model` at ATen level on the meta device.

    example_inputs: a tensor, a tuple/list of positional model arguments, or a dict of keyword
        arguments.  targets: extra tensors for the loss (tuple or dict), passed as
        `loss_fn(output, *targets)` / `loss_fn(output, **targets)`.  loss_fn defaults to the
        mean of the output.  Model and tensors are moved to meta first if they are not there.
    decompose: None (ATen as dispatched) or "core_aten" (PyTorch's Core ATen opset, through
        `torch._decomp.core_aten_decompositions()`; PyTorch >= 2.1).
    param_dtype: compute dtype of floating parameters (mixed precision, as FSDP's
        MixedPrecisionPolicy.param_dtype): the graph casts each parameter once (`_to_copy`),
        the parameter and its gradient keep their own dtype.
    mark_outputs: pass every model output tensor through `aten.alias` and report those nodes
        in TracedStep.output_nodes (AutoParallel.add_output_constraints pins them).
    tracer: "dispatch" (default: dispatch_trace.py, a TorchDispatchMode over eager meta
        execution, fast) or "make_fx" (torch.fx.experimental.proxy_tensor.make_fx in "real"
        mode on the meta tensors: the same graph, ~10x slower on PyTorch 2.x).  With
        decompose, make_fx is used (it applies the table under the Python dispatcher).
    attention: None (scaled_dot_product_attention as dispatched on meta: the math
        decomposition, s x s scores materialised) or a device type, "cpu" or "cuda": record
        the fused flash-attention kernel that device runs
        (`_scaled_dot_product_flash_attention_for_cpu` / `_scaled_dot_product_flash_attention`,
        with their backward), for calls it supports (no mask, no GQA broadcast); the graph
        then runs on that device as PyTorch's own dispatch would run it (autoshard.apply).
    data_dependent: what to take for what meta tensors cannot know (nonzero sizes, boolean
        masks, values read by `.item()`, random draws): None for the policy's defaults
        (upper-bound sizes, unknown booleans True, uniform draws at the top of their range),
        a dict "file.py:LINE" -> value overriding the decision at that source line, or a
        `datadep.DataDependentPolicy`.  Decisions are in TracedStep.data_dependent.  Only the
        dispatch tracer applies it (with make_fx or decompose those ops fail as on meta).
    The model itself is not modified (its tensors are replaced by meta tensors for the trace
    through functional_call); with train, model.train() is in force during the trace only.
    """
    _compat.ensure_meta_kernels()
    was_training = model.training
    if train:
        model.train()
    from .datadep import MAX_FLIPS, DataDependentError, as_policy, warn_flipped

    policy = as_policy(data_dependent)
    try:
        with gc_paused(), scoped_meta_kernels():
            for flips in range(MAX_FLIPS + 1):
                try:
                    traced = _trace(model, example_inputs, loss_fn, targets, decompose,
                                    param_dtype, mark_outputs, tracer, attention, policy)
                    break
                except DataDependentError:
                    raise
                except Exception as e:  # a default branch may be a check that raises
                    flipped = policy.flip_last_default() if flips < MAX_FLIPS else None
                    if flipped is None:
                        raise
                    warn_flipped(flipped, e)
            if not traced.data_dependent:
                return traced
            # Again, with the island modules' calls marked (tracer/islands.py): the graph a
            # plan is made from is then the graph the runtime rewrites.  Warned already.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DataDependentWarning)
                return _trace(model, example_inputs, loss_fn, targets, decompose, param_dtype,
                              mark_outputs, tracer, attention, policy, traced.data_dependent)
    finally:
        model.train(was_training)


def _trace(model, example_inputs, loss_fn, targets, decompose, param_dtype, mark_outputs,
           tracer, attention=None, data_dependent=None, first_decisions=None):
    if tracer not in ("dispatch", "make_fx"):
        raise ValueError(f"tracer must be 'dispatch' or 'make_fx', got {tracer!r}")

    table = _compat.decomposition_table(decompose)
    loss_fn = loss_fn or default_loss
    pos, kw, input_names = _split_inputs(model, to_meta(example_inputs))
    tpos, tkw, target_names = _split_targets(to_meta(targets))
    for n in target_names:
        if n in input_names:
            raise ValueError(f"target name {n!r} clashes with a model input name")

    params = {n: _meta_like(p) for n, p in model.named_parameters()}
    buffers = {n: _meta_like(b) for n, b in model.named_buffers()}
    pnames, bnames = list(params), list(buffers)
    trainable = [n for n in pnames if params[n].requires_grad]
    flat = ([params[n] for n in pnames] + [buffers[n] for n in bnames] + list(pos)
            + list(kw.values()) + list(tpos) + list(tkw.values()))
    for i, t in enumerate(flat):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"inputs and targets must be tensors; argument {i} is {type(t)}")
    counts = [len(pnames), len(bnames), len(pos), len(kw), len(tpos), len(tkw)]

    rec = _Recorder(model)
    policy, marker = _policy_and_marker(rec, data_dependent, first_decisions)
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
        if param_dtype is not None:
            p = {n: t.to(param_dtype) if t.is_floating_point() else t for n, t in p.items()}
            wrt_src = dict(zip(pnames, flat_args[:counts[0]]))
        else:
            wrt_src = p
        out = _compat.functional_call(model, {**p, **b}, a, k)
        if mark_outputs:
            def mark(t):
                rec.marking = True
                a = torch.ops.aten.alias.default(t)
                if a.requires_grad:
                    a.register_hook(_grad_marker(rec, len(rec.marked) - 1))
                return a
            out = map_tensors(mark, out)
        loss = loss_fn(out, *ta, **tk)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("loss_fn must return a one-element tensor")
        if loss.requires_grad:
            loss.register_hook(_grad_marker(rec, "loss"))
        rec.phase = "backward"
        rec._label_backward(loss)
        wrt = [wrt_src[n] for n in trainable]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True) if wrt else ()
        unused[:] = [n for n, g in zip(trainable, grads) if g is None]
        return [loss] + [g for g in grads if g is not None]

    with rec, _fused_attention(attention), _compat.compiling(), _installed(marker, model):
        gm = _record(step, flat, table, tracer, rec, policy)
    policy.finish()
    kinds = (["parameter"] * counts[0] + ["buffer"] * counts[1]
             + ["input"] * (counts[2] + counts[3] + counts[4] + counts[5]))
    names = pnames + bnames + input_names + target_names
    return TracedStep(gm=gm, flat_args=flat, placeholder_kinds=kinds, placeholder_names=names,
                      grad_params=[n for n in trainable if n not in unused],
                      missing_grads=list(unused), output_nodes=list(rec.marked),
                      tangent_nodes=[rec.grad_marks.get(i) for i in range(len(rec.marked))],
                      loss_tangent=rec.grad_marks.get("loss"),
                      data_dependent=list(policy.decisions),
                      islands=_island_calls(marker, rec))
