"""DTensor's strategy candidates for a traced FX node (torch 2.13, fake process group).

For ops in `sharding_propagator.op_strategy_funcs` every tensor argument is offered with every
placement (R, S(d), P(sum) per mesh dim) and the candidate list is read from the strategy
function; for ops registered as single-dim strategies the expansion is taken once per
combination of input placements (its shard placeholders only expand to placements the inputs
carry) and united.  Candidates are (output placements, input placements) strings.
"""
from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy

from autoshard.apply import placements_str


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(t.shape, t.stride(), t.dtype)


def _choices(rank: int, ndim: int) -> list:
    one = [Replicate()] + [Shard(d) for d in range(rank)] + [Partial()]
    return list(itertools.product(one, repeat=ndim))


def _str(spec) -> Any:
    return None if spec is None else placements_str(spec.placements)


def _collect(res) -> set:
    out = set()
    for s in res.strategies:
        o = s.output_specs
        outs = tuple(_str(x) for x in (o if isinstance(o, (tuple, list)) else (o,)))
        ins = tuple(_str(x) for x in (s.input_specs or ()))
        out.add((outs, ins))
    return out


def node_values(gm: torch.fx.GraphModule, flat_args) -> dict:
    """FX node -> the (meta) value it computes, running `gm` on the traced meta arguments."""
    values: dict = {}

    class _Rec(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = super().run_node(n)
            return values[n]

    _Rec(gm).run(*flat_args)
    return values


def dtensor_candidates(node: torch.fx.Node, mesh, values: dict) -> set:
    """DTensor's candidates for `node` (an ATen call_function traced by autoshard.tracer);
    `values` from node_values."""
    sp = DTensor._op_dispatcher.sharding_propagator
    op = node.target

    def val(a):
        return values[a] if isinstance(a, torch.fx.Node) else a

    args = [val(a) for a in node.args]
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if op in sp.op_strategy_funcs:
        wrapped = [OpStrategy([OpSpec(DTensorSpec(mesh, p, tensor_meta=_meta(a)))
                               for p in _choices(a.dim(), mesh.ndim)])
                   if isinstance(a, torch.Tensor) else a for a in args]
        try:
            return _collect(sp.op_strategy_funcs[op](OpSchema(op, tuple(wrapped), {})))
        except RuntimeError:  # e.g. view refuses some input placements: one combination each
            out = set()
            for combo in itertools.product(*[_choices(args[i].dim(), mesh.ndim) for i in tensors]):
                specs = dict(zip(tensors, combo))
                one = [OpStrategy([OpSpec(DTensorSpec(mesh, specs[i], tensor_meta=_meta(a)))])
                       if i in specs else a for i, a in enumerate(args)]
                try:
                    out |= _collect(sp.op_strategy_funcs[op](OpSchema(op, tuple(one), {})))
                except RuntimeError:
                    continue
            return out
    from torch.distributed.tensor._ops.single_dim_strategy import (
        _expand_single_dim_strategy_to_mesh)

    info = sp.op_single_dim_strategy_funcs[op]
    out = set()
    for combo in itertools.product(*[_choices(args[i].dim(), mesh.ndim) for i in tensors]):
        specs = dict(zip(tensors, combo))
        dargs = tuple(DTensorSpec(mesh, specs[i], tensor_meta=_meta(a)) if i in specs else a
                      for i, a in enumerate(args))
        schema = OpSchema(op, dargs, {})
        out_meta = sp._propagate_tensor_meta_non_cached(schema)
        sschema = sp._wrap_with_op_strategy(schema)
        fn = _expand_single_dim_strategy_to_mesh(mesh, sschema, info, out_meta)
        try:
            out |= _collect(fn(op, sschema.args_meta, sschema.kwargs_meta))
        except RuntimeError:  # e.g. an in-place op refuses a Partial input: no candidate
            continue
    return out


def has_dtensor_strategy(op) -> bool:
    sp = DTensor._op_dispatcher.sharding_propagator
    return op in sp.op_strategy_funcs or op in sp.op_single_dim_strategy_funcs


def strategy_funcs() -> dict:
    """DTensor's op -> strategy function table (ops not registered as single-dim)."""
    return DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
