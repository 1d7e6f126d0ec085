"""DTensor sharding strategies for ops the planner shards but PyTorch 2.13's DTensor does not.

The lowering (autoshard.lower) runs the traced step on DTensors once, so every op in a plan
needs a DTensor strategy.  PyTorch registers one for the CUDA flash-attention kernel but not
for its CPU twin, `_scaled_dot_product_flash_attention_for_cpu` (what
`F.scaled_dot_product_attention` runs on CPU), nor its backward.  They are registered here
with the same choices as the planner's `sdpa` rule (src/strategy/nn_rules.cc): per mesh dim,
everything replicated, or every tensor sharded on the batch dim (0), or on the heads dim (1).

Nor has it one for `polar` (abs, angle -> complex), with which rotary embeddings build their
complex table (Meta's reference LLaMA, torchtitan): it gets the planner's `polar` rule
(src/strategy/complex_rules.cc), DTensor's pointwise rows without Partial: everything
replicated, or the output sharded on one dim and each input on the dim broadcast maps it to
(replicated where the input lacks that dim or has it as 1).

Nor for `unsafe_split` / `unsafe_split_with_sizes`, the gates of nn.LSTM's and nn.GRU's
decompositions: they get DTensor's own `split` strategy (the same pieces, only without view
tracking; the planner's view_rules.cc gives them split's rule).

Group norm: DTensor registers `native_group_norm` on the batch dim only, with a scalar
adjuster that rewrites N, C and HxW to the local shape, and nothing for its backward.  The
planner's rule (src/strategy/norm_rules.cc) also splits channels when every shard holds whole
groups, and shards the backward the same two ways; both ops get those rows here, and the
adjuster also rewrites `group` to the groups a shard holds (C_local / (C / group)).  A channel
row is offered only when the group count divides by the mesh's device count, so that every
combination of mesh dims keeps whole groups.

Nor for CTC loss (`_ctc_loss.Tensor`, `_ctc_loss_backward.Tensor`): they get the planner's
rows (src/strategy/nn_rules.cc, ctc_forward / ctc_backward): all replicated, or the batch
split (log_probs and its gradient Shard(1), every other tensor Shard(0)), the latter only for
[N, S] targets and [N] lengths; the int-list overloads get the replicated row only.

Convolution: DTensor shards `convolution` / `convolution_backward` on the batch only (a
single-dim strategy) and runs both through a custom handler (`_tp_conv`) that never
redistributes the inputs to the strategy it picked and halo-exchanges whenever a non-batch
dim of the output is sharded: a weight split on its output channels (Shard(0)) gives a local
[N, C_out/k, ...] labelled Replicate, and an input-channel split fails in the kernel.  Both ops
get the planner's rows here (src/strategy/nn_rules.cc, convolution / convolution_backward), and
their custom handlers are dropped so DTensor's ordinary path redistributes the inputs and runs
the local kernel.  Forward [out | input, weight, bias?]: all replicated; batch [S(0) | S(0), R,
R]; for groups == 1 also out-channel [S(1) | R, S(w_out), S(0)] and in-channel [P | S(1),
S(w_in), P].  Backward [grad_input, grad_weight, grad_bias | grad_out, input, weight]: batch
[S(0), P, P | S(0), S(0), R]; out-channel [P, S(w_out), S(0) | S(1), R, S(w_out)]; in-channel
[S(1), S(w_in), R | R, S(1), S(w_in)].  w_out / w_in are the weight's output / input channel
dims (0 / 1; 1 / 0 when transposed); the backward's `bias_sizes` is rewritten to the local
channel count (fake kernels shape grad_bias from it).  Unbatched inputs (rank of input !=
rank of weight) get the replicated row only.  Spatial (halo) splits are offered by neither.

Registration happens on first use (`ensure_registered`), never at import.
"""
from __future__ import annotations

_DONE = False


def _strategy(n_outputs: int):
    def strategy(op_schema):
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        n_tensors = sum(isinstance(a, OpStrategy) for a in op_schema.args_schema)
        n_tensors += sum(isinstance(a, OpStrategy) for a in op_schema.kwargs_schema.values())
        width = n_outputs + n_tensors
        per_dim = [[Replicate()] * width, [Shard(0)] * width, [Shard(1)] * width]
        mesh = op_schema.get_mesh_from_args()
        return expand_to_full_mesh_op_strategy(mesh, op_schema, per_dim, input_index=n_outputs)
    return strategy


def _broadcast_shard(out_shape, in_shape, dim: int):
    """The placement of an input of `in_shape` under an output sharded on `dim` (right-aligned
    broadcasting): Shard of the matching dim, Replicate where the input lacks it or has 1."""
    from torch.distributed.tensor import Replicate, Shard

    d = dim - (len(out_shape) - len(in_shape))
    if d < 0 or in_shape[d] == 1 and out_shape[dim] != 1:
        return Replicate()
    return Shard(d)


def _polar_strategy(op_schema):
    """polar(abs, angle): the planner's rows (complex_rules.cc) expanded over the mesh."""
    import torch
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

    abs_shape, angle_shape = (tuple(a.shape) for a in op_schema.args_schema[:2])
    out_shape = tuple(torch.broadcast_shapes(abs_shape, angle_shape))
    per_dim = [[Replicate()] * 3]
    for d in range(len(out_shape)):
        per_dim.append([Shard(d), _broadcast_shard(out_shape, abs_shape, d),
                        _broadcast_shard(out_shape, angle_shape, d)])
    mesh = op_schema.get_mesh_from_args()
    return expand_to_full_mesh_op_strategy(mesh, op_schema, per_dim, input_index=1)


#: Index of N in native_group_norm's and native_group_norm_backward's arguments: (input,
#: weight?, bias?, N, C, HxW, group, eps) and (grad_out, input, mean, rstd, weight?, N, C,
#: HxW, group, output_mask).  Absent optional tensors are None there, so the index is fixed.
_GN_N = {False: 3, True: 5}


def _group_norm_rows(backward: bool):
    """native_group_norm [out, mean, rstd | input, weight?, bias?] or its backward
    [grad_in, grad_w?, grad_b? | grad_out, input, mean, rstd, weight?]: per mesh dim, R, the
    batch row and, with whole groups, the channel row (norm_rules.cc)."""
    def strategy(op_schema):
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        args = op_schema.args_schema
        n_tensors = sum(isinstance(a, OpStrategy) for a in args)
        n_act = 4 if backward else 1              # grad_out, input, mean, rstd | input
        n_param = n_tensors - n_act               # weight?, bias? | weight?
        group = int(args[_GN_N[backward] + 3])
        present = list(args[-1]) if backward else [True] * 3
        keep = lambda row: [p if k >= 3 or present[k] else None  # noqa: E731
                            for k, p in enumerate(row)]
        param_grad_b = Partial() if backward else Shard(0)   # grad_w/grad_b | mean/rstd
        param_grad_c = Shard(0) if backward else Shard(1)
        rows = [keep([Replicate()] * (3 + n_tensors)),
                keep([Shard(0), param_grad_b, param_grad_b]
                     + [Shard(0)] * n_act + [Replicate()] * n_param)]
        mesh = op_schema.get_mesh_from_args()
        if group % mesh.size() == 0:
            rows.append(keep([Shard(1), param_grad_c, param_grad_c]
                             + [Shard(1)] * n_act + [Shard(0)] * n_param))
        return expand_to_full_mesh_op_strategy(mesh, op_schema, rows, input_index=3)
    return strategy


def _adjust_group_norm(backward: bool):
    """The scalar adjuster of native_group_norm(_backward): N, C, HxW and group of the local
    input (DTensor's own rewrites N, C, HxW only, since it never splits channels)."""
    def adjust(input_specs, schema):
        from torch.distributed.tensor._op_schema import OpSchema
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        spec = input_specs[1 if backward else 0]
        local, _ = compute_local_shape_and_global_offset(
            spec.tensor_meta.shape, spec.mesh, spec.placements, skip_offset=True)
        args = list(schema.args_schema)
        k = _GN_N[backward]
        channels, group = int(args[k + 1]), int(args[k + 3])
        hxw = 1
        for d in local[2:]:
            hxw *= d
        args[k:k + 4] = [local[0], local[1], hxw, group * local[1] // channels]
        return OpSchema(schema.op, tuple(args), schema.kwargs_schema)
    return adjust


def _ctc_strategy(backward: bool):
    """The planner's CTC rows expanded over the mesh.  Forward (nll, log_alpha | log_probs,
    targets, input_lengths, target_lengths); backward (grad_log_probs | grad, log_probs,
    targets, input_lengths, target_lengths, nll, log_alpha)."""
    def strategy(op_schema):
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        tensors = [a for a in op_schema.args_schema if isinstance(a, OpStrategy)]
        ranks = [len(t.shape) for t in tensors]
        lp = 1 if backward else 0  # the position of log_probs
        n_out = 1 if backward else 2
        per_dim = [[Replicate()] * (n_out + len(tensors))]
        # the Tensor overloads only: int-list lengths hold the global batch (replicated)
        batched = (len(tensors) == (7 if backward else 4) and ranks[lp] == 3
                   and ranks[lp + 1] == 2 and ranks[lp + 2] == ranks[lp + 3] == 1)
        if batched:
            outs = [Shard(1)] if backward else [Shard(0), Shard(0)]
            per_dim.append(outs + [Shard(1) if i == lp else Shard(0) for i in range(len(tensors))])
        mesh = op_schema.get_mesh_from_args()
        return expand_to_full_mesh_op_strategy(mesh, op_schema, per_dim, input_index=n_out)
    return strategy


def _conv_rows(backward: bool):
    """convolution or convolution_backward: the planner's rows (see above) expanded over the
    mesh.  Absent outputs (output_mask False) and an absent bias have no placement."""
    def strategy(op_schema):
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        args = op_schema.args_schema
        tensors = [a for a in args[:3] if isinstance(a, OpStrategy)]
        x, w = (tensors[1], tensors[2]) if backward else (tensors[0], tensors[1])
        transposed = bool(args[7 if backward else 6])
        groups = int(args[9 if backward else 8])
        w_out, w_in = (1, 0) if transposed else (0, 1)
        R, P = Replicate(), Partial()
        if backward:
            present = [bool(m) for m in args[10]]
            rows = [[Shard(0), P, P, Shard(0), Shard(0), R],
                    [P, Shard(w_out), Shard(0), Shard(1), R, Shard(w_out)],
                    [Shard(1), Shard(w_in), R, R, Shard(1), Shard(w_in)]]
            n_out = 3
        else:
            bias = len(tensors) == 3
            present = [True]
            rows = [[Shard(0), Shard(0), R] + [R] * bias,
                    [Shard(1), R, Shard(w_out)] + [Shard(0)] * bias,
                    [P, Shard(1), Shard(w_in)] + [P] * bias]
            n_out = 1
        width = n_out + len(tensors)
        if len(x.shape) != len(w.shape):
            rows = []
        elif groups != 1:
            rows = rows[:1]
        rows = [[R] * width] + rows
        rows = [[p if k >= n_out or present[k] else None for k, p in enumerate(row)]
                for row in rows]
        mesh = op_schema.get_mesh_from_args()
        return expand_to_full_mesh_op_strategy(mesh, op_schema, rows, input_index=n_out)
    return strategy


def _adjust_conv_bias(input_specs, schema):
    """The scalar adjuster of convolution_backward: `bias_sizes` becomes the local channel
    count of grad_out (fake and meta kernels shape grad_bias from it; an out-channel shard
    holds C_out / k of the bias gradient)."""
    from torch.distributed.tensor._op_schema import OpSchema
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    args = list(schema.args_schema)
    if args[3] is None:
        return schema
    spec = input_specs[0]
    local, _ = compute_local_shape_and_global_offset(
        spec.tensor_meta.shape, spec.mesh, spec.placements, skip_offset=True)
    args[3] = [local[1]]
    return OpSchema(schema.op, tuple(args), schema.kwargs_schema)


def _weight_norm_strategy(backward: bool):
    """The planner's weight-norm rows (src/strategy/norm_rules.cc weight_norm) over the mesh:
    replicated; every tensor split on the norm's `dim`; for the backward, which is linear in
    grad_w, also [P, P | P, R, R, R].  Forward [w, norm | v, g, dim], backward [grad_v, grad_g |
    grad_w, v, g, norm, dim]."""
    def strategy(op_schema):
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        args = op_schema.args_schema
        n_in = 4 if backward else 2
        rank = len(args[1 if backward else 0].shape)
        dim = int(args[n_in]) % rank if len(args) > n_in else 0
        tensors = [a for a in args[:n_in] if isinstance(a, OpStrategy)]
        rows = [[Replicate()] * (2 + len(tensors)), [Shard(dim)] * (2 + len(tensors))]
        if backward:
            rows.append([Partial(), Partial(), Partial()] + [Replicate()] * (len(tensors) - 1))
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, rows,
                                               input_index=2)
    return strategy


def ensure_registered() -> None:
    """Registers the strategies above with DTensor's sharding propagator (once)."""
    global _DONE
    if _DONE:
        return
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import register_op_strategy

    aten = torch.ops.aten
    # forward: (query, key, value, dropout_p, is_causal, *, attn_mask, scale) -> (out, lse)
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default,
                         schema_info=RuntimeSchemaInfo(3))(_strategy(2))
    # backward: (grad_out, query, key, value, out, logsumexp, ...) -> (dq, dk, dv)
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                         schema_info=RuntimeSchemaInfo(6))(_strategy(3))
    register_op_strategy(aten.polar.default)(_polar_strategy)
    from torch.distributed.tensor._ops._tensor_ops import split_strategy

    register_op_strategy([aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default],
                         schema_info=RuntimeSchemaInfo(1))(split_strategy)
    propagator = DTensor._op_dispatcher.sharding_propagator
    for op, backward in ((aten.native_group_norm.default, False),
                         (aten.native_group_norm_backward.default, True)):
        # replaces DTensor's batch-only registration of the forward (same rows plus one): a
        # single-dim registration would take precedence over this one
        propagator.op_single_dim_strategy_funcs.pop(op, None)
        register_op_strategy(op, schema_info=RuntimeSchemaInfo(1))(_group_norm_rows(backward))
        propagator.op_to_scalar_shape_adjuster[op] = _adjust_group_norm(backward)
    # (log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    register_op_strategy(aten._ctc_loss.Tensor, schema_info=RuntimeSchemaInfo(4))(
        _ctc_strategy(False))
    # (grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank, ...)
    register_op_strategy(aten._ctc_loss_backward.Tensor, schema_info=RuntimeSchemaInfo(7))(
        _ctc_strategy(True))
    # int-list overloads (lengths as Python lists, part of the cache key): replicated only
    register_op_strategy(aten._ctc_loss.default, schema_info=RuntimeSchemaInfo(2))(
        _ctc_strategy(False))
    register_op_strategy(aten._ctc_loss_backward.default, schema_info=RuntimeSchemaInfo(3))(
        _ctc_strategy(True))
    # convolution (input, weight, bias?, stride, padding, dilation, transposed,
    # output_padding, groups) and its backward (grad_out, input, weight, bias_sizes?, stride,
    # padding, dilation, transposed, output_padding, groups, output_mask)
    handlers = DTensor._op_dispatcher._custom_op_handlers
    for op, backward, static in ((aten.convolution.default, False, 3),
                                 (aten.convolution_backward.default, True, 3)):
        propagator.op_single_dim_strategy_funcs.pop(op, None)
        handlers.pop(op, None)  # the _tp_conv handler, which ignores the chosen redistribution
        register_op_strategy(op, schema_info=RuntimeSchemaInfo(static))(_conv_rows(backward))
    propagator.op_to_scalar_shape_adjuster[aten.convolution_backward.default] = _adjust_conv_bias
    # (v, g, dim) -> (w, norm); (grad_w, v, g, norm, dim) -> (grad_v, grad_g)
    register_op_strategy(aten._weight_norm_interface.default, schema_info=RuntimeSchemaInfo(2))(
        _weight_norm_strategy(False))
    register_op_strategy(aten._weight_norm_interface_backward.default,
                         schema_info=RuntimeSchemaInfo(4))(_weight_norm_strategy(True))
    _DONE = True
