"""autoshard: automatic sharding plans for PyTorch training steps.

    from autoshard import AutoParallel, Mesh
    with AutoParallel(model, input_fn, Mesh((2, 4), ("dp", "tp"))) as autop:
        sharding = autop.optimize_placement()          # node name -> placements

    from autoshard import ShardingOptimizer             # no torch needed
    opt = ShardingOptimizer.load("out/plan.ap")          # AutoParallel's method names

    module = autoshard.auto_parallel(model, device_mesh, inputs, out_shardings)
    module = autoshard.apply_placement(model, "out/placements.json", device_mesh,
                                       example_inputs=(tokens,), loss_fn=loss, targets=(labels,))
    pipe = autoshard.apply_pipeline(model, "out/placements.json", device_mesh,
                                    example_inputs=(tokens_mb,), loss_fn=loss, targets=(labels_mb,))

Importing this package imports neither torch nor the C++ extension: the names below are
resolved on first use, so `autoshard.tracer.validate` and the core work without torch.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["AutoParallel", "auto_parallel", "apply_placement", "apply_pipeline", "Mesh", "ShardingOptimizer",
           "Placement", "plan_graph", "__version__"]


def __getattr__(name: str):
    if name in ("AutoParallel", "auto_parallel"):
        from . import api
        return getattr(api, name)
    if name == "apply_placement":  # the planned module (autoshard.apply)
        from .apply import apply_placement
        return apply_placement
    if name == "apply_pipeline":  # a plan with pipeline stages (autoshard.pipeline)
        from .pipeline import apply_pipeline
        return apply_pipeline
    if name == "ShardingOptimizer":  # AutoParallel's names on the C++ optimizer
        from .optimizer import ShardingOptimizer
        return ShardingOptimizer
    if name in ("Mesh", "Placement", "plan_graph"):
        from . import core
        return getattr(core, name)
    raise AttributeError(f"module 'autoshard' has no attribute {name!r}")
