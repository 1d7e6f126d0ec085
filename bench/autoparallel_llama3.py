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

The module runs unchanged, its rotary embedding included (`precompute_freqs_cis` /
`apply_rotary_emb`: a complex64 table from torch.polar, view_as_complex, a complex multiply,
view_as_real), which autoshard traces as c64 tensors.

--apply runs the same module, tiny (dim 64, 2 layers, 4 heads, 2 KV heads, vocab 128, seq 16,
batch 8, f32, AutoParallel's init_weights), on dp x tp gloo processes on this machine: each rank
traces and plans it through AutoParallel(model, input_fn, mesh), applies the plan, runs one
forward and backward of a loss of the outputs, and compares the loss and every gradient with
one process (max |diff| / max |ref| <= 1e-5).  As in AutoParallel's example the batch is split
over dp and the parameters are held to their default share (add_parameter_memory_constraint),
so they are sharded.  It plans for a toy device whose compute is slow
and whose links are free (tests/python/_apply_worker.py's SLOW_COMPUTE), so that even at this
size the plan shards parameters and activations, the complex rotary among them.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time


APPLY_TOL = 1e-5
#: tests/python/_apply_worker.py's toy device: sharding pays even for a tiny model.
SLOW_COMPUTE = {"base": "h100", "name": "slow-compute", "peak_fp32_tflops": 1e-6,
                "peak_bf16_tflops": 1e-6, "hbm_gbps": 1e-3, "launch_floor_us": 0,
                "base_latency_us": 0, "intra_latency_us": 0, "inter_latency_us": 0}


def _load_model_module(path: str):
    """AutoParallel's llama3.py as a module; None when the file does not exist."""
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("ap_llama3", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tiny_model(mod):
    """The module at a tiny size with AutoParallel's own seeded initialisation (f32, CPU)."""
    import torch

    torch.manual_seed(0)
    args = mod.TransformerModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128,
                                    multiple_of=32, max_seq_len=16)
    model = mod.Transformer(args)
    model.init_weights()
    return model


def _tiny_torchtitan(package_root: str):
    """torchtitan's llama3 Transformer (a package tree bench/torchtitan_llama3.py assembles) at
    the same tiny size, initialised as torchtitan's trainer does it (init_weights, no grad)."""
    import torch

    if package_root not in sys.path:
        sys.path.insert(0, package_root)
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    torch.manual_seed(0)
    model = Transformer(TransformerModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                                             vocab_size=128, multiple_of=32, max_seq_len=16))
    with torch.no_grad():
        model.init_weights()
    return model


def _build(source: str):
    """The tiny model of `source`: AutoParallel's model file, or a torchtitan package root."""
    if os.path.isdir(source):
        return _tiny_torchtitan(source)
    return _tiny_model(_load_model_module(source))


def _rel_err(a, b) -> float:
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def _apply_rank(rank: int, world: int, port: int, model_file: str, shape, hardware: str,
                out: dict) -> None:
    """One gloo rank of --apply: plan, apply, one step; the worst errors go into `out`."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.placement_types import Replicate, Shard

    from autoshard import AutoParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        mesh = init_device_mesh("cpu", tuple(shape), mesh_dim_names=("dp", "tp"))
        model = _build(model_file)
        ref = copy.deepcopy(model)
        tokens = torch.randint(0, 128, (8, 16), generator=torch.Generator().manual_seed(1))
        with AutoParallel(model, lambda: tokens, mesh, hardware=hardware) as autop:
            autop.add_input_constraints([(Shard(0), Replicate())])
            autop.add_parameter_memory_constraint(low=None, high=None)  # as the example's
            parallel = autop.apply_placement(autop.optimize_placement())
        logits = parallel(*parallel.shard_inputs(tokens))
        loss = (logits.float() ** 2).mean()
        loss.backward()
        want = (ref(tokens).float() ** 2).mean()
        want.backward()
        grads = dict(ref.named_parameters())
        errs = {n: _rel_err(p.grad.full_tensor(), grads[n].grad)
                for n, p in parallel.named_parameters()}
        sharded = [n for n, p in parallel.named_parameters()
                   if any(isinstance(q, Shard) for q in p.placements)]
        c64 = [n for n in autop.graph_dict["nodes"] if n["kind"] == "op"
               and n["outputs"][0]["dtype"] == "c64"]
        c64_sharded = [n for n in c64 if "S(" in autop.sharding_optimizer.get_placements()
                       [n["name"]]["outputs"][0]]
        out[rank] = {"loss": _rel_err(loss.full_tensor(), want.detach()),
                     "grad": max(errs.values()), "params": len(errs), "sharded": len(sharded),
                     "c64": len(c64), "c64_sharded": len(c64_sharded)}
    finally:
        dist.destroy_process_group()


def run_apply(model_file: str, dp: int, tp: int) -> int:
    """--apply: dp x tp gloo ranks (spawned); prints each rank's errors; 0 when all pass."""
    import json
    import socket
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(SLOW_COMPUTE, f)
    hardware = f.name

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    world = dp * tp
    out = mp.Manager().dict()
    try:
        mp.start_processes(_apply_rank, args=(world, port, model_file, (dp, tp), hardware, out),
                           nprocs=world, start_method="spawn")
    finally:
        os.unlink(hardware)
    ok = len(out) == world
    for rank in sorted(out.keys()):
        r = out[rank]
        good = r["loss"] <= APPLY_TOL and r["grad"] <= APPLY_TOL
        ok = ok and good
        print(f"rank {rank}: loss rel err {r['loss']:.2e}, worst of {r['params']} gradients "
              f"{r['grad']:.2e} {'ok' if good else 'FAIL'} ({r['sharded']} parameters and "
              f"{r['c64_sharded']} of {r['c64']} c64 ops sharded)")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-file", required=True,
                    help="AutoParallel's autoparallel/_testing/models/llama3.py")
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--save-replay", help="write the optimizer's replay file here")
    ap.add_argument("--no-solve", action="store_true")
    ap.add_argument("--apply", action="store_true",
                    help="tiny model on dp x tp gloo ranks: numerics against one process")
    a = ap.parse_args()
    if not os.path.exists(a.model_file):
        print(f"autoparallel_llama3: {a.model_file}: no such file", file=sys.stderr)
        return 2
    if a.apply:
        return run_apply(a.model_file, a.dp, a.tp)

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor.placement_types import Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from autoshard import AutoParallel

    mod = _load_model_module(a.model_file)

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
