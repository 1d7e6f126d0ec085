"""`AutoParallel`: AutoParallel's front end (names and workflow) on autoshard's C++ planner.

    with AutoParallel(model, input_fn, mesh) as autop:
        autop.add_parameter_memory_constraint(low=None, high=None)
        sharding = autop.optimize_placement()        # node name -> DTensor placements
        autop.sharding_optimizer.save("out/plan.ap")

Entering the context traces one training step (forward, loss, backward) on meta tensors: no
weights are allocated and the model is not modified.  The graph goes to the C++
`ShardingOptimizer` unchanged; this class only converts placements and names.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from . import core
from . import placements as _pl


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


class AutoParallel:
    """Plans the sharding of `model` on `mesh` (AutoParallel's names; see README "Use from
    Python").

    model: a torch.nn.Module (real or meta weights: it is traced on meta tensors).
    input_fn: returns the example inputs (a tensor, a tuple of positional arguments or a dict of
        keyword arguments); called with meta as the default device, so shapes cost nothing.
        It may return (inputs, targets) when loss_fn needs targets.
    mesh: autoshard.Mesh(shape, dim_names, hardware) or a torch DeviceMesh (a fake process
        group is enough; `hardware` then names the preset, default h100).
    loss_fn: loss_fn(output, *targets) -> scalar; default `output_loss` (the sum of the outputs).
    mp_policy: an object with `param_dtype` (FSDP's MixedPrecisionPolicy): parameters are
        cast to it in the graph; `reduce_dtype` is not modelled (gradients keep the
        parameter's dtype).
    """

    def __init__(self, model: Any, input_fn: Callable[[], Any], mesh: Any,
                 loss_fn: Callable | None = None, mp_policy: Any = None, *,
                 hardware: str = "h100", options: core.PlannerOptions | None = None,
                 decompose: str | None = None, name: str | None = None) -> None:
        self.model = model
        self.input_fn = input_fn
        self.device_mesh = mesh if _is_device_mesh(mesh) else None
        self.mesh = to_core_mesh(mesh, hardware)
        self.loss_fn = loss_fn
        self.mp_policy = mp_policy
        self.options = options
        self.decompose = decompose
        self.name = name or type(model).__name__
        self.graph_dict: dict | None = None
        self.traced = None
        self.sharding_optimizer: core.ShardingOptimizer | None = None
        self._output_nodes: list[str] = []
        self._pending: list[tuple[str, tuple]] = []

    # --- context -------------------------------------------------------------------------
    def __enter__(self) -> "AutoParallel":
        self.build()
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def build(self) -> core.ShardingOptimizer:
        """Traces the training step and creates the C++ optimizer (done by `with`)."""
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
        self.traced = trace_training_step(self.model, example, self.loss_fn or output_loss,
                                          targets, decompose=self.decompose,
                                          param_dtype=param_dtype, mark_outputs=True)
        self._output_nodes = list(self.traced.output_nodes)
        self.graph_dict = to_graph_dict(self.traced, self.name)
        graph = core.Graph.from_json(json.dumps(self.graph_dict), f"<traced {self.name}>")
        self.sharding_optimizer = core.ShardingOptimizer(graph, self.mesh, self.options)
        for kind, args in self._pending:
            getattr(self, kind)(*args)
        self._pending.clear()
        return self.sharding_optimizer

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
        return self.sharding_optimizer.add_input_constraints(_pl.to_strings(constraints))

    def add_output_constraints(self, constraints: Sequence[Any]) -> list[str]:
        """Placements of the model's output tensors (flattened in order; None leaves one
        free): pins the nodes that produce them."""
        if not self._ready("add_output_constraints", constraints):
            return []
        if len(constraints) > len(self._output_nodes):
            raise ValueError(f"{len(constraints)} output constraints for "
                             f"{len(self._output_nodes)} model outputs")
        names: list[str] = []
        for node, spec in zip(self._output_nodes, _pl.to_strings(constraints)):
            if spec is not None:
                names += self.sharding_optimizer.add_node_constraint(node, spec)
        return names

    def add_parameter_memory_constraint(self, low: float | None = None,
                                        high: float | None = None) -> str | None:
        """Parameter memory per device within [low, high] x the unsharded parameter bytes;
        defaults low=0 and high=1/number of devices (parameters fully sharded, as FSDP)."""
        if not self._ready("add_parameter_memory_constraint", low, high):
            return None
        n = self.mesh.num_devices
        lo = 0.0 if low is None else float(low)
        hi = 1.0 / n if high is None else float(high)
        return self.sharding_optimizer.add_parameter_memory_constraint(lo, hi)

    # --- solving -------------------------------------------------------------------------
    def optimize_placement(self, verbose: bool = False) -> dict[str, dict[str, list]]:
        """Solves; returns node name -> {"outputs": [placements per output],
        "inputs": [placements per input]} with DTensor placement tuples when torch is
        importable (strings otherwise)."""
        opt = self.sharding_optimizer or self.build()
        plan = opt.get_solution()
        if not plan.has_solution:
            raise RuntimeError(f"no plan found ({plan.status}); warnings: {plan.warnings}")
        if verbose:
            print(plan)
        return convert_placements(opt.get_placements(plan))

    @property
    def output_nodes(self) -> list[str]:
        """Graph nodes (aten.alias) marking the model's output tensors, in flattening order."""
        return list(self._output_nodes)


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
    conv = _pl.to_dtensor
    return {n: {"outputs": [conv(s) for s in d["outputs"]], "inputs": [conv(s) for s in d["inputs"]]}
            for n, d in raw.items()}

