#!/usr/bin/env python3
"""The applied plan against eager PyTorch, per rank: step time and first-step peak memory.

    PYTHONPATH=python build/venv/bin/python bench/apply_bench.py --cli build/autoshard \
        --mesh 2 --dims dp --algo ddp                     # data parallel, 2 gloo ranks
    ... --mesh 2x2 --dims dp,tp --algo fsdp+tp            # 4 ranks, weights sharded
    ... --compile                                         # also the torch.compile'd step
    ... --prefetch-layers 0 --bucket none                 # without the plan's schedule

Model: autoshard.tracer.examples.llama at llama_tiny's widths (dim 256, 4 heads, 2 KV heads,
FFN 512, vocab 1024) with --layers (8), --seq (1024), global --batch (8), fp32, on CPU.

Each phase runs in fresh processes, `world` at a time (the ranks share the machine's cores the
same way in every phase):
* eager: one plain nn.Module step (forward, loss, backward, AdamW) on the rank's share of the
  work -- the global batch / the number of ranks, which is the FLOPs each rank does under any
  plan that divides the work evenly;
* lowered: `apply_placement` on a gloo mesh, the planned step (autoshard.lower's graph);
* compiled (--compile): the same module under torch.compile (inductor);
* ceiling (--ceiling): the lowered step with every collective replaced by a local op of the
  same output shape and a copy's work (a gather repeats the shard, a reduce-scatter keeps one
  block, an all-reduce copies, a wait passes its input on): what the step would take if
  communication were free.  Where 2 cores cannot show overlap (4 gloo ranks share them), how
  close the scheduled step gets to this ceiling is what the schedule can still win.

Memory method: CPU resident set size.  Before the first step the peak is reset
(/proc/self/clear_refs, "5"); the step's peak growth is VmHWM - VmRSS before the step, for
forward + backward (the optimizer's lazily created state is excluded: the same in both).
MALLOC_MMAP_THRESHOLD_ is fixed at 64 KiB in every process so that freed tensors go back to
the OS at once (glibc's moving threshold would otherwise keep some of them resident).
The planner's activation peak is its per-device peak minus the parameter state it charges
(16 bytes per parameter element, mixed-precision Adam: cost-model.md section 5); the
measured activation peak is the step's peak growth minus the gradients the step returns
(parameter state on the planner's side).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _model(args, batch: int):
    import torch

    from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=256, n_layers=args.layers, n_heads=4, n_kv_heads=2, ffn_dim=512,
                      vocab_size=1024, max_seq_len=args.seq)
    model = Transformer(cfg)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 1024, (batch, args.seq), generator=g)
    labels = torch.randint(0, 1024, (batch, args.seq), generator=g)
    return model, tokens, labels, cross_entropy_loss


def _measure(fwd_bwd, opt_step, steps: int, grads_bytes) -> dict:
    """First step's peak growth over forward + backward, then the median wall time of the
    later whole steps (forward, backward, optimizer)."""
    rss0 = _status_kib("VmRSS")
    _reset_peak()
    t0 = time.perf_counter()
    fwd_bwd()
    growth = (_status_kib("VmHWM") - rss0) * 1024
    opt_step()
    first = time.perf_counter() - t0
    grads = grads_bytes()
    times, opt_times = [], []
    for _ in range(steps - 1):
        t0 = time.perf_counter()
        fwd_bwd()
        t1 = time.perf_counter()
        opt_step()
        times.append(time.perf_counter() - t0)
        opt_times.append(time.perf_counter() - t1)
    return {"first_step_s": first, "step_s": statistics.median(times) if times else first,
            "opt_s": statistics.median(opt_times) if opt_times else 0.0,
            "peak_growth": growth, "grad_bytes": grads}


def _optimizer_step(opt):
    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=False)
    return step


def eager_worker(rank: int, args, out_dir: str, ddp: bool = False) -> None:
    """Plain PyTorch on the rank's share of the batch; with `ddp`, under PyTorch's own data
    parallelism (DistributedDataParallel on gloo), what a DDP plan is measured against too."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    model, tokens, labels, loss_fn = _model(args, args.batch // args.world)
    run = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                                world_size=args.world)
        run = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def fwd_bwd() -> None:
        loss_fn(run(tokens), labels).backward()

    def grad_bytes() -> int:
        return sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())

    _write(out_dir, rank, _measure(fwd_bwd, _optimizer_step(opt), args.steps, grad_bytes))
    if dist.is_initialized():
        dist.destroy_process_group()


def _gather_locally(x, group_size: int):
    """A local stand-in for an all-gather: the shard repeated along dim 0."""
    return x.repeat(group_size, *([1] * (x.dim() - 1)))


def _scatter_locally(x, group_size: int):
    """A local stand-in for a reduce-scatter: a copy of the first block of dim 0."""
    return x[:x.shape[0] // group_size].clone()


#: meta flag of a ceiling's local stand-in for a collective (bench/apply_profile.py's rows)
STAND_IN = "apply_bench_stand_in"


def _local_collectives(gm) -> int:
    """Replaces each functional collective of `gm` by a local op of the same output shape
    (see the module docstring, "ceiling"); returns how many it replaced.  Shapes are read when
    the step runs (some inputs, such as a bucket's flat buffer, carry no shape meta)."""
    import torch

    aten = torch.ops.aten
    n = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or getattr(node.target, "namespace", "") != "_c10d_functional":
            continue
        name = node.target._opname
        x = node.args[0]
        with gm.graph.inserting_before(node):
            if name == "wait_tensor":
                node.replace_all_uses_with(x)
            else:
                if name == "all_gather_into_tensor":
                    local = gm.graph.call_function(_gather_locally, (x, node.args[1]))
                elif name == "reduce_scatter_tensor":
                    local = gm.graph.call_function(_scatter_locally, (x, node.args[2]))
                else:  # all_reduce, all_to_all_single, ...: a copy of the same shape
                    local = gm.graph.call_function(aten.clone.default, (x,))
                local.meta[STAND_IN] = True
                node.replace_all_uses_with(local)
        gm.graph.erase_node(node)
        n += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return n


def plan_worker(rank: int, args, out_dir: str, placements: dict, mode: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from autoshard.apply import apply_placement, trace_for_apply
    from autoshard.tracer.export import to_graph_dict

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world)
    mesh = init_device_mesh("cpu", tuple(args.mesh_shape), mesh_dim_names=tuple(args.dim_names))
    model, tokens, labels, loss_fn = _model(args, args.batch)
    t0 = time.perf_counter()
    traced = trace_for_apply(model, (tokens,), loss_fn, (labels,))
    graph = to_graph_dict(traced)
    step = apply_placement(model, placements, mesh, traced=traced, graph=graph)
    lower_s = time.perf_counter() - t0
    replaced = 0
    if mode == "ceiling":
        replaced = sum(_local_collectives(g) for g in (step.split.forward, step.split.backward))
    run = torch.compile(step) if mode == "compiled" else step
    del model
    opt = torch.optim.AdamW(step.parameters(), lr=1e-3)

    local = step.shard_inputs(tokens, labels)  # this rank's part of the batch

    def fwd_bwd() -> None:
        run(*local).backward()

    def grad_bytes() -> int:
        return sum(p.grad.to_local().numel() * p.grad.element_size() for p in step.parameters())

    res = _measure(fwd_bwd, _optimizer_step(opt), args.steps, grad_bytes)
    res["lower_s"] = lower_s
    res["collectives_replaced"] = replaced
    res["param_elements"] = sum(p.to_local().numel() for p in step.parameters())
    _write(out_dir, rank, res)
    dist.destroy_process_group()


def _write(out_dir: str, rank: int, res: dict) -> None:
    tmp = os.path.join(out_dir, f".rank{rank}.json")
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, os.path.join(out_dir, f"rank{rank}.json"))


def _phase(target, args, extra=()) -> list:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        args.port = _free_port()
        mp.spawn(target, args=(args, out, *extra), nprocs=args.world, join=True)
        res = []
        for r in range(args.world):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                res.append(json.load(f))
        return res


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_mesh_args(args) -> None:
    """--mesh "2x2" and --dims "dp,tp" -> args.mesh_shape, args.dim_names and args.world."""
    args.mesh_shape = [int(x) for x in args.mesh.split("x")]
    args.dim_names = args.dims.split(",")
    args.world = 1
    for s in args.mesh_shape:
        args.world *= s


def _plan(args) -> tuple[dict, dict]:
    """Traces on meta and plans with the CLI -> (placements.json, plan JSON)."""
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict, write_graph_json

    model, tokens, labels, loss_fn = _model(args, args.batch)
    traced = trace_for_apply(model, (tokens,), loss_fn, (labels,))
    with tempfile.TemporaryDirectory() as d:
        gpath = os.path.join(d, "graph.json")
        write_graph_json(to_graph_dict(traced), gpath)
        cmd = [args.cli, "plan", "--graph", gpath, "--mesh", args.mesh, "--mesh-dims", args.dims,
               "--comm-model", "dtensor", "--require-divisible", "--algo", args.algo,
               "--memory-limit", "0", "--recompute", args.recompute,
               "--prefetch-layers", str(args.prefetch_layers), "--bucket", args.bucket,
               "-o", d, "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        with open(os.path.join(d, "placements.json")) as f:
            return json.load(f), json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True, help="the autoshard binary")
    ap.add_argument("--mesh", default="2")
    ap.add_argument("--dims", default="dp")
    ap.add_argument("--algo", default="ddp", help="alpa (the optimum) or a recipe (plan --algo)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--ceiling", action="store_true",
                    help="also the step with its collectives replaced by local ops")
    ap.add_argument("--recompute", default="none", help="plan --recompute (none|selective|full)")
    ap.add_argument("--prefetch-layers", type=int, default=1,
                    help="plan --prefetch-layers (0: every gather issued at its use)")
    ap.add_argument("--bucket", default="layer", help="plan --bucket (layer|none)")
    args = ap.parse_args()
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(64 * 1024)  # inherited by the spawned ranks
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    set_mesh_args(args)
    if args.batch % args.world:
        raise SystemExit(f"apply_bench: --batch {args.batch} is not divisible by {args.world} ranks")
    placements, plan = _plan(args)
    eager = _phase(eager_worker, args)
    phases = []
    if args.algo == "ddp" and args.world > 1:
        phases.append(("torch DDP", _phase(eager_worker, args, (True,))))
    phases.append(("lowered", _phase(plan_worker, args, (placements, "lowered"))))
    if args.compile:
        phases.append(("compiled", _phase(plan_worker, args, (placements, "compiled"))))
    if args.ceiling:
        phases.append(("ceiling: collectives as local ops",
                       _phase(plan_worker, args, (placements, "ceiling"))))
    _report(args, plan, eager, phases)
    return 0


def _report(args, plan: dict, eager: list, phases: list) -> None:
    mib = 2.0 ** 20
    print(f"# llama {args.layers} layers, dim 256, seq {args.seq}, global batch {args.batch}, "
          f"fp32; mesh {args.mesh} ({args.dims}), plan --algo {args.algo} --recompute "
          f"{args.recompute} --prefetch-layers {args.prefetch_layers} --bucket {args.bucket}; "
          f"per rank, "
          f"median of {args.world} ranks")
    e_step = statistics.median(r["step_s"] for r in eager)
    e_grow = statistics.median(r["peak_growth"] for r in eager)
    print(f"| run | step s | vs eager | of it optimizer s | first step s | peak growth MiB | "
          f"vs eager | activation peak MiB | planner's activation peak MiB | lower s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| eager, batch {args.batch // args.world} | {e_step:.3f} | 1.00x | "
          f"{statistics.median(r['opt_s'] for r in eager):.3f} | "
          f"{statistics.median(r['first_step_s'] for r in eager):.3f} | {e_grow / mib:.1f} | "
          f"1.00x | {statistics.median(r['peak_growth'] - r['grad_bytes'] for r in eager) / mib:.1f}"
          f" | | |")
    peak = plan.get("peak_memory_bytes", 0)
    for name, res in phases:
        step = statistics.median(r["step_s"] for r in res)
        grow = statistics.median(r["peak_growth"] for r in res)
        act = statistics.median(r["peak_growth"] - r["grad_bytes"] for r in res)
        planned = lower = ""
        if "param_elements" in res[0]:  # an applied plan: the planner's figure beside it
            planned_act = peak - 16 * max(r["param_elements"] for r in res)
            planned = f"{planned_act / mib:.1f} ({(act - planned_act) / planned_act:+.1%})"
            lower = f"{statistics.median(r['lower_s'] for r in res):.1f}"
        print(f"| {name} | {step:.3f} | {step / e_step:.2f}x | "
              f"{statistics.median(r['opt_s'] for r in res):.3f} | "
              f"{statistics.median(r['first_step_s'] for r in res):.3f} | {grow / mib:.1f} | "
              f"{grow / e_grow:.2f}x | {act / mib:.1f} | {planned} | {lower} |")


if __name__ == "__main__":
    sys.exit(main())
