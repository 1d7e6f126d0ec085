"""FX training-step graph -> autoshard graph JSON (format "autoshard-graph", version 1).

Conventions (see docs/tracer.md for the full list):
* nodes are in FX order (topological); names are FX's (unique), except placeholders, which
  take the parameter / buffer / input name;
* `operator.getitem` on multi-output ops is folded away: consumers reference
  {"node": producer, "output": k};
* `op` is the ATen overload name: schema name without "aten::" plus "." + overload unless the
  overload is the default one ("mm", "add.Tensor", "sum.dim_IntList");
* tensor arguments become `inputs` in schema order (tensor lists are flattened in place and
  counted in attrs["<arg>_count"]); other arguments go to `attrs` under their schema names;
* an output that the op did not produce (None, e.g. a masked-off convolution_backward grad)
  is written as {"shape": [0], "dtype": <first real output's dtype>, "none": true}: zero bytes.
"""
from __future__ import annotations

import json
import math
import operator
import os

import torch
import torch.fx

from . import _compat
from .dispatch_trace import OUT_META, OUT_SEQUENCE, TraceNode, output_metas
from .trace import _META_KEY, TracedStep, gc_paused

FORMAT = "autoshard-graph"
VERSION = 1

_OMIT_ARGS = {"device", "layout", "memory_format", "pin_memory", "generator"}


class ExportError(ValueError):
    """A traced step that cannot be written as graph JSON (the message names the node)."""


_NODES = (torch.fx.Node, TraceNode)  #: what a node argument can be


def graph_nodes(gm) -> list:
    """The nodes to export, in order: the dispatch recorder's list (its TraceNodes carry what
    the FX nodes would) until the FX graph has been built from it, then the FX graph's."""
    nodes = getattr(gm, "trace_nodes", None)
    if nodes is not None and not gm.has_fx_graph:
        return nodes
    return list(gm.graph.nodes)


# --- output metadata -----------------------------------------------------------------------
def _node_metas(traced: TracedStep):
    """(node -> metas, tuple nodes) as the tracer recorded them (dispatch_trace.OUT_META), or
    from re-running the graph when some node has none (make_fx)."""
    results: dict = {}
    sequences: set = set()
    for node in graph_nodes(traced.gm):
        if node.op == "output":
            break
        m = node.meta.get(OUT_META)
        if m is None:
            return _run_meta(traced)
        results[node] = m
        if node.meta.get(OUT_SEQUENCE):
            sequences.add(node)
    return results, sequences


def _run_meta(traced: TracedStep):
    """Runs the graph on the meta tensors it was traced with -> (node -> metas, tuple nodes).

    PyTorch 1.13 stores no metadata on multi-output nodes (only `tensor_meta` on their getitem
    users), so instead of relying on node.meta we re-run every node on meta tensors (cheap: no
    storage, no arithmetic).  Values are freed once their last user has run.
    """
    gm = traced.gm
    env: dict = {}
    results: dict = {}
    sequences: set = set()
    args_it = iter(traced.flat_args)
    last_use: dict = {}
    for node in gm.graph.nodes:
        for inp in node.all_input_nodes:
            last_use[inp] = node
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = next(args_it)
        elif node.op == "get_attr":
            val = _getattr_path(gm, node.target)
        elif node.op == "call_function":
            a = torch.fx.node.map_arg(node.args, lambda n: env[n])
            k = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
            val = node.target(*a, **k)
        elif node.op == "output":
            break
        else:
            raise ExportError(f"node {node.name}: unsupported FX op {node.op!r}")
        env[node] = val
        results[node] = _metas(val)
        if isinstance(val, (tuple, list)):
            sequences.add(node)
        for inp in node.all_input_nodes:
            if last_use.get(inp) is node:
                env.pop(inp, None)
    return results, sequences


def _getattr_path(obj, target: str):
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


_metas = output_metas


def _constant(m):
    """(True, value) when a node's result is a plain number (int/float/bool), else (False, _)."""
    if isinstance(m, tuple) and m and m[0] == "nontensor":
        v = m[1]
        if isinstance(v, (bool, int, float)) or (hasattr(v, "__int__") and not
                                                 isinstance(v, (tuple, list, dict))):
            try:
                return True, v if isinstance(v, (bool, int, float)) else int(v)
            except (TypeError, ValueError):
                return False, None
    return False, None


def _metas_from_node_meta(node):
    """Fallback when re-running fails: node.meta['val'] (2.x) or 'tensor_meta'."""
    val = node.meta.get("val")
    if val is not None:
        return _metas(val)
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return [(list(tm.shape), tm.dtype)]
    return None


def _dtype(dt, node_name: str) -> str:
    name = _compat.dtype_name(dt)
    if name is None:
        raise ExportError(f"node {node_name}: dtype {dt} has no autoshard name "
                          "(supported: f32, bf16, f16, f8, i64, i32, bool, c64, c128)")
    return name


def _out_json(metas, node_name: str) -> list:
    """The "outputs" of a node from its recorded metas; node_name is for error messages."""
    if len(metas) == 1 and metas[0] is not None:  # the common case, without the search below
        shape, dt = metas[0]
        return [{"shape": list(map(int, shape)), "dtype": _compat.dtype_name(dt)
                 or _dtype(dt, node_name)}]
    first = next((m for m in metas if m is not None), None)
    outs = []
    for m in metas:
        if m is None:
            dt = _dtype(first[1], node_name) if first else "f32"
            outs.append({"shape": [0], "dtype": dt, "none": True})
        else:
            outs.append({"shape": [int(s) for s in m[0]], "dtype": _dtype(m[1], node_name)})
    return outs


# --- attributes ----------------------------------------------------------------------------
def _float(v: float):
    # JSON cannot spell inf/nan: docs/graph-format.md uses {"float": "inf" | "-inf" | "nan"}.
    if math.isnan(v):
        return {"float": "nan"}
    if math.isinf(v):
        return {"float": "inf" if v > 0 else "-inf"}
    return v


def _attr(value):
    """Python arg -> JSON attr value, or raises _Skip."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, torch.dtype):  # attrs may name any dtype; tensors may not
        return _compat.dtype_name(value) or str(value).replace("torch.", "")
    if isinstance(value, (list, tuple, torch.Size)):
        if all(isinstance(v, (bool, int)) for v in value):
            return [int(v) for v in value]  # bool lists (output_mask) become 0/1
        raise _Skip
    raise _Skip


_PLAIN_ATTRS = (bool, int, str)  #: exact types _attr returns unchanged


class _Skip(Exception):
    pass


_OP_NAMES: dict = {}


def op_name(target) -> str:
    """"add.Tensor", "mm", "sum.dim_IntList"; non-aten namespaces keep their "ns::" prefix."""
    hit = _OP_NAMES.get(id(target))  # OpOverload hashes in Python; id() keys do not
    if hit is None or hit[0] is not target:  # the entry keeps target alive: its id is its own
        hit = _OP_NAMES[id(target)] = (target, _op_name(target))
    return hit[1]


def _op_name(target) -> str:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    name = schema.name
    if name.startswith("aten::"):
        name = name[len("aten::"):]
    if schema.overload_name:
        name += "." + schema.overload_name
    return name


_SCHEMA_ARGS: dict = {}


def _schema_args(target):
    """(name, kwarg_only, has_default, default) per schema argument of an op, cached per op:
    reading a schema from C++ costs more than the whole rest of one node's export."""
    hit = _SCHEMA_ARGS.get(id(target))  # keyed as _OP_NAMES
    if hit is None or hit[0] is not target:
        hit = _SCHEMA_ARGS[id(target)] = (target, tuple(
            (a.name, a.kwarg_only, _has_default(a), a.default_value if _has_default(a) else None)
            for a in target._schema.arguments))
    return hit[1]


_OP_FACTS: dict = {}


def _op_facts(target) -> tuple:
    """(op_name, _schema_args or None without a schema) of a call target, cached per target
    (keyed as _OP_NAMES): one lookup per exported node instead of two."""
    hit = _OP_FACTS.get(id(target))
    if hit is None or hit[0] is not target:
        schema = _schema_args(target) if getattr(target, "_schema", None) is not None else None
        hit = _OP_FACTS[id(target)] = (target, (op_name(target), schema))
    return hit[1]


def _bind(node, schema_args: tuple | None = None) -> list:
    """(arg name, value) pairs in schema order; positional beyond the schema get arg{i}.

    Arguments the call left out take their schema default (so `add.Tensor` always has
    `alpha`, `gelu` always has `approximate`), sparing consumers a table of ATen defaults.
    schema_args: _schema_args(node.target) when the caller has it."""
    if schema_args is None:
        if getattr(node.target, "_schema", None) is None:
            return [(f"arg{i}", a) for i, a in enumerate(node.args)] + list(node.kwargs.items())
        schema_args = _schema_args(node.target)
    args, kwargs = node.args, node.kwargs
    pairs = []
    for i, (name, kwarg_only, has_default, default) in enumerate(schema_args):
        if i < len(args) and not kwarg_only:
            pairs.append((name, args[i]))
        elif name in kwargs:
            pairs.append((name, kwargs[name]))
        elif has_default:
            pairs.append((name, default))
    return pairs


def _has_default(arg) -> bool:
    try:
        return bool(arg.has_default_value())
    except Exception:  # pragma: no cover - binding differences across releases
        return False


# --- conversion ----------------------------------------------------------------------------
def _dead_nodes(nodes: list) -> set:
    """call_function nodes whose results nobody uses (e.g. the empty uint8 "reserve" tensors
    that 1.13's batch-norm emits), transitively.  In-place ops ("add_") are kept: they have
    side effects (buffer updates such as num_batches_tracked).  One backward pass: a node is
    live when a live node uses it."""
    dead: set = set()
    live: set = set()
    for node in reversed(nodes):
        if node.op in ("call_function", "get_attr") and node not in live and not (
                node.op == "call_function" and _is_inplace(node.target)):
            dead.add(node)
            continue
        # A TraceNode's tensor arguments (repeats are harmless in a set) spare building
        # all_input_nodes' de-duplicated list per node.
        live.update(node.inputs if type(node) is TraceNode else node.all_input_nodes)
    return dead


def _is_inplace(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and schema.name.endswith("_") and not schema.name.endswith("__")


def to_graph_dict(traced: TracedStep, name: str = "model", *, keep_dead: bool = False) -> dict:
    """Builds the graph JSON object from a traced step (dead nodes dropped unless keep_dead)."""
    with gc_paused():
        return _to_graph_dict(traced, name, keep_dead)


def _to_graph_dict(traced: TracedStep, name: str, keep_dead: bool) -> dict:
    return _GraphWriter(traced, keep_dead).write(name)


class _GraphWriter:
    """Writes one traced step's FX graph as the graph format's node list.

    One pass over the FX nodes in order; the maps below name what the pass has written so far,
    since every node's inputs refer to nodes written before it."""

    def __init__(self, traced: TracedStep, keep_dead: bool) -> None:
        self.traced = traced
        self.fx_nodes = graph_nodes(traced.gm)
        self.metas, self.sequences = _node_metas(traced)
        self.dead = set() if keep_dead else _dead_nodes(self.fx_nodes)
        self.nodes_out: list[dict] = []
        self.out_name: dict = {}    # fx node -> autoshard name
        self.single: dict = {}      # fx node -> its name, for nodes with one output (most refs)
        self.folded: dict = {}      # getitem fx node -> (producer fx node, index)
        self.n_outputs: dict = {}   # fx node -> number of outputs written
        self.used_names: set[str] = set()
        self.mod_of: dict = {}      # fx node -> module path (back-propagated for backward)
        self.phase_of: dict = {}
        self.consts: dict = {}      # fx node -> plain number it evaluates to
        self.attr_nodes: dict = {}  # get_attr target -> exported buffer name
        self.grad_refs: list = []
        self.loss_ref = None

    def unique(self, base: str) -> str:
        n, i = base, 1
        while n in self.used_names:
            n, i = f"{base}_{i}", i + 1
        self.used_names.add(n)
        return n

    def ref(self, fx_node):
        name = self.single.get(fx_node)
        if name is not None:
            return name
        if fx_node in self.folded:
            prod, k = self.folded[fx_node]
            return {"node": self.out_name[prod], "output": k}
        if fx_node not in self.out_name:
            raise ExportError(f"node {fx_node.name} is used but was not exported")
        if self.n_outputs.get(fx_node, 1) != 1:
            raise ExportError(f"multi-output node {fx_node.name} used as a single tensor")
        return self.out_name[fx_node]

    def write(self, name: str) -> dict:
        self._name_placeholders()
        for fx_node in self.fx_nodes:
            if fx_node not in self.dead:
                self._visit(fx_node)
        return self._document(name)

    def _name_placeholders(self) -> None:
        # Placeholder names first, so that op names never steal a parameter's name.
        traced = self.traced
        placeholders = [n for n in self.fx_nodes if n.op == "placeholder"]
        if len(placeholders) != len(traced.placeholder_names):
            raise ExportError(f"{len(placeholders)} placeholders for "
                              f"{len(traced.placeholder_names)} flat arguments")
        for fx_node, pname in zip(placeholders, traced.placeholder_names):
            if pname in self.used_names:
                raise ExportError(f"duplicate input/parameter name {pname!r}")
            self.used_names.add(pname)
            self.out_name[fx_node] = self.single[fx_node] = pname

    def _visit(self, fx_node) -> None:
        op = fx_node.op
        if op == "placeholder":
            return self._placeholder(fx_node)
        if op == "output":
            return self._output(fx_node)
        m = self.metas.get(fx_node)
        if type(m) is not list:  # the recorder's metas are lists: tensors, no constant
            if m is None or (isinstance(m, tuple) and m and m[0] == "nontensor"):
                m = _metas_from_node_meta(fx_node) or m
            is_const, cval = _constant(m)
            if is_const and op == "call_function":
                self.consts[fx_node] = cval  # e.g. a SymInt output: consumers get it as attr
                return None
        target = fx_node.target
        if target is operator.getitem and op == "call_function":
            prod, k = fx_node.args
            if prod in self.sequences and prod in self.n_outputs and isinstance(k, int):
                self.folded[fx_node] = (prod, k if k >= 0 else self.n_outputs[prod] + k)
                return None
        if isinstance(m, tuple) and m and m[0] == "nontensor":
            raise ExportError(f"node {fx_node.name} ({target}) produces a non-tensor value "
                              f"{type(m[1]).__name__}; symbolic shapes are not supported")
        if op == "get_attr":
            return self._attr(fx_node, m)
        return self._call(fx_node, m)

    def _placeholder(self, fx_node) -> None:
        traced = self.traced
        pname = self.out_name[fx_node]
        kind = traced.placeholder_kinds[traced.placeholder_names.index(pname)]
        entry = {"name": pname, "kind": kind,
                 "outputs": _out_json(self.metas[fx_node], fx_node.name)}
        if kind in ("parameter", "buffer"):
            entry["module"] = pname.rsplit(".", 1)[0] if "." in pname else ""
            self.mod_of[fx_node] = entry["module"]
        self.nodes_out.append(entry)

    def _output(self, fx_node) -> None:
        flat = [self.ref(a) for a in _flatten(fx_node.args[0]) if isinstance(a, _NODES)]
        self.loss_ref = flat[0]
        self.grad_refs = flat[1:]
        self.nodes_out.append({"name": self.unique("output"), "kind": "output", "inputs": flat})

    def _attr(self, fx_node, m) -> None:
        # A tensor constant captured by the trace; FX makes a node per use: keep one.
        target = fx_node.target
        if target in self.attr_nodes:
            self.out_name[fx_node] = self.single[fx_node] = self.attr_nodes[target]
            return
        self.attr_nodes[target] = self.unique(str(target).replace(".", "_"))
        entry = {"name": self.attr_nodes[target], "kind": "buffer",
                 "outputs": _out_json(m, fx_node.name), "module": ""}
        self.out_name[fx_node] = self.single[fx_node] = entry["name"]
        self.nodes_out.append(entry)

    def _arguments(self, fx_node, schema_args) -> tuple[list, dict]:
        inputs, attrs = [], {}
        single, consts = self.single, self.consts
        for arg_name, value in _bind(fx_node, schema_args):
            if consts:
                value = _resolve_consts(value, consts)
            if isinstance(value, _NODES):
                known = single.get(value)  # ref(value), its common case in place
                inputs.append(known if known is not None else self.ref(value))
            elif isinstance(value, (list, tuple)) and any(isinstance(v, _NODES)
                                                          for v in value):
                present = [i for i, v in enumerate(value) if v is not None]
                inputs.extend(self.ref(value[i]) for i in present)
                attrs[arg_name + "_count"] = len(present)
                if len(present) != len(value):
                    attrs[arg_name + "_positions"] = present
            elif value is None or arg_name in _OMIT_ARGS:
                continue
            elif type(value) in _PLAIN_ATTRS:  # _attr(value) is value itself
                attrs[arg_name] = value
            else:
                try:
                    attrs[arg_name] = _attr(value)
                except _Skip:
                    pass
        return inputs, attrs

    def _call(self, fx_node, m) -> None:
        opname, schema_args = _op_facts(fx_node.target)
        inputs, attrs = self._arguments(fx_node, schema_args)
        nm = self.unique(fx_node.name)
        self.out_name[fx_node] = nm
        self.n_outputs[fx_node] = len(m)
        if len(m) == 1:
            self.single[fx_node] = nm
        info = fx_node.meta.get(_META_KEY) or {}
        phase = info.get("phase", "forward")
        self.phase_of[fx_node] = phase
        module = info.get("module", "")
        if phase == "backward" and not info.get("module_known"):
            module = _backward_module(fx_node, self.mod_of, self.phase_of)
        self.mod_of[fx_node] = module
        entry = {"name": nm, "kind": "op", "op": opname, "phase": phase,
                 "inputs": inputs, "attrs": attrs, "outputs": _out_json(m, fx_node.name),
                 "module": module}
        source = info.get("source")
        if source:
            entry["source"] = source
        self.nodes_out.append(entry)

    def _grad_pairs(self) -> list[dict]:
        traced, grad_refs = self.traced, self.grad_refs
        if len(grad_refs) != len(traced.grad_params):
            raise ExportError(f"{len(grad_refs)} gradients for {len(traced.grad_params)} params")
        # Gradients take their parameter's module (the heuristic may have picked another one);
        # only their entries are indexed, not all ~9,000.
        pairs = [(p, g if isinstance(g, str) else g["node"])
                 for p, g in zip(traced.grad_params, grad_refs)]
        wanted_entries = {n for pair in pairs for n in pair}
        by_name = {e["name"]: e for e in self.nodes_out if e["name"] in wanted_entries}
        for p, gname in pairs:
            if by_name[gname].get("kind") == "op":
                by_name[gname]["module"] = by_name[p]["module"]
        # A gradient that is a multi-output node's output is already a {"node","output"} object.
        return [{"param": p, "grad": g} for p, g in zip(traced.grad_params, grad_refs)]

    def _document(self, name: str) -> dict:
        traced = self.traced
        out = {"format": FORMAT, "version": VERSION, "name": name, "nodes": self.nodes_out,
               "grad_pairs": self._grad_pairs(), "loss": self.loss_ref}
        # Gradient marks (TracedStep.loss_tangent, tangent_nodes): where a runtime feeds
        # gradients.
        marks = [traced.loss_tangent, *traced.tangent_nodes]
        wanted = set(marks)
        fx_by_name = {n.name: n for n in self.fx_nodes if n.name in wanted}
        tangents = [self.out_name[fx_by_name[m]] for m in marks
                    if m is not None and fx_by_name.get(m) in self.out_name]
        if tangents:
            out["tangents"] = tangents
        # What the trace decided instead of the data ("_": the planner's reader skips it), and
        # the module calls the runtime runs as eager islands, which the planner's report names
        # (docs/tracer.md, "Data-dependent code").
        if traced.data_dependent:
            out["_data_dependent"] = [
                {"source": d.source, "module": d.module, "op": d.op, "value": d.value,
                 "why": d.why}
                for d in traced.data_dependent if d.why != "known"]
        if traced.islands:
            out["islands"] = [{"module": c.module, "sources": list(c.sources)}
                               for c in traced.islands]
        return out


def _flatten(value) -> list:
    """Leaves of nested lists / tuples (the output node's argument)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _resolve_consts(value, consts):
    if isinstance(value, _NODES):
        return consts.get(value, value)
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve_consts(v, consts) for v in value)
    return value


def _backward_module(fx_node, mod_of, phase_of) -> str:
    """Best guess of the module a backward op belongs to (1.13 records nothing for them).

    Prefer the most specific module among forward inputs (saved activations, parameters);
    otherwise take the module of the incoming gradient (first backward input).
    """
    fwd, bwd = [], []
    for inp in fx_node.all_input_nodes:
        src = inp
        while src not in mod_of and src.op == "call_function" and src.args \
                and isinstance(src.args[0], _NODES):  # folded getitem -> producer
            src = src.args[0]
        if src not in mod_of:
            continue
        (bwd if phase_of.get(src) == "backward" else fwd).append(mod_of[src])
    fwd = [m for m in fwd if m]
    if fwd:
        return max(fwd, key=lambda m: m.count(".") + 1)
    return next((m for m in bwd if m), "")


def write_graph_json(graph: dict, path: str) -> None:
    """Writes the graph with one node per line (diff-friendly, still plain JSON)."""
    head = {k: v for k, v in graph.items()
            if k not in ("nodes", "grad_pairs", "loss", "tangents", "islands")}
    parts = ["{" + json.dumps(head, allow_nan=False)[1:-1] + ',\n "nodes": [\n']
    parts.append(",\n".join("  " + json.dumps(n, allow_nan=False, separators=(",", ":"))
                            for n in graph["nodes"]))
    parts.append('\n ],\n "grad_pairs": [\n')
    parts.append(",\n".join("  " + json.dumps(g, separators=(",", ":"))
                            for g in graph["grad_pairs"]))
    parts.append('\n ],\n "loss": ' + json.dumps(graph["loss"]))
    if graph.get("tangents"):
        parts.append(',\n "tangents": ' + json.dumps(graph["tangents"]))
    if graph.get("islands"):
        parts.append(',\n "islands": ' + json.dumps(graph["islands"], separators=(",", ":")))
    parts.append("\n}\n")
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(parts))


def export_training_graph(model, example_inputs, loss_fn=None, path=None, *, targets=None,
                          name: str | None = None, train: bool = True,
                          data_dependent=None) -> dict:
    """Traces one training step of `model` and writes autoshard graph JSON to `path`.

    Returns the graph as a dict (also when `path` is None: then nothing is written).
    See trace_training_step for the meaning of example_inputs / targets / loss_fn /
    data_dependent.
    """
    from .trace import trace_training_step
    traced = trace_training_step(model, example_inputs, loss_fn, targets, train=train,
                                 data_dependent=data_dependent)
    graph = to_graph_dict(traced, name or type(model).__name__)
    if path is not None:
        write_graph_json(graph, path)
    return graph
