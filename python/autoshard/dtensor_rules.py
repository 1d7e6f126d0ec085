"""DTensor sharding strategies for ops the planner shards but PyTorch 2.13's DTensor does not.

The lowering (autoshard.lower) runs the traced step on DTensors once, so every op in a plan
needs a DTensor strategy.  PyTorch registers one for the CUDA flash-attention kernel but not
for its CPU twin, `_scaled_dot_product_flash_attention_for_cpu` (what
`F.scaled_dot_product_attention` runs on CPU), nor its backward.  They are registered here
with the same choices as the planner's `sdpa` rule (src/strategy/nn_rules.cc): per mesh dim,
everything replicated, or every tensor sharded on the batch dim (0), or on the heads dim (1).
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


def ensure_registered() -> None:
    """Registers the strategies above with DTensor's sharding propagator (once)."""
    global _DONE
    if _DONE:
        return
    import torch
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import register_op_strategy

    aten = torch.ops.aten
    # forward: (query, key, value, dropout_p, is_causal, *, attn_mask, scale) -> (out, lse)
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default,
                         schema_info=RuntimeSchemaInfo(3))(_strategy(2))
    # backward: (grad_out, query, key, value, out, logsumexp, ...) -> (dq, dk, dv)
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                         schema_info=RuntimeSchemaInfo(6))(_strategy(3))
    _DONE = True
