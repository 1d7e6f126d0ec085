"""`AutoParallel` and `auto_parallel`: AutoParallel's front end (names, argument order and
workflow: ../shared/reference/autoparallel-api.md) on autoshard's C++ planner.

    with AutoParallel(model, input_fn, mesh, mp_policy) as autop:
        autop.add_parameter_memory_constraint(low=None, high=None)
        sharding = autop.optimize_placement()        # node name -> DTensor placements
        autop.sharding_optimizer.save("out/plan.ap")
        module = autop.apply_placement(sharding)     # needs a torch DeviceMesh

Entering the context traces one training step (forward, loss, backward) on meta tensors: no
weights are allocated and the model is not modified.  The graph goes to the C++
`ShardingOptimizer` unchanged (wrapped by autoshard.optimizer.ShardingOptimizer for
AutoParallel's method names); this module only converts placements and names.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Sequence

from . import core
from . import placements as _pl
from .optimizer import ShardingOptimizer, placements_document


def output_loss(output: Any, *targets: Any, **kw: Any):
    """The loss when no loss_fn is given: the sum, in float32, of every floating-point tensor
    the model returns (tensors, tuples, dicts, dataclasses, Hugging Face ModelOutput).

    AutoParallel differentiates the model's outputs against incoming gradients ("tangents")
    shaped like them; summing every output element gives each output exactly such a gradient
    (all ones), so the backward graph and its placements are the same.
    """
    from .tracer.trace import flatten_tensors

    tensors = [t for t in flatten_tensors(output) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        raise ValueError("the model returned no floating-point tensor that requires grad")
    total = tensors[0].float().sum()
    for t in tensors[1:]:
        total = total + t.float().sum()
    return total


def _is_device_mesh(mesh: Any) -> bool:
    return hasattr(mesh, "mesh_dim_names") and hasattr(mesh, "device_type")


def to_core_mesh(mesh: Any, hardware: str = "h100") -> core.Mesh:
    """autoshard.Mesh as is; a torch DeviceMesh -> autoshard.Mesh of its shape and dim names."""
    if isinstance(mesh, core.Mesh):
        return mesh
    if _is_device_mesh(mesh):
        shape = [int(s) for s in mesh.shape]
        names = list(mesh.mesh_dim_names or [])
        return core.Mesh(shape, names, hardware)
    raise TypeError(f"mesh must be an autoshard.Mesh or a torch DeviceMesh, got {type(mesh)}")


_OPTION_FIELDS = ("comm_model", "memory_limit_bytes", "recompute", "time_limit_s", "mip_gap",
                  "threads", "skip_fully_replicated", "cluster", "require_divisible",
                  "run_checks", "preload_solution", "ilp_solution_file")


def planner_options_for(options: core.PlannerOptions | None, cost_model: str,
                        repeated_subgraphs: bool) -> core.PlannerOptions:
    """A copy of `options` (default PlannerOptions) with AutoParallel's knobs applied:
    cost_model -> comm_model ("nccl" or "dtensor"), repeated_subgraphs -> cluster (identical
    repeated layers share one set of decisions).  With explicit options, the knobs override
    them only when they differ from AutoParallel's defaults."""
    if cost_model not in ("nccl", "dtensor"):
        raise ValueError(f"cost_model: expected 'nccl' or 'dtensor', got {cost_model!r}")
    out = core.PlannerOptions()
    if options is not None:
        for f in _OPTION_FIELDS:
            setattr(out, f, getattr(options, f))
    if options is None or cost_model != "nccl":
        out.comm_model = cost_model
    if options is None or not repeated_subgraphs:
        out.cluster = bool(repeated_subgraphs)
    return out


def meta_captures(loss_fn: Callable) -> Callable:
    """loss_fn run so that real (non-meta) tensors it closes over (targets, class weights,
    masks: in a closure, a global, a default or an object) meet the meta tensors of the trace
    as meta twins of the same shape, dtype and strides.  The wrapper records them in
    `.twins` (id(real) -> (twin, real)); the trace keeps a twin as a constant of the step (a
    buffer node of the graph).  0-dim tensors are left alone (they mix with any device)."""
    import contextlib

    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map
    try:
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError:  # older torch: the twin is then recorded as a factory op of the step
        _disable_current_modes = contextlib.nullcontext

    twins: dict[int, tuple[Any, Any]] = {}

    def twin(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.is_meta or x.dim() == 0:
            return x
        hit = twins.get(id(x))
        if hit is None:
            with _disable_current_modes():  # the twin is data, not an op of the step
                m = torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device="meta")
            hit = twins[id(x)] = (m, x)
        return hit[0]

    class _ToMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            args, kwargs = tree_map(twin, (tuple(args), dict(kwargs or {})))
            return func(*args, **kwargs)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with _ToMeta():
            return loss_fn(*args, **kwargs)

    wrapped.twins = twins  # type: ignore[attr-defined]
    return wrapped


def _restore_captures(traced: Any, twins: dict) -> None:
    """Puts the real tensors back where the trace kept their meta twins as constants (so
    that running the step, as apply_placement does, uses the captured values)."""
    real_of = {id(m): r for m, r in twins.values()}
    root = traced.gm
    for k, v in list(vars(root).items()):      # the dispatch tracer's constants
        if id(v) in real_of:
            setattr(root, k, real_of[id(v)])
    buffers = getattr(root, "_buffers", {})      # a GraphModule's (make_fx) constants
    for k, v in list(buffers.items()):
        if id(v) in real_of:
            buffers[k] = real_of[id(v)]


class AutoParallel:
    """Plans the sharding of `model` on `mesh` with AutoParallel's signature (docs/planning.md,
    "From Python"); a context manager: entering it traces the training step.

    model: a torch.nn.Module (real or meta weights: it is traced on meta tensors).
    input_fn: returns the example inputs (a tensor, a tuple of positional arguments or a dict of
        keyword arguments); called with meta as the default device, so shapes cost nothing.
        It may return (inputs, targets) when loss_fn needs targets.
    mesh: a torch DeviceMesh (a fake process group is enough to plan; apply_placement needs a
        real one), or autoshard.Mesh(shape, dim_names, hardware).
    mp_policy: an object with `param_dtype` (FSDP's MixedPrecisionPolicy): parameters are
        cast to it in the graph; `reduce_dtype` is not modelled (gradients keep the
        parameter's dtype).
    reshard_after_forward: accepted for AutoParallel's signature; autoshard's plan decides
        per parameter where it is gathered, so it has no effect.
    dynamic: False only (dynamic shapes are not supported: the plan is for input_fn's shapes).
    cost_model: "nccl" (default) or "dtensor": the collective cost model (PlannerOptions
        comm_model).  repeated_subgraphs: tie identical repeated layers to one set of
        decisions (PlannerOptions cluster).
    Keyword-only (autoshard's):
    loss_fn: loss_fn(output, *targets) -> scalar; default `output_loss` (the sum of the outputs,
        which gives each output a gradient of ones, like AutoParallel's tangents).  Real
        tensors it closes over are traced as meta twins (see meta_captures).
    hardware: hardware preset of a DeviceMesh (h100, ...).  options: core.PlannerOptions.
    decompose: None or "core_aten" (the tracer's decomposition).  name: the graph's name.
    """

    def __init__(self, model: Any, input_fn: Callable[[], Any], mesh: Any,
                 mp_policy: Any = None, reshard_after_forward: bool = True,
                 dynamic: bool = False, cost_model: str = "nccl",
                 repeated_subgraphs: bool = True, *, loss_fn: Callable | None = None,
                 hardware: str = "h100", options: core.PlannerOptions | None = None,
                 decompose: str | None = None, name: str | None = None,
                 data_dependent: Any = None) -> None:
        if callable(mp_policy) and not hasattr(mp_policy, "param_dtype"):
            raise TypeError("AutoParallel: the 4th argument is mp_policy (AutoParallel's order); "
                            "pass the loss function as loss_fn=...")
        if dynamic:
            raise ValueError("AutoParallel: dynamic=True is not supported (autoshard plans for "
                             "the shapes input_fn returns)")
        self.model = model
        self.input_fn = input_fn
        self.device_mesh = mesh if _is_device_mesh(mesh) else None
        self.mesh = to_core_mesh(mesh, hardware)
        self.mp_policy = mp_policy
        self.reshard_after_forward = reshard_after_forward
        self.dynamic = dynamic
        self.cost_model = cost_model
        self.repeated_subgraphs = repeated_subgraphs
        self.loss_fn = loss_fn
        self.options = planner_options_for(options, cost_model, repeated_subgraphs)
        self.decompose = decompose
        self.data_dependent = data_dependent  # the tracer's data_dependent (docs/tracer.md)
        self.name = name or type(model).__name__
        self._graph_dict: dict | None = None
        self.traced = None
        self.sharding_optimizer: ShardingOptimizer | None = None
        self._output_nodes: list[str] = []
        self._pending: list[tuple[str, tuple]] = []

    # --- context -------------------------------------------------------------------------
    def __enter__(self) -> "AutoParallel":
        self.build()
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def build(self) -> ShardingOptimizer:
        """Traces the training step and creates the optimizer (done by `with`)."""
        from .tracer.trace import gc_paused

        with gc_paused():  # tracing, export and hand-off make ~10^5 long-lived objects
            return self._build()

    def _build(self) -> ShardingOptimizer:
        from .tracer.export import to_graph_dict
        from .tracer.meta_init import meta_device
        from .tracer.trace import trace_training_step

        with meta_device():
            example = self.input_fn()
        targets = None
        if isinstance(example, tuple) and len(example) == 2 and self.loss_fn is not None \
                and isinstance(example[0], (tuple, list, dict)):
            example, targets = example
        param_dtype = getattr(self.mp_policy, "param_dtype", None)
        loss = meta_captures(self.loss_fn) if self.loss_fn is not None else output_loss
        # With a DeviceMesh the step will run on its device: trace the attention kernel that
        # device runs (its fused flash attention), so that the plan is the step apply runs.
        attention = getattr(self.device_mesh, "device_type", None)
        self.traced = trace_training_step(self.model, example, loss, targets,
                                          decompose=self.decompose, param_dtype=param_dtype,
                                          mark_outputs=True, attention=attention,
                                          data_dependent=self.data_dependent)
        self._output_nodes = list(self.traced.output_nodes)
        # The hand-off: the C++ core's file reader walks the dict in place (no json.dumps, no
        # text parse, no intermediate JSON tree: 0.16 -> ~0.015 s CPU on LLaMA-3 8B's 9,000
        # nodes, docs/benchmarks.md "Issue 24, item 4"), the same Graph as from_json, read
        # straight into the optimizer.
        graph_dict = to_graph_dict(self.traced, self.name)
        core_opt = core.ShardingOptimizer.from_dict(graph_dict, self.mesh, self.options,
                                                    f"<traced {self.name}>")
        # The dispatch recorder's dict is not kept (`graph_dict` exports it again when asked
        # for: that export reads only what was recorded): its ~10^5 objects would be walked by
        # the collector for nothing.  make_fx's export re-runs the graph on its tensors, which
        # _restore_captures below may turn real: that dict is kept.
        self._graph_dict = None if hasattr(self.traced.gm, "trace_nodes") else graph_dict
        del graph_dict
        if self.loss_fn is not None:
            _restore_captures(self.traced, loss.twins)
        self.sharding_optimizer = ShardingOptimizer(core_opt)
        for kind, args in self._pending:
            getattr(self, kind)(*args)
        self._pending.clear()
        return self.sharding_optimizer

    @property
    def graph_dict(self) -> dict | None:
        """The traced step as a graph dict (the graph JSON the planner was given,
        autoshard.tracer.export.to_graph_dict); None before tracing.  Exported from the
        trace on first use (the export is deterministic: the same dict as the hand-off's)."""
        if self._graph_dict is None and self.traced is not None:
            from .tracer.export import to_graph_dict

            self._graph_dict = to_graph_dict(self.traced, self.name)
        return self._graph_dict

    def _ready(self, kind: str, *args: Any) -> bool:
        if self.sharding_optimizer is None:
            self._pending.append((kind, args))
            return False
        return True

    # --- constraints ---------------------------------------------------------------------
    def add_input_constraints(self, constraints: Sequence[Any]) -> list[str]:
        """Placements of the model inputs (then loss targets) in order; None leaves one free.
        Each entry is a string ("S(0)R") or a sequence of DTensor placements."""
        if not self._ready("add_input_constraints", constraints):
            return []
        return self.sharding_optimizer.add_input_constraints(constraints)

    def add_output_constraints(self, constraints: Sequence[Any]) -> list[str]:
        """Placements of the model's output tensors (flattened in order; None leaves one
        free): pins the nodes that produce them."""
        if not self._ready("add_output_constraints", constraints):
            return []
        if len(constraints) > len(self._output_nodes):
            raise ValueError(f"{len(constraints)} output constraints for "
                             f"{len(self._output_nodes)} model outputs")
        names: list[str] = []
        for node, spec in zip(self._output_nodes, constraints):
            if spec is not None:
                names += self.sharding_optimizer.add_node_constraint(node, spec)
        return names

    def add_parameter_memory_constraint(self, low: float | None = None,
                                        high: float | None = None) -> str | None:
        """Parameter memory per device within [low, high] x the unsharded parameter bytes;
        defaults low=0 and high=1/number of devices (parameters fully sharded, as FSDP)."""
        if not self._ready("add_parameter_memory_constraint", low, high):
            return None
        return self.sharding_optimizer.add_parameter_memory_constraint(low, high)

    # --- solving -------------------------------------------------------------------------
    def optimize_placement(self, verbose: bool = False) -> "SolutionPlacements":
        """Solves; returns node name -> {"outputs": [placements per output],
        "inputs": [placements per input]} with DTensor placement tuples when torch is
        importable (strings otherwise): a read-only mapping of this solution, filled from
        the plan when first read (see SolutionPlacements)."""
        opt = self.sharding_optimizer or self.build()
        plan = opt.get_solution()
        if not plan.has_solution:
            raise RuntimeError(_no_plan_message(plan, opt.fit_suggestions(plan)))
        if verbose:
            print(plan)
        return SolutionPlacements(lambda: opt.get_placements(plan))

    @property
    def output_nodes(self) -> list[str]:
        """Graph nodes (aten.alias) marking the model's output tensors, in flattening order."""
        return list(self._output_nodes)

    # --- applying ------------------------------------------------------------------------
    def placements_document(self, sharding_placement: Any = None) -> dict | str:
        """The placements.json document (AutoParallel's save_placements schema) of a
        solution: None (the optimizer's current solution), a Plan (optimize_placement's
        optimizer, get_solution, resolve or sharding_optimizer.load_placements), the dict
        optimize_placement() returns, a placements.json document, or a path to one (returned
        as is)."""
        opt = self.sharding_optimizer or self.build()
        if isinstance(sharding_placement, (str, os.PathLike)):
            return os.fspath(sharding_placement)
        if sharding_placement is None or isinstance(sharding_placement, core.Plan):
            return json.loads(opt.placements_json(sharding_placement))
        if isinstance(sharding_placement, Mapping):
            if "placements" in sharding_placement:
                return sharding_placement
            return placements_document(sharding_placement, self.mesh.shape, self.mesh.dim_names)
        raise TypeError(f"apply_placement: expected a solution (dict or Plan), a placements "
                        f"document or path, got {type(sharding_placement).__name__}")

    def apply_placement(self, sharding_placement: Any = None) -> Any:
        """The parallel module running the traced step at the plan's placements (autoshard.apply:
        parameters become DTensors on the DeviceMesh).  sharding_placement: see
        placements_document (None: the current solution).  Needs a torch DeviceMesh."""
        if self.device_mesh is None:
            raise TypeError("apply_placement needs a torch DeviceMesh: this AutoParallel was given "
                            "an autoshard.Mesh (pass init_device_mesh(...) as mesh)")
        doc = self.placements_document(sharding_placement)
        from . import apply as _apply

        # Without a loss function the module returns the model's outputs (as AutoParallel's
        # does) and any loss of them back-propagates; with one, it returns the loss.
        returns = "outputs" if self.loss_fn is None else "loss"
        return _apply.apply_placement(self.model, doc, self.device_mesh, traced=self.traced,
                                      graph=self.graph_dict, returns=returns)


def _out_shardings_list(out_shardings: Any) -> list:
    """out_shardings as one entry per output: a lone placement tuple or string is one entry."""
    if out_shardings is None:
        return []
    if isinstance(out_shardings, str):
        return [out_shardings]
    items = list(out_shardings)
    if items and all(type(p).__name__ in ("Shard", "Replicate", "Partial", "_StridedShard")
                     for p in items):
        return [tuple(items)]
    return items


def auto_parallel(model: Any, mesh: Any, sample_inputs: Any, out_shardings: Any, *,
                  mp_policy: Any = None,
                  parameter_memory_budget: tuple[float | None, float | None] | None = None,
                  dynamic: bool = False) -> Any:
    """Plans and applies in one call (AutoParallel's `auto_parallel`); returns the parallel
    module (eager).

    mesh: a torch DeviceMesh.  sample_inputs: the example inputs (tensor, tuple or dict; real
    or meta: only shapes and dtypes are used).  out_shardings: the placements of the model's
    outputs (one DTensor tuple or string per output, None leaves one free; a lone tuple for a
    single output).  parameter_memory_budget: (low, high) for
    add_parameter_memory_constraint.  dynamic: False only.
    """
    if not _is_device_mesh(mesh):
        raise TypeError("auto_parallel needs a torch DeviceMesh (init_device_mesh(...)), got "
                        f"{type(mesh).__name__}")
    with AutoParallel(model, lambda: sample_inputs, mesh, mp_policy, dynamic=dynamic) as autop:
        if parameter_memory_budget is not None:
            low, high = parameter_memory_budget
            autop.add_parameter_memory_constraint(low, high)
        outs = _out_shardings_list(out_shardings)
        if outs:
            autop.add_output_constraints(outs)
        autop.optimize_placement()
        return autop.apply_placement()


class SolutionPlacements(Mapping):
    """What `optimize_placement` returns: node name -> {"outputs": [...], "inputs": [...]}
    (DTensor placement tuples; strings without torch), for one plan.

    A read-only mapping rather than a dict: the ~9,000 entries of LLaMA-3 8B (the core's
    strings, then DTensor tuples) are only built when first read -- most workflows hand the
    solution to apply_placement or save it through the optimizer and never read it here
    (docs/benchmarks.md, "Issue 24, item 4").  `dict(placements)` gives a plain dict."""

    def __init__(self, fetch: Callable[[], dict]) -> None:
        self._fetch: Callable[[], dict] | None = fetch
        self._data: dict | None = None

    def _entries(self) -> dict:
        if self._data is None:
            from .tracer.trace import gc_paused

            # ~10^5 new objects while the traced graph keeps ~10^5 alive: with the collector
            # running, its full collections took 0.6 s CPU on LLaMA-3 8B (more than the solve).
            with gc_paused():
                self._data = convert_placements(self._fetch())
            self._fetch = None
        return self._data

    def __getitem__(self, name: str) -> dict:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __contains__(self, name: object) -> bool:
        return name in self._entries()

    def __repr__(self) -> str:
        return f"SolutionPlacements({self._entries()!r})"


def convert_placements(raw: dict[str, dict[str, list[str]]], dtensor: bool | None = None) -> dict:
    """Placements dict from the core with strings turned into DTensor tuples (when torch is
    importable, or dtensor=True)."""
    if dtensor is None:
        try:
            import torch.distributed.tensor  # noqa: F401
            dtensor = True
        except ImportError:
            dtensor = False
    if not dtensor:
        return raw
    # A plan has a handful of distinct placements over thousands of nodes: convert each once
    # (DTensor placements are immutable, so the tuples can be shared).
    memo: dict[str, tuple] = {}

    def conv(spec: str) -> tuple:
        hit = memo.get(spec)
        if hit is None:
            hit = memo[spec] = _pl.to_dtensor(spec)
        return hit
    return {n: {"outputs": [conv(s) for s in d["outputs"]], "inputs": [conv(s) for s in d["inputs"]]}
            for n, d in raw.items()}


def _no_plan_message(plan: Any, fit: Sequence[str]) -> str:
    """The one-line error of a solve without a plan: its status, why, and what would fit (the
    CLI's "to fit, ..." remedies)."""
    parts = [f"no plan found ({plan.status})"]
    parts += list(plan.warnings)
    parts += [f"to fit, {s}" for s in fit]
    return "; ".join(parts)
