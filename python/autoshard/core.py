"""The C++ core (`autoshard._core`), importable without torch.

`Mesh`, `Graph`, `PlannerOptions`, `Plan` and `ShardingOptimizer` are the C++ classes
themselves (src/python/*.cc): the Python package adds no planning logic of its own.

The extension is `autoshard/_core*.so` in an installed wheel.  In a source checkout, set
`AUTOSHARD_CORE` to the built module (`cmake --build B --target _core` puts it at
`B/_core*.so`); CTest sets it for the pytest suite.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any


def _load_core():
    path = os.environ.get("AUTOSHARD_CORE")
    if path:
        if "autoshard._core" in sys.modules:
            return sys.modules["autoshard._core"]
        spec = importlib.util.spec_from_file_location("autoshard._core", path)
        if spec is None or not os.path.exists(path):
            raise ImportError(f"AUTOSHARD_CORE={path}: no such extension module")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["autoshard._core"] = mod
        spec.loader.exec_module(mod)
        return mod
    try:
        from . import _core
    except ImportError as e:
        raise ImportError("autoshard._core is not built: `pip install .` at the repository root, "
                          "or build the CMake target _core (-DAUTOSHARD_PYTHON_MODULE=ON) and "
                          "set AUTOSHARD_CORE to it") from e
    return _core


_core = _load_core()

Mesh = _core.Mesh
Graph = _core.Graph
PlannerOptions = _core.PlannerOptions
Plan = _core.Plan
ShardingOptimizer = _core.ShardingOptimizer
Placement = str  #: placements cross the C++ boundary as DTensor strings, e.g. "S(0)R"
normalize_placements = _core.normalize_placements  #: "Shard(0), Replicate()" -> "S(0)R"
collective_time_us = _core.collective_time_us  #: (kind, bytes, mesh, dim, comm_model) -> us

__all__ = ["Mesh", "Graph", "PlannerOptions", "Plan", "ShardingOptimizer", "Placement",
           "normalize_placements", "collective_time_us", "planner_options", "plan_graph"]


def planner_options(**kwargs: Any) -> PlannerOptions:
    """PlannerOptions with the given fields set (time_limit_s=30, threads=2, ...)."""
    o = PlannerOptions()
    for k, v in kwargs.items():
        if not hasattr(o, k):
            raise TypeError(f"unknown planner option {k!r}")
        setattr(o, k, v)
    return o


def plan_graph(graph: Graph | str, mesh: Mesh, **options: Any) -> ShardingOptimizer:
    """Plans a graph (a Graph or a graph JSON path) on `mesh`; returns the solved optimizer.

    The same as `autoshard plan --graph FILE`: the plan is `opt.solution`.
    """
    if isinstance(graph, (str, os.PathLike)):
        graph = Graph.load(os.fspath(graph))
    opt = ShardingOptimizer(graph, mesh, planner_options(**options))
    opt.get_solution()
    return opt
