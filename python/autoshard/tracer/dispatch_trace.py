"""A fast ATen-level tracer: one TorchDispatchMode that records every op run on meta tensors.

`make_fx` builds the same graph (it also intercepts ops at the Python dispatch key, below
autograd), but on PyTorch 2.x it costs ~1-2 ms per op: every value gets a FakeTensor
snapshot, which creates a FakeTensorMode (and a Python stack trace) per node.  Here the ops
run eagerly on meta tensors -- C++ shape functions, no data -- and the mode only appends a
node per op, so a 9,000-op LLaMA-3 8B training step records in a few seconds.

Repeated layers run the same ops on the same shapes, so the output metadata of functional
ops (no aliasing, no mutation in the schema) is memoised by (op, input shapes, strides,
dtypes, other arguments): a hit creates the outputs with `empty_strided` instead of running
the op's (often Python) meta kernel.  Views and in-place ops always run, so aliasing and
autograd's view tracking stay exact.

The result is a module with a `torch.fx.Graph` (`.graph`) and the make_fx conventions the exporter
relies on: placeholders in argument order, `call_function` nodes whose targets are
OpOverloads, `operator.getitem` nodes for the members of tuple/list results, `get_attr`
nodes for tensors that no recorded op produced (constants), and one output node.  In-place
ops rebind their tensor to the new node, as in make_fx.  tests/python/test_trace.py checks
that both tracers export the same graph.

Every node also gets its output metadata as the op produced it, `node.meta[OUT_META]` (see
`output_metas`), so that the exporter does not run the graph a second time to learn shapes.

The recording itself is a plain list of `TraceNode`s (op, target, name, args, kwargs, meta:
what an FX node holds, without FX's linked list, users maps and argument checks); the
`torch.fx.Graph` is built from it the first time `.graph` is read (`TracedRoot`).  Planning
needs only the exporter, which reads the list directly: on LLaMA-3 8B building the FX nodes
was a third of the trace (docs/benchmarks.md, "Issue 24, item 4").  Names are given by FX's
own namespace with the candidates FX would use, so the lazily built graph has the same node
names as the list (and as an FX graph recorded directly).
"""
from __future__ import annotations

import operator

import torch
import torch.fx
from torch.fx import graph as _fx_graph
from torch.fx.graph import _Namespace
from torch.utils._python_dispatch import TorchDispatchMode


OUT_META = "autoshard_out"  #: node.meta key of the recorded output metadata
OUT_SEQUENCE = "autoshard_seq"  #: node.meta key, True on ops that returned a tuple or list


def output_metas(val):
    """An op's result -> list of (shape, dtype) / None per output, or ("nontensor", val).

    Non-tensor members of a tuple (e.g. the int max_q / max_k that 2.x's
    _scaled_dot_product_flash_attention returns) count as not-produced outputs, so output
    indices keep matching the schema."""
    if isinstance(val, torch.Tensor):
        return [(list(val.shape), val.dtype)]
    if isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val):
        return [(list(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None for v in val]
    if isinstance(val, (tuple, list)) and all(v is None for v in val) and val:
        return [None for _ in val]
    return ("nontensor", val)


_META = torch.device("meta")
_CACHEABLE: dict = {}
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
            torch.memory_format)


def _cacheable(func) -> bool:
    """Functional op returning plain tensors: its outputs' metadata depend only on its inputs'."""
    ok = _CACHEABLE.get(func)
    if ok is None:
        schema = func._schema
        ok = (all(a.alias_info is None for a in schema.arguments)
              and all(r.alias_info is None and str(r.type) == "Tensor" for r in schema.returns)
              and len(schema.returns) > 0 and not schema.is_mutable)
        _CACHEABLE[func] = ok
    return ok


def _key(a):
    """A hashable key of an argument's metadata.  Tensors count by shape, strides, dtype and
    whether they are on meta (entries are only stored for all-meta calls, so the device type
    beyond that never decides a hit; `is_meta` is cheaper than building `a.device`)."""
    if isinstance(a, torch.Tensor):
        return (a.shape, a.stride(), a.dtype, a.is_meta)
    if isinstance(a, (list, tuple)):
        return _seq_key(a)
    if isinstance(a, _SCALARS):
        return (type(a), a)
    raise TypeError  # not memoisable


def _seq_key(seq) -> tuple:
    """_key of a list or tuple, its tensors and scalars keyed in place (one call per op's
    arguments rather than one per argument)."""
    out = []
    for a in seq:
        if isinstance(a, torch.Tensor):
            out.append((a.shape, a.stride(), a.dtype, a.is_meta))
        elif isinstance(a, _SCALARS):
            out.append((type(a), a))
        else:
            out.append(_key(a))
    return tuple(out)


class _Names:
    """Node names exactly as FX's namespace (`torch.fx.graph._Namespace.create_name`) gives
    them, with a fast path for the candidates it keeps as they are (an op's name: a valid
    identifier with no "_<digits>" suffix, not a Python keyword or builtin), which FX takes
    through two regular expressions each time: name, name_1, name_2, ... in FX's own tables,
    so other candidates still go through FX.  On LLaMA-3 8B's 9,300 nodes FX's create_name
    was ~8 ms of the trace."""

    def __init__(self) -> None:
        self.ns = _Namespace()
        self.used = getattr(self.ns, "_used_names", None)
        self.counts = getattr(self.ns, "_base_count", None)
        self.regex = getattr(_fx_graph, "_name_regex", None)
        self.illegal = getattr(_fx_graph, "_illegal_names", None)
        self.fast = (isinstance(self.used, set) and isinstance(self.counts, dict)
                     and self.regex is not None and isinstance(self.illegal, dict))
        self.plain: dict[str, bool] = {}  # candidate -> FX keeps it as its own base name

    def create(self, candidate: str) -> str:
        """The unique name FX's create_name(candidate, None) would return."""
        plain = self.plain.get(candidate)
        if plain is None:
            m = self.regex.match(candidate) if self.fast else None
            plain = self.plain[candidate] = (m is not None and m.group(2) is None
                                             and self.illegal.get(candidate) is None)
        if not plain:
            return self.ns.create_name(candidate, None)
        used = self.used
        num = self.counts.get(candidate, 0)
        name = candidate
        while name in used:
            num += 1
            name = f"{candidate}_{num}"
        used.add(name)
        self.counts[candidate] = num
        return name


class TraceNode:
    """One recorded node, with the attributes of a `torch.fx.Node` that the exporter reads:
    op ("placeholder", "get_attr", "call_function", "output"), target, name, args and kwargs
    (other TraceNodes where FX has nodes), meta, all_input_nodes."""

    __slots__ = ("op", "target", "name", "args", "kwargs", "meta", "inputs")

    def __init__(self, op: str, target, name: str, args: tuple = (), kwargs: dict | None = None,
                 inputs: list | None = None) -> None:
        self.op = op
        self.target = target
        self.name = name
        self.args = args
        self.kwargs = kwargs if kwargs is not None else {}
        self.meta: dict = {}
        self.inputs = inputs if inputs is not None else []  # tensor arguments, with repeats

    @property
    def all_input_nodes(self) -> list:
        """The distinct nodes among the arguments, in order of first use (as FX's)."""
        return list(dict.fromkeys(self.inputs))

    def __repr__(self) -> str:
        return self.name


class TracedRoot(torch.nn.Module):
    """The recorded step: `trace_nodes` (TraceNodes in execution order) and the constants the
    step read (attributes `_tensor_constant<i>`).  `.graph` is the `torch.fx.Graph` of the
    same nodes (same names, targets, arguments and meta), built on first use;
    `torch.fx.GraphModule(root, root.graph)` makes a runnable module of it."""

    def __init__(self) -> None:
        super().__init__()
        self.trace_nodes: list[TraceNode] = []
        self._fx_graph: torch.fx.Graph | None = None

    @property
    def graph(self) -> torch.fx.Graph:  # type: ignore[override]
        if self._fx_graph is None:
            self._fx_graph = build_fx_graph(self.trace_nodes)
        return self._fx_graph

    @property
    def has_fx_graph(self) -> bool:
        """Whether `.graph` was built (from then on it is the graph the exporter reads)."""
        return self._fx_graph is not None


def build_fx_graph(nodes: list[TraceNode]) -> torch.fx.Graph:
    """The torch.fx.Graph of recorded nodes: one FX node each, with the same name (FX's
    namespace keeps a name that is already unique), target, arguments and a copy of meta."""
    graph = torch.fx.Graph()
    fx: dict = {}

    def to_fx(a):
        if isinstance(a, TraceNode):
            return fx[a]
        if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
            return type(a)(to_fx(x) for x in a)
        return a

    for n in nodes:
        if n.op == "call_function":
            node = _call_node(graph, n.target, to_fx(n.args),
                              {k: to_fx(v) for k, v in n.kwargs.items()}, n.name)
        elif n.op == "output":
            node = graph.output(to_fx(n.args[0]))
        else:
            node = graph.create_node(n.op, n.target, name=n.name)
        if node.name != n.name:  # pragma: no cover - an FX namespace that renames
            raise RuntimeError(f"FX renamed recorded node {n.name!r} to {node.name!r}")
        node.meta = dict(n.meta)
        fx[n] = node
    return graph


class _Recording(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No dynamo-disabling wrapper around __torch_dispatch__ (PyTorch's documented opt-out):
        nothing here is ever compiled, and the wrapper's eval-frame switch on each of ~9,000
        ops was ~5 % of the trace."""
        return False

    def __init__(self, root: TracedRoot, decompositions=None, on_node=None, datadep=None):
        super().__init__()
        self.datadep = datadep  # datadep_ops.DataDependentOps, or None
        self.root = root
        self.nodes = root.trace_nodes
        self.names = _Names()  # FX's: the names an FX graph would give the same nodes
        self.on_node = on_node
        self.decompositions = decompositions or {}
        self.env: dict[int, TraceNode] = {}
        self.keep: list = []  # every tensor seen stays alive, so id() is never reused
        self.n_constants = 0
        self.memo: dict = {}
        self.hits = 0
        self.metas: dict = {}  # (shape, dtype) -> the shared OUT_META of one such tensor
        # id(func) -> (func, cacheable, name candidate): OpOverload hashes in Python (a call per
        # dict lookup), an int key does not; the entry keeps func alive, so its id stays its own.
        self.op_info: dict = {}

    def new_node(self, op: str, target, candidate: str, args: tuple = (),
                 kwargs: dict | None = None, inputs: list | None = None) -> TraceNode:
        """Appends a node named as FX names `candidate` (what create_node would take)."""
        node = TraceNode(op, target, self.names.create(candidate), args, kwargs, inputs)
        self.nodes.append(node)
        if self.on_node is not None:
            self.on_node(node)
        return node

    def bind(self, t: torch.Tensor, node: TraceNode) -> None:
        """Makes `node` the producer of tensor t and records t's metadata on it."""
        self.env[id(t)] = node
        self.keep.append(t)
        node.meta[OUT_META] = self.tensor_meta(t)

    def tensor_meta(self, t: torch.Tensor) -> list:
        """output_metas(t), one object shared by all nodes whose tensor has t's shape and
        dtype (read it, never change it): repeated layers make the same few hundred, and
        each node's own three containers were a third of the objects a trace leaves for
        Python's collector to walk and free (docs/benchmarks.md, "Issue 24, item 4")."""
        shape = t.shape
        key = (shape, t.dtype)
        m = self.metas.get(key)
        if m is None:
            m = self.metas[key] = [(list(shape), t.dtype)]
        return m

    def _arg(self, a, inputs: list):
        if isinstance(a, torch.Tensor):
            node = self.env.get(id(a))
            if node is None:  # a tensor no recorded op made: a constant of the step
                name = f"_tensor_constant{self.n_constants}"
                self.n_constants += 1
                setattr(self.root, name, a)
                node = self.new_node("get_attr", name, name)
                self.bind(a, node)
            inputs.append(node)
            return node
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x, inputs) for x in a)
        return a

    def _args(self, args: tuple, inputs: list) -> tuple:
        """tuple(self._arg(a, inputs) for a in args), with the recorded tensors (most
        arguments) looked up in place rather than through a call each."""
        out = []
        env = self.env
        for a in args:
            if isinstance(a, torch.Tensor):
                node = env.get(id(a))
                if node is None:
                    out.append(self._arg(a, inputs))  # a constant: recorded by _arg
                else:
                    inputs.append(node)
                    out.append(node)
            elif isinstance(a, (list, tuple)):
                out.append(self._arg(a, inputs))
            else:
                out.append(a)
        return tuple(out)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.decompositions:
            decomp = self.decompositions.get(func)
            if decomp is not None:
                with self:
                    r = decomp(*args, **kwargs)
                if r is not NotImplemented:
                    return r
        info = self.op_info.get(id(func))
        if info is None:
            special = self.datadep.handler(func) if self.datadep is not None else None
            info = self.op_info[id(func)] = (func, _cacheable(func) and special is None,
                                             func.overloadpacket.__name__, special)
        if info[3] is not None:
            out = info[3](func, args, kwargs)
            if not isinstance(out, (torch.Tensor, tuple, list)):
                return out  # a value read in Python (.item()): decided, nothing to record
        else:
            out = self._run(func, args, kwargs, info[1])
        inputs: list = []
        node = self.new_node("call_function", func, info[2],
                             self._args(args, inputs),
                             {k: self._arg(v, inputs) for k, v in kwargs.items()} if kwargs
                             else {}, inputs)
        node.meta[OUT_META] = (self.tensor_meta(out) if isinstance(out, torch.Tensor)
                               else output_metas(out))
        node.meta[OUT_SEQUENCE] = isinstance(out, (tuple, list))
        if isinstance(out, torch.Tensor):  # bind() without its metadata (recorded above)
            self.env[id(out)] = node
            self.keep.append(out)
        elif isinstance(out, (tuple, list)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self.bind(t, self.new_node("call_function", operator.getitem, "getitem",
                                               (node, i), None, [node]))
        if self.datadep is not None and self.datadep.known:
            self.datadep.propagate(func, args, kwargs, out)
        return out

    def _run(self, func, args, kwargs, cacheable: bool):
        if not cacheable:
            return func(*args, **kwargs)
        try:
            key = (id(func), _seq_key(args),
                   _seq_key(tuple(sorted(kwargs.items()))) if kwargs else ())
            metas = self.memo.get(key)
        except TypeError:
            return func(*args, **kwargs)
        if metas is not None:
            self.hits += 1
            outs = [torch.empty_strided(shape, stride, dtype=dtype, device=_META)
                    for shape, stride, dtype in metas]
            return outs[0] if len(outs) == 1 and not isinstance(metas, tuple) else tuple(outs)
        out = func(*args, **kwargs)
        if not all(t.device.type == "meta" for t in _tensor_args((args, kwargs.values()))):
            return out
        if isinstance(out, torch.Tensor):
            self.memo[key] = [(tuple(out.shape), out.stride(), out.dtype)]
        elif isinstance(out, tuple) and all(isinstance(t, torch.Tensor) for t in out):
            self.memo[key] = tuple((tuple(t.shape), t.stride(), t.dtype) for t in out)
        return out


def _call_node(graph: torch.fx.Graph, target, args: tuple, kwargs: dict,
               name: str | None = None) -> torch.fx.Node:
    """graph.create_node("call_function", ...) without its scan of the arguments: recent
    PyTorch walks every call's args and kwargs through pytree looking for raw SymInts (a
    warning for symbolic tracing), a quarter of the FX graph's construction on LLaMA-3 8B;
    shapes are concrete here.  The node is created without arguments, then given them
    (Node.args and Node.kwargs setters: the same users bookkeeping)."""
    node = graph.create_node("call_function", target, None, None, name=name)
    if args:
        node.args = args
    if kwargs:
        node.kwargs = kwargs
    return node


def _tensor_args(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple, type({}.values()))):
            yield from _tensor_args(a)


def dispatch_trace(fn, flat_args: list, decomposition_table=None, on_node=None,
                   datadep=None) -> TracedRoot:
    """Runs fn(flat_args) (a list of meta tensors -> a list of tensors) under the recording
    mode; returns the recorded nodes and constants (TracedRoot; its `.graph` is the FX graph).
    on_node(node) is called on each new node (the tracer stamps phase, module and source).
    datadep: a datadep_ops.DataDependentOps answering the ops meta tensors cannot run."""
    root = TracedRoot()
    mode = _Recording(root, decomposition_table, on_node, datadep)
    for i, t in enumerate(flat_args):
        mode.bind(t, mode.new_node("placeholder", f"arg{i}", f"arg{i}"))
    with mode:
        result = fn(flat_args)
    outs = [mode.env[id(t)] if isinstance(t, torch.Tensor) else t for t in result]
    mode.new_node("output", "output", "output", (outs,), None,
                  [o for o in outs if isinstance(o, TraceNode)])
    return root
