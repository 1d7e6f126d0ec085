"""How the plan's schedule reshapes the lowered step: prefetched gathers and buckets, counted.

    AUTOSHARD_BIN=build/autoshard PYTHONPATH=python build/venv/bin/python bench/schedule_counts.py

The issue-38 example (autoshard.tracer.examples.llama: 4 layers, dim 256, seq 256, batch 2),
planned with `--algo fsdp --comm-model dtensor` on a 2-rank mesh for three schedules (no
prefetch and no buckets; prefetch one layer ahead; prefetch and layer buckets), applied on the
fake process group (rank 0; nothing runs), and the collectives of the lowered forward and
backward graphs counted: an all-gather is "overlapped" when compute ops run between its issue
and its wait.  Prints a markdown table (docs/benchmarks.md "Applied step").
"""
import json
import os
import subprocess
import tempfile

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.distributed.device_mesh import init_device_mesh
from autoshard.apply import apply_placement, trace_for_apply
from autoshard.inflight import issue_wait_gaps
from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss
from autoshard.tracer.export import to_graph_dict
def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    cfg = LlamaConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=512, vocab_size=1024, max_seq_len=256)
    torch.manual_seed(0)
    model = Transformer(cfg)
    tokens = torch.randint(0, 1024, (2, 256))
    traced = trace_for_apply(model, (tokens,), cross_entropy_loss, (tokens,))
    out = tempfile.mkdtemp(prefix="schedule-counts-")
    json.dump(to_graph_dict(traced), open(f"{out}/g.json", "w"))
    print("| --prefetch-layers, --bucket | prefetched | collectives saved | forward all-gathers (overlapped) | backward all-gathers | backward reduce-scatters |")
    print("|---|---|---|---|---|---|")
    for k, b in ((0, "none"), (1, "none"), (1, "layer")):
        d = f"{out}/{k}{b}"
        subprocess.run([os.environ["AUTOSHARD_BIN"], "plan", "--graph", f"{out}/g.json", "--mesh", "2", "--mesh-dims", "dp",
                        "--algo", "fsdp", "--comm-model", "dtensor", "--prefetch-layers", str(k), "--bucket", b, "-o", d], check=True, capture_output=True)
        doc = json.load(open(f"{d}/placements.json"))
        step = apply_placement(model, doc, mesh, traced=traced)
        f = issue_wait_gaps(step.split.forward.graph); bw = issue_wait_gaps(step.split.backward.graph)
        fa = f.get("all_gather", [])
        print(f"| {k}, {b} | {step.split.prefetched} | {step.split.bucketed} | {len(fa)} ({sum(g > 0 for g in fa)}) | {len(bw.get('all_gather', []))} | {len(bw.get('reduce_scatter', []))} |")


if __name__ == "__main__":
    main()
