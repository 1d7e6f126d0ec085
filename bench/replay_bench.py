"""The executed schedule against the simulated one: llama3-8b lowered per rank, replayed.

    AUTOSHARD_BIN=build/autoshard AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python \
        build/venv/bin/python bench/replay_bench.py [--layers 32]

For each plan (the default objective and `--algo fsdp+tp` on 8x8 (dp, tp), batch 8; `--algo
fsdp` on a 16-rank 1-D mesh, batch 16 -- 8 does not split 16 ways): llama3-8b at real sizes
(32 layers, dim 4096, seq 2048, bf16, autoshard.tracer.examples.llama) is traced on meta, planned
with `autoshard plan -o`, lowered for rank 0 on meta tensors with the fake process group
(autoshard.apply.apply_placement: the graphs the runtime would run, with their prefetches,
issue points, buckets and planned paths), and replayed through the simulator's cost model
(autoshard.replay).  Prints a markdown table: the plan's simulated step, the replay's, their
ratio, the lowering's wall time (docs/benchmarks.md "Applied step").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

from autoshard.apply import apply_placement, trace_for_apply
from autoshard.replay import read_simulation, replay_step
from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss
from autoshard.tracer.export import to_graph_dict

#: (label, mesh, dim names, plan arguments, batch)
CASES = [
    ("default", (8, 8), ("dp", "tp"), [], 8),
    ("--algo fsdp+tp", (8, 8), ("dp", "tp"), ["--algo", "fsdp+tp"], 8),
    ("--algo fsdp", (16,), ("dp",), ["--algo", "fsdp"], 16),
]


def run_case(cfg: LlamaConfig, mesh_shape, names, plan_args, batch, out: str) -> tuple:
    """Plans, lowers and replays one case; -> (simulated us, replayed us, lowering s)."""
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=names)
    with torch.device("meta"):
        model = Transformer(cfg)
    model = model.to(torch.bfloat16)
    tokens = torch.zeros(batch, cfg.max_seq_len, dtype=torch.long, device="meta")
    traced = trace_for_apply(model, (tokens,), cross_entropy_loss, (tokens,))
    with open(f"{out}/g.json", "w") as f:
        json.dump(to_graph_dict(traced), f)
    subprocess.run([os.environ["AUTOSHARD_BIN"], "plan", "--graph", f"{out}/g.json", "--mesh",
                    "x".join(map(str, mesh_shape)), "--mesh-dims", ",".join(names), "-o",
                    f"{out}/p", *plan_args], check=True, capture_output=True)
    with open(f"{out}/p/placements.json") as f:
        doc = json.load(f)
    start = time.perf_counter()
    step = apply_placement(model, doc, mesh, traced=traced)
    lowering = time.perf_counter() - start
    sim = read_simulation(f"{out}/p/trace.json")
    replay = replay_step([step.split.forward.graph, step.split.backward.graph], mesh, sim)
    return sim.step_us, replay.step_us, lowering


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args()
    cfg = LlamaConfig(n_layers=args.layers, max_seq_len=2048)
    print("| plan | mesh | simulated step (ms) | replayed step (ms) | replay / simulated | "
          "lowering (s) |")
    print("|---|---|---|---|---|---|")
    for label, shape, names, plan_args, batch in CASES:
        world = 1
        for s in shape:
            world *= s
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        try:
            with tempfile.TemporaryDirectory(prefix="replay-bench-") as out:
                sim, rep, secs = run_case(cfg, shape, names, plan_args, batch, out)
        finally:
            dist.destroy_process_group()
        mesh = "x".join(map(str, shape)) + f" ({','.join(names)})"
        print(f"| {label} | {mesh} | {sim / 1e3:.2f} | {rep / 1e3:.2f} | {rep / sim:.4f} | "
              f"{secs:.1f} |")


if __name__ == "__main__":
    main()
