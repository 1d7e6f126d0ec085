#!/usr/bin/env python3
"""AutoParallel's own plan of its LLaMA-3 8B on 8x8 (dp, tp), for bench/shard_order_bench.py.

Runs AutoParallel itself (not autoshard) as its examples/example_llama3.py sets the model up --
batch 2 x dp, seq 8192, bf16 MixedPrecisionPolicy, input (Shard(0), Replicate()), the default
parameter-memory bound, its NCCL cost model for 8 H100 nodes of 8 -- on a fake process group on
this CPU machine, and writes its `save_placements` JSON plus OUT.graph.json (every joint-graph
node: target, output shape), which the bench maps onto autoshard's trace.

AutoParallel is never committed (a54c252 measured): put a checkout on PYTHONPATH, with pulp:
    git --git-dir=AUTOPARALLEL.git archive HEAD | tar x -C /tmp/ap
    pip install --target /tmp/pylib pulp filecheck
    PYTHONPATH=/tmp/ap:/tmp/pylib build/venv/bin/python bench/autoparallel_plan.py OUT.json
(about 5 minutes of tracing and 1 of solving on the 2-core box).

Two stand-ins let it run without a GPU, both in this script: the devices report an H100's name
(AutoParallel's compute and NCCL models look their figures up by it), and the CPU flash
attention that SDPA dispatches to on CPU gets the batch and heads splits of torch's CUDA flash
attention strategy (torch 2.13 registers none for it; AutoParallel would replicate it).
"""
from __future__ import annotations

import json
import sys
import time

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
from torch.distributed.tensor.placement_types import Replicate, Shard
from torch.testing._internal.distributed.fake_pg import FakeStore

H100 = "NVIDIA H100 80GB HBM3"
aten = torch.ops.aten


@register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _cpu_flash_attention(op_schema):
    """(out, logsumexp) from (q, k, v): all replicated, split on batch, or split on heads."""
    splits = [[Replicate()] * 5, [Shard(0)] * 5, [Shard(1)] * 5]
    return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, splits,
                                           input_index=2)


@register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _cpu_flash_attention_backward(op_schema):
    """(dq, dk, dv) from (dout, q, k, v, out, logsumexp), split as the forward."""
    splits = [[Replicate()] * 9, [Shard(0)] * 9, [Shard(1)] * 9]
    return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, splits,
                                           input_index=3)


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "ap_placements.json"
    torch.cpu.get_device_name = lambda device=None: H100
    torch.cuda.get_device_name = lambda device=None: H100
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs
    from autoparallel.api import AutoParallel
    from autoparallel.cost_models.collective_runtime_estimation import set_nccl_topo_config
    from autoparallel.cost_models.nccl_cost_model import detect_nccl_topo_config

    torch.distributed.init_process_group("fake", store=FakeStore(), rank=0, world_size=64)
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (8, 8), mesh_dim_names=("dp", "tp"))
    set_nccl_topo_config(detect_nccl_topo_config(mesh))
    seq, vocab, batch = 8192, 128256, 16
    args = TransformerModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                                ffn_dim_multiplier=1.3, multiple_of=1024, rope_theta=500000,
                                vocab_size=vocab, max_seq_len=seq)
    with torch.device("meta"):
        model = Transformer(args)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    t = time.perf_counter()
    with AutoParallel(model, lambda: torch.randint(0, vocab, (batch, seq)), mesh, mp) as autop:
        print(f"trace {time.perf_counter() - t:.1f} s", flush=True)
        autop.add_parameter_memory_constraint(low=None)
        autop.add_input_constraints([(Shard(0), Replicate())])
        t = time.perf_counter()
        autop.optimize_placement()
        print(f"solve {time.perf_counter() - t:.1f} s", flush=True)
        autop.sharding_optimizer.save_placements(out)

        def shape(n):
            v = n.meta.get("val")
            return list(v.shape) if hasattr(v, "shape") else None

        graph = {n.name: [str(n.target), shape(n)] for n in autop.gm.graph.nodes}
        with open(out + ".graph.json", "w") as f:
            json.dump(graph, f)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
