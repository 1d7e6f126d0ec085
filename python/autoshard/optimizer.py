"""`ShardingOptimizer` with AutoParallel's method names and argument types, on autoshard's C++
optimizer (`autoshard.core.ShardingOptimizer`).

AutoParallel's `autoparallel.optimize_sharding.ShardingOptimizer` (names and signatures:
../shared/reference/autoparallel-api.md) takes FX nodes or node names and DTensor placement
tuples; autoshard's C++ object takes node names and placement strings ("S(0)R").  This class
converts the arguments and delegates: every figure (costs, plans, files) comes from the C++
object, which stays reachable as `.core` (and every C++ method not defined here is forwarded).

    from autoshard import ShardingOptimizer            # importing torch is not needed
    opt = ShardingOptimizer.load("out/plan.ap")
    opt.print_costs_for_node(opt.nodes[42])
    names = opt.add_node_constraint(opt.nodes[42], (Shard(0), Replicate()))
    new = opt.resolve()
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import core
from . import placements as _pl

__all__ = ["Node", "ShardingOptimizer", "PlanJson", "placements_document"]


@dataclass(frozen=True)
class Node:
    """One graph node, as `ShardingOptimizer.nodes` lists them (in graph order, which is
    topological).  `op` follows FX ("placeholder", "call_function", "output"); `target` is
    the ATen op of an op node ("mm", "aten.mm.default": as the graph file names it) and the
    node kind otherwise."""

    index: int
    name: str
    kind: str                   #: input, parameter, buffer, op or output
    target: str
    phase: str                  #: forward, backward or optimizer
    module_path: str
    source: str                 #: "file:line" of the user code, "" when unknown
    inputs: tuple[str, ...]     #: producer names ("name", or "name:k" for output k > 0)
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @property
    def op(self) -> str:
        """FX's node kind: placeholder (inputs, parameters, buffers), call_function or output."""
        if self.kind in ("input", "parameter", "buffer"):
            return "placeholder"
        return "output" if self.kind == "output" else "call_function"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<Node {self.index} {self.name} ({self.target})>"


class PlanJson(dict):
    """The dict `get_json()` returns (plan.json's fields, AutoParallel's get_json schema).

    It is a plain dict to every reader (json.dump writes it as such); it also remembers the
    optimizer and plan it came from, so that `render_html()` (and
    `autoshard.visualizer.generate_visualization_html`) can render autoshard's full report.
    """

    _render: Callable[[], str] | None = None

    def render_html(self) -> str | None:
        """autoshard's full report page for this plan, or None when the dict was built from
        a file (no optimizer attached)."""
        return self._render() if self._render is not None else None


def _node_name(node: Any) -> str:
    """A node name from a name, a Node (or FX node: anything with `.name`)."""
    if isinstance(node, str):
        return node
    name = getattr(node, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"node must be a node name or a node object with .name, got {type(node).__name__}")


def _spec(placement: Any) -> str:
    """DTensor placements (a tuple, or one placement on a 1-D mesh) or a string -> "S(0)R"."""
    return core.normalize_placements(_pl.to_string(placement))


def placements_document(solution: Mapping[str, Any], mesh_shape: Sequence[int],
                        mesh_dim_names: Sequence[str] | None) -> dict:
    """optimize_placement()'s dict (node -> {"outputs": [...], "inputs": [...]}, DTensor
    tuples or strings) -> the placements.json document (AutoParallel's save_placements
    schema: ../shared/reference/formats.md), as `ShardingOptimizer.save_placements` writes."""
    out: dict[str, dict] = {}
    for name, entry in solution.items():
        if not isinstance(entry, Mapping) or "outputs" not in entry:
            raise ValueError(f"placements for node {name!r}: expected {{'outputs': [...], "
                             f"'inputs': [...]}}, got {type(entry).__name__}")
        outs = ["None" if o is None else _pl.to_string(o) for o in entry["outputs"]]
        output = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        out[str(name)] = {"output": output,
                          "inputs": [_pl.to_string(i) for i in entry.get("inputs", [])]}
    return {"version": 1, "mesh_shape": [int(s) for s in mesh_shape],
            "mesh_dim_names": list(mesh_dim_names) if mesh_dim_names is not None else None,
            "placements": out}


class ShardingOptimizer:
    """The planner for one graph on one mesh with AutoParallel's names (see module doc).

    Build one from (graph, mesh, options) like the C++ class, wrap an existing C++ optimizer
    (`ShardingOptimizer(core_optimizer)`), or load one (`load`, `load_replay`).  Plans are
    `autoshard.core.Plan` objects: `get_solution()`/`resolve()` return them and
    `diff_solutions` compares them (optimize_placement()'s dicts are accepted as well).
    """

    def __init__(self, graph: Any, mesh: core.Mesh | None = None,
                 options: core.PlannerOptions | None = None) -> None:
        if isinstance(graph, core.ShardingOptimizer):
            if mesh is not None or options is not None:
                raise TypeError("ShardingOptimizer(core_optimizer) takes no mesh or options")
            self._opt = graph
        else:
            if mesh is None:
                raise TypeError("ShardingOptimizer(graph, mesh, options=None): mesh is missing")
            if isinstance(graph, (str, os.PathLike)):
                graph = core.Graph.load(os.fspath(graph))
            self._opt = core.ShardingOptimizer(graph, mesh, options)
        self._nodes: list[Node] | None = None
        self._by_name: dict[str, Node] | None = None

    # --- the C++ object --------------------------------------------------------------------
    @property
    def core(self) -> core.ShardingOptimizer:
        """The C++ optimizer every call is delegated to."""
        return self._opt

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined here: solution, graph, mesh, options,
        # constraints, get_placements, summary_json, placements_json, render_report_html, ...
        if name.startswith("__") or name == "_opt":
            raise AttributeError(name)
        return getattr(self._opt, name)

    def __repr__(self) -> str:
        return repr(self._opt)

    # --- files -----------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike) -> "ShardingOptimizer":
        """An optimizer from a state file (`save`): no model, no torch, no strategy generation."""
        return cls(core.ShardingOptimizer.load(os.fspath(path)))

    @classmethod
    def load_replay(cls, path: str | os.PathLike) -> "ShardingOptimizer":
        """An optimizer regenerated from a replay file (`save_replay`) by the current code."""
        return cls(core.ShardingOptimizer.load_replay(os.fspath(path)))

    def save(self, path: str | os.PathLike) -> None:
        """Writes the state file (graph, mesh, options, constraints, problem, solution)."""
        self._opt.save(os.fspath(path))

    def save_replay(self, path: str | os.PathLike) -> None:
        """Writes the replay file (the optimizer's inputs only)."""
        self._opt.save_replay(os.fspath(path))

    def save_placements(self, path: str | os.PathLike) -> None:
        """Writes the solution's placements JSON (AutoParallel's save_placements schema)."""
        self._opt.save_placements(os.fspath(path))

    def load_placements(self, path: str | os.PathLike) -> core.Plan:
        """The plan of a saved placements file, evaluated without solving (it becomes the
        solution); checks the mesh and that every node matches one strategy."""
        return self._opt.load_placements(os.fspath(path))

    # --- nodes -----------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """Every graph node in graph (topological) order, as `Node` objects."""
        if self._nodes is None:
            self._nodes = [
                Node(index=i, name=d["name"], kind=d["kind"], target=d["op"] or d["kind"],
                     phase=d["phase"], module_path=d["module_path"], source=d["source"],
                     inputs=tuple(d["inputs"]), shapes=tuple(tuple(s) for s in d["shapes"]),
                     dtypes=tuple(d["dtypes"]))
                for i, d in enumerate(self._opt.node_table())]
        return self._nodes

    @property
    def node_map(self) -> dict[Node, int]:
        """Node -> its index in `nodes`."""
        return {n: n.index for n in self.nodes}

    def node(self, name: str) -> Node:
        """The Node of a name (KeyError naming it when the graph has none)."""
        if self._by_name is None:
            self._by_name = {n.name: n for n in self.nodes}
        hit = self._by_name.get(name)
        if hit is None:
            raise KeyError(f"no node named {name!r} in graph {self._opt.graph.name}")
        return hit

    # --- constraints -----------------------------------------------------------------------
    def add_input_constraints(self, constraints: Sequence[Any]) -> list[str]:
        """Placements of the graph's inputs in order (DTensor tuples or strings; None leaves
        one free); returns the constraint names."""
        return self._opt.add_input_constraints(_pl.to_strings(constraints))

    def add_output_constraints(self, constraints: Sequence[Any]) -> list[str]:
        """Placements of the tensors the step returns, in order (None leaves one free)."""
        return self._opt.add_output_constraints(_pl.to_strings(constraints))

    def add_parameter_memory_constraint(self, low: float | None = None,
                                        high: float | None = None) -> str:
        """Parameter memory per device within [low, high] x the unsharded parameter bytes;
        defaults low=0, high=1/number of devices (fully sharded, as FSDP)."""
        lo = 0.0 if low is None else float(low)
        hi = 1.0 / self._opt.mesh.num_devices if high is None else float(high)
        return self._opt.add_parameter_memory_constraint(lo, hi)

    def add_node_constraint(self, node: Any, placement: Any = None,
                            constraint_name: str | None = None, *,
                            inputs: Sequence[Any] | None = None) -> list[str]:
        """Pins a node's output placements; returns the names of the constraints added.

        node: a Node (or FX node), or a node name.  placement: a tuple of DTensor placements
        (one per mesh dim) or a string ("S(0)R"); None pins the node's strategy in the current
        solution (output and inputs).  constraint_name names the constraint ("pin:NODE" by
        default).  inputs (autoshard's): placements of the node's inputs as well.
        """
        name = _node_name(node)
        if placement is None:
            chosen = self._opt.get_placements().get(name) if self._opt.solution else None
            if chosen is None:
                raise ValueError(f"add_node_constraint({name!r}): placement=None pins the current "
                                 "placement, but there is no solution placing this node")
            outs, ins = chosen["outputs"], chosen["inputs"]
            placement, inputs = outs[0], ins if inputs is None else inputs
        spec_inputs = None if inputs is None else _pl.to_strings(inputs)
        return self._opt.add_node_constraint(name, _spec(placement), spec_inputs, constraint_name)

    def remove_constraints(self, names: str | Iterable[str]) -> None:
        """Removes constraints by name (a name or a list; an unknown one: RuntimeError, and
        then none is removed)."""
        self._opt.remove_constraints([names] if isinstance(names, str) else list(names))

    # --- solving ---------------------------------------------------------------------------
    def get_solution(self, verbose: bool = False) -> core.Plan:
        """Builds (if needed) and solves; the plan is kept as `solution`."""
        plan = self._opt.get_solution()
        if verbose:
            print(self._opt.summary_json(plan))
        return plan

    def fit_suggestions(self, plan: Any = None) -> list[str]:
        """What would make an infeasible plan (default: the last solution) feasible: the CLI's
        "to fit, ..." remedies, one a line; empty for a plan."""
        plan = plan if plan is not None else self._opt.solution
        return [] if plan is None else list(self._opt.fit_suggestions(plan))

    def resolve(self, verbose: bool = False) -> core.Plan:
        """Solves again under the current constraints, warm-started from the last solution."""
        plan = self._opt.resolve()
        if verbose:
            print(self._opt.summary_json(plan))
        return plan

    def get_strategy(self, node: Any) -> dict[str, list[str]]:
        """The node's placements in the solution: {"outputs": [...], "inputs": [...]}."""
        name = _node_name(node)
        placed = self._opt.get_placements()
        if name not in placed:
            raise KeyError(f"node {name!r} has no placement in the solution")
        return placed[name]

    def as_plan(self, solution: Any) -> core.Plan:
        """A Plan from a Plan, optimize_placement()'s dict or a placements.json document
        (evaluated without solving; the current solution is kept)."""
        if isinstance(solution, core.Plan):
            return solution
        if isinstance(solution, Mapping):
            doc = solution if "placements" in solution else placements_document(
                solution, self._opt.mesh.shape, self._opt.mesh.dim_names)
            return self._opt.plan_from_placements(json.dumps(doc), "<solution>")
        raise TypeError(f"expected a Plan or a placements dict, got {type(solution).__name__}")

    def diff_solutions(self, solution_a: Any, solution_b: Any, max_nodes: int = 0) -> str:
        """What changed from solution a to b, by layer (text).  Each is a Plan
        (get_solution, resolve, load_placements) or optimize_placement()'s dict."""
        return self._opt.diff_solutions(self.as_plan(solution_a), self.as_plan(solution_b),
                                        max_nodes)

    # --- inspection ------------------------------------------------------------------------
    def print_costs_for_node(self, node: Any, arg: int | None = 0, **kwargs: Any) -> None:
        """Prints the node's strategies with their costs, then the resharding matrix of input
        `arg` (-1: a parameter's gradient agreement; None: every input's).  A node without
        inputs (a parameter, an input) shows what it has.  kwargs: `max_matrix` (rows and
        columns shown, 16); AutoParallel's table-format options are accepted and ignored."""
        name = _node_name(node)
        if arg == 0 and not self.node(name).inputs:
            arg = None
        self._opt.print_costs_for_node(name, arg, int(kwargs.get("max_matrix", 16)))

    def explain_placement(self, target_placement: Any, start_node: Any = None,
                          max_nodes: int | None = None) -> str:
        """Walks the planned nodes in topological order (from start_node, at most max_nodes)
        and reports, per node, whether its output can take `target_placement` (DTensor tuple
        or string) and what its cheapest such strategy costs against the chosen one (compute
        plus redistribution on its inputs, µs).  Returns the table as text.

        autoshard's own question "why not this placement for this node?" (solve with the
        node pinned, report the step-time difference by layer) is
        `explain_placement(node, placement)` with a node (name) first.
        """
        if self._is_node_name(target_placement) and start_node is not None and \
                not self._is_node_name(start_node):
            return self._opt.explain_placement(_node_name(target_placement), _spec(start_node))
        spec = _spec(target_placement)
        start = None if start_node is None else _node_name(start_node)
        rows = self._opt.explain_target(spec, start, int(max_nodes or 0))
        return format_explain_rows(spec, rows)

    def _is_node_name(self, x: Any) -> bool:
        if isinstance(x, Node):
            return True
        if not isinstance(x, str):
            return False
        try:
            core.normalize_placements(x)
            return False
        except ValueError:
            try:
                self.node(x)
                return True
            except KeyError:
                return False

    def get_json(self, plan: core.Plan | None = None) -> PlanJson:
        """plan.json as a dict (AutoParallel's get_json fields plus autoshard's) for the
        solution, or for `plan`; needs a solved optimizer."""
        opt = self._opt
        data = PlanJson(json.loads(opt.get_json(plan)))
        data._render = (lambda: opt.render_report_html(plan)) if plan is not None else \
            _solution_renderer(opt)
        return data


def _solution_renderer(opt: core.ShardingOptimizer) -> Callable[[], str]:
    """Renders the report of the solution as it is now (kept for get_json's dict)."""
    solution = opt.solution
    return lambda: opt.render_report_html(solution)


def format_explain_rows(spec: str, rows: list[dict]) -> str:
    """The explain_placement table: one line per node."""
    def us(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [f"target placement {spec}: {sum(r['available'] for r in rows)} of {len(rows)} nodes "
             "can take it (cost: compute + input redistribution, us)",
             f"{'node':<32} {'op':<22} {'chosen':<14} {'chosen us':>11} {'target us':>11} "
             f"{'delta us':>11}"]
    for r in rows:
        mark = "" if r["available"] else "  (not available)"
        lines.append(f"{r['node']:<32} {r['op']:<22} {r['chosen']:<14} {us(r['chosen_us']):>11} "
                     f"{us(r['target_us']):>11} {us(r['delta_us']):>11}{mark}")
    return "\n".join(lines) + "\n"
