#!/usr/bin/env python3
"""AutoParallel's LLaMA-3 8B module planned through autoshard's Python API, as AutoParallel's
examples/example_llama3.py sets it up: 8x8 mesh (dp, tp) over a fake process group, batch
2 x dp, seq 8192, bf16 MixedPrecisionPolicy, input constraint (Shard(0), Replicate()) and
add_parameter_memory_constraint() at its default bound.  Prints a table of the phases and
optionally writes the replay file (graph, mesh, options, constraints) that
tests/fixtures/ap_llama3_8b_8x8.replay is.

AutoParallel's code is never committed: pass its model file, e.g. from a checkout or mirror
    git --git-dir=AUTOPARALLEL/.git show HEAD:autoparallel/_testing/models/llama3.py > /tmp/ap_llama3.py
    AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python build/venv/bin/python \
        bench/autoparallel_llama3.py --model-file /tmp/ap_llama3.py [--save-replay out.replay]

autoshard's graph format has no complex dtype, so the rotary embedding (AutoParallel's
`precompute_freqs_cis` / `apply_rotary_emb`, complex64) is replaced before tracing by the
same rotation on real (cos, sin) pairs: two f32 tables instead of one complex64 table, and
elementwise ops instead of complex multiplies.  Every other op is AutoParallel's module.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time


def real_rotary(torch):
    """(precompute, apply) with AutoParallel's signatures, rotating (even, odd) pairs by the
    rotary angles with real arithmetic (RoPE: Su et al. 2021, eq. 34)."""
    def precompute(dim: int, end: int, theta: float = 10000.0):
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
        ang = torch.outer(torch.arange(end).float(), inv)
        return torch.stack([ang.cos(), ang.sin()], dim=-1)  # (end, dim/2, 2)

    def apply(xq, xk, freqs_cis):
        def rot(x):
            pairs = x.float().reshape(*x.shape[:-1], -1, 2)
            f = freqs_cis[: x.shape[1]].view(1, x.shape[1], 1, pairs.shape[-2], 2)
            a, b = pairs[..., 0], pairs[..., 1]
            c, s = f[..., 0], f[..., 1]
            return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(3).type_as(x)
        return rot(xq), rot(xk)

    return precompute, apply


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-file", required=True,
                    help="AutoParallel's autoparallel/_testing/models/llama3.py")
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--save-replay", help="write the optimizer's replay file here")
    ap.add_argument("--no-solve", action="store_true")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor.placement_types import Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from autoshard import AutoParallel

    spec = importlib.util.spec_from_file_location("ap_llama3", a.model_file)
    if spec is None or not os.path.exists(a.model_file):
        print(f"autoparallel_llama3: {a.model_file}: no such file", file=sys.stderr)
        return 2
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.precompute_freqs_cis, mod.apply_rotary_emb = real_rotary(torch)

    world = a.dp * a.tp
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    mesh = init_device_mesh("cpu", (a.dp, a.tp), mesh_dim_names=("dp", "tp"))
    vocab, batch = 128256, 2 * a.dp
    args = mod.TransformerModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                                    ffn_dim_multiplier=1.3, multiple_of=1024, rope_theta=500000,
                                    vocab_size=vocab, max_seq_len=a.seq)
    with torch.device("meta"):
        model = mod.Transformer(args)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    def input_fn():
        return torch.randint(0, vocab, (batch, a.seq))

    rows = []
    t = time.perf_counter()
    autop = AutoParallel(model, input_fn, mesh, mp)
    autop.__enter__()
    rows.append(("trace + export + optimizer", time.perf_counter() - t))
    autop.add_parameter_memory_constraint(low=None, high=None)
    autop.add_input_constraints([(Shard(0), Replicate())])
    if a.save_replay:
        autop.sharding_optimizer.save_replay(a.save_replay)
    plan = None
    if not a.no_solve:
        t = time.perf_counter()
        plan = autop.sharding_optimizer.get_solution()
        rows.append(("get_solution (build, cluster, solve)", time.perf_counter() - t))
    print(f"{'phase':<40} {'wall s':>8}")
    for name, w in rows:
        print(f"{name:<40} {w:>8.2f}")
    if plan is not None:
        solve = sum(s for n, s in plan.phase_seconds if n.startswith("solve."))
        print(f"{'of which solve.*':<40} {solve:>8.2f}")
        print(f"nodes {len(autop.graph_dict['nodes'])}; {plan.status}, objective "
              f"{plan.objective_us / 1e3:.3f} ms, gap {plan.gap:.2e}")
    autop.__exit__(None, None, None)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
