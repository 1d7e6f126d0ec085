"""A fast ATen-level tracer: one TorchDispatchMode that records every op run on meta tensors.

`make_fx` builds the same graph (it also intercepts ops at the Python dispatch key, below
autograd), but on PyTorch 2.x it costs ~1-2 ms per op: every value gets a FakeTensor
snapshot, which creates a FakeTensorMode (and a Python stack trace) per node.  Here the ops
run eagerly on meta tensors -- C++ shape functions, no data -- and the mode only appends an FX
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
"""
from __future__ import annotations

import operator

import torch
import torch.fx
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
        return tuple([_key(x) for x in a])
    if isinstance(a, _SCALARS):
        return (type(a), a)
    raise TypeError  # not memoisable


class _Recording(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No dynamo-disabling wrapper around __torch_dispatch__ (PyTorch's documented opt-out):
        nothing here is ever compiled, and the wrapper's eval-frame switch on each of ~9,000
        ops was ~5 % of the trace."""
        return False

    def __init__(self, graph: torch.fx.Graph, root: torch.nn.Module, decompositions=None):
        super().__init__()
        self.graph = graph
        self.root = root
        self.decompositions = decompositions or {}
        self.env: dict[int, torch.fx.Node] = {}
        self.keep: list = []  # every tensor seen stays alive, so id() is never reused
        self.n_constants = 0
        self.memo: dict = {}
        self.hits = 0

    def bind(self, t: torch.Tensor, node: torch.fx.Node) -> None:
        self.env[id(t)] = node
        self.keep.append(t)
        node.meta[OUT_META] = [(list(t.shape), t.dtype)]

    def _arg(self, a):
        if isinstance(a, torch.Tensor):
            node = self.env.get(id(a))
            if node is None:  # a tensor no recorded op made: a constant of the step
                name = f"_tensor_constant{self.n_constants}"
                self.n_constants += 1
                setattr(self.root, name, a)
                node = self.graph.create_node("get_attr", name)
                self.bind(a, node)
            return node
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        return a

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomp = self.decompositions.get(func)
        if decomp is not None:
            with self:
                r = decomp(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = self._run(func, args, kwargs)
        node = _call_node(self.graph, func, tuple(self._arg(a) for a in args),
                          {k: self._arg(v) for k, v in kwargs.items()},
                          func.overloadpacket.__name__)
        node.meta[OUT_META] = output_metas(out)
        node.meta[OUT_SEQUENCE] = isinstance(out, (tuple, list))
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self.bind(t, _call_node(self.graph, operator.getitem, (node, i), {}))
        return out


    def _run(self, func, args, kwargs):
        if not _cacheable(func):
            return func(*args, **kwargs)
        try:
            key = (func, _key(args), _key(tuple(sorted(kwargs.items()))))
            metas = self.memo.get(key)
        except TypeError:
            return func(*args, **kwargs)
        if metas is not None:
            self.hits += 1
            outs = [torch.empty_strided(shape, stride, dtype=dtype, device="meta")
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
    warning for symbolic tracing), a quarter of this tracer's time on LLaMA-3 8B; shapes are
    concrete here.  The node is created without arguments, then given them (Node.args and
    Node.kwargs setters: the same users bookkeeping)."""
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


def dispatch_trace(fn, flat_args: list, decomposition_table=None) -> torch.nn.Module:
    """Runs fn(flat_args) (a list of meta tensors -> a list of tensors) under the recording
    mode; returns a module holding the recorded graph (`.graph`) and its constants."""
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    mode = _Recording(graph, root, decomposition_table)
    for i, t in enumerate(flat_args):
        mode.bind(t, graph.create_node("placeholder", f"arg{i}"))
    with mode:
        result = fn(flat_args)
    graph.output([mode.env[id(t)] if isinstance(t, torch.Tensor) else t for t in result])
    # The graph and its constants, without GraphModule's Python code generation (seconds on
    # 10k nodes, and nothing here runs the graph): `torch.fx.GraphModule(root, graph)` turns
    # it into a runnable module when wanted.
    root.graph = graph
    return root
