#!/usr/bin/env python3
"""Where a rank's lowered step spends its time: the applied plan's graphs, node by node.

    PYTHONPATH=python build/venv/bin/python bench/apply_profile.py --cli build/autoshard \
        --mesh 2x2 --dims dp,tp --algo fsdp+tp

Same model, plan and gloo mesh as bench/apply_bench.py (its _plan and _model).  After two warm
steps every rank runs one step with its forward and backward graphs interpreted node by node
(torch.fx.Interpreter, wall time per node), then prints rank 0's time per kind of node: the
collectives' issues and waits (a wait's time is what the rank stood still for the collective),
the matmuls and attention (the FLOPs eager runs too), the copies the lowering adds (cat, clone,
bucket copy-in/out, dtype casts) and the views (shape-only ops, the Python per-node cost).  The
interpreter adds its own per-node cost, so the step is slower than bench/apply_bench.py's; the
split between kinds is what this is for.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import apply_bench as AB  # noqa: E402

VIEWS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice",
         "split", "getitem", "unsqueeze", "squeeze", "alias", "select", "detach", "as_strided",
         "split_with_sizes", "chunk", "unbind"}
COPIES = {"cat", "clone", "_to_copy", "copy_", "contiguous", "bucket_flat", "bucket_piece",
          "constant_pad_nd", "new_zeros", "zeros", "full", "empty", "copy"}
MATMULS = {"mm", "bmm", "addmm", "matmul", "baddbmm"}


def kind_of(node) -> str:
    """The node's kind for the table."""
    from autoshard.inflight import is_wait
    from autoshard.lower import collective_kind

    if collective_kind(node) is not None:
        return f"issue {collective_kind(node)}"
    if is_wait(node):
        return "wait"
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    if name in MATMULS:
        return "matmul"
    if "attention" in name or "sdpa" in name:
        return "attention"
    if name in VIEWS:
        return "view"
    if name in COPIES:
        return "copy"
    return "other compute"


def profile_worker(rank: int, args, out_dir: str, placements: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.fx
    from torch.distributed.device_mesh import init_device_mesh

    from autoshard.apply import apply_placement, trace_for_apply

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world)
    mesh = init_device_mesh("cpu", tuple(args.mesh_shape), mesh_dim_names=tuple(args.dim_names))
    model, tokens, labels, loss_fn = AB._model(args, args.batch)
    traced = trace_for_apply(model, (tokens,), loss_fn, (labels,))
    step = apply_placement(model, placements, mesh, traced=traced)
    local = step.shard_inputs(tokens, labels)
    for _ in range(2):
        step(*local).backward()
    times: dict = defaultdict(float)
    counts: dict = defaultdict(int)

    class Timed(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op != "call_function":
                return super().run_node(n)
            t0 = time.perf_counter()
            out = super().run_node(n)
            k = kind_of(n)
            times[k] += time.perf_counter() - t0
            counts[k] += 1
            return out

    holder = step.__dict__["_holder"]
    holder["forward"] = Timed(step.split.forward).run
    holder["backward_graph"] = Timed(step.split.backward).run
    dist.barrier()
    t0 = time.perf_counter()
    step(*local).backward()
    wall = time.perf_counter() - t0
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"wall": wall, "times": times, "counts": counts}, f)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--mesh", default="2x2")
    ap.add_argument("--dims", default="dp,tp")
    ap.add_argument("--algo", default="fsdp+tp")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--recompute", default="none")
    ap.add_argument("--prefetch-layers", type=int, default=1)
    ap.add_argument("--bucket", default="layer")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    AB.set_mesh_args(args)
    placements, _ = AB._plan(args)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        args.port = AB._free_port()
        mp.spawn(profile_worker, args=(args, out, placements), nprocs=args.world, join=True)
        res = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(args.world)]
    r0 = res[0]
    total = sum(r0["times"].values())
    print(f"# {args.algo} on {args.mesh} ({args.dims}), llama {args.layers} layers seq {args.seq} "
          f"batch {args.batch}; rank 0, one interpreted step: {r0['wall']:.3f} s wall, "
          f"{total:.3f} s in nodes")
    print("| kind | nodes | s | share of node time | s per node (ms) |")
    print("|---|---|---|---|---|")
    for k in sorted(r0["times"], key=lambda k: -r0["times"][k]):
        t, c = r0["times"][k], r0["counts"][k]
        print(f"| {k} | {c} | {t:.3f} | {t / total:.1%} | {1e3 * t / c:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
