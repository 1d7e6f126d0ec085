"""torch 2.13 + gloo alone: functional collectives in flight at once crash a rank (no autoshard).

    python bench/gloo_inflight_repro.py                        # 16 all-gathers in flight: crashes
    python bench/gloo_inflight_repro.py --in-flight 1          # the same, one at a time: clean
    python bench/gloo_inflight_repro.py --kinds ag,rs,ar --groups dp --runs 10

Four gloo ranks on 127.0.0.1 as a 2x2 DeviceMesh (dp, tp).  Each iteration issues --collectives
functional collectives (`torch.ops._c10d_functional.*`, the ops DTensor and the lowered autoshard
step issue) on the mesh dims' process groups, with a small matmul between issues; the oldest is
waited for whenever --in-flight are pending, the rest at the iteration's end.  With
--in-flight 1 each collective is waited before the next is issued.  One
run is a fresh set of four processes; a rank killed by a signal counts as a crash.  Prints one
table row and exits 1 when any run crashed.

What it showed on this repository's 2-core machine: docs/benchmarks.md "Crashes" (16 all-gathers
in flight over both groups crash most runs: SIGSEGV in glibc's malloc, `tcache_get`, on a gloo
worker thread inside ProcessGroupGloo's collective setup, the heap corrupted earlier; the same
collectives one at a time never did).
"""
from __future__ import annotations

import argparse
import socket
import sys
import time


def _rank(rank: int, port: int, iters: int, count: int, in_flight: int, kinds: list,
          groups: list) -> None:
    import faulthandler

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    faulthandler.enable()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=4)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    names = {d: mesh.get_group(d).group_name for d in ("dp", "tp")}
    groups_by_name = {mesh.get_group(d).group_name: mesh.get_group(d) for d in ("dp", "tp")}
    ops = torch.ops._c10d_functional
    gen = torch.Generator().manual_seed(rank)
    for it in range(iters):
        pending = []
        for k in range(count):
            rows = 128 * (1 + (7 * k + it) % 13)
            x = torch.randn(rows, 16, generator=gen)
            group = names[groups[k % len(groups)]]
            kind = kinds[(k // len(groups)) % len(kinds)]
            if kind == "ag":
                y = ops.all_gather_into_tensor(x, 2, group)
            elif kind == "agsum":
                # The same gather as a sum: this rank's rows in a zeroed buffer, all-reduced.
                index = dist.get_group_rank(groups_by_name[group], rank)
                buf = x.new_zeros((2 * rows, 16))
                buf[index * rows:(index + 1) * rows] = x
                y = ops.all_reduce(buf, "sum", group)
            elif kind == "rs":
                y = ops.reduce_scatter_tensor(x, "sum", 2, group)
            else:
                y = ops.all_reduce(x, "sum", group)
            pending.append(y)
            if len(pending) >= in_flight:
                ops.wait_tensor(pending.pop(0))
            torch.mm(torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen))
        for y in pending:
            ops.wait_tensor(y)
    dist.barrier()
    dist.destroy_process_group()


def _one_run(args: argparse.Namespace) -> list:
    """One launch of four ranks; -> their exit codes."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, port, args.iters, args.collectives, args.in_flight,
                                             args.kinds.split(","), args.groups.split(",")))
             for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(args.timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    return [p.exitcode for p in procs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--collectives", type=int, default=16, help="per iteration (default 16)")
    ap.add_argument("--in-flight", type=int, default=16,
                    help="most pending at once (default 16: all of an iteration's)")
    ap.add_argument("--kinds", default="ag", help="comma list of ag, agsum (an all-gather done as an all-reduce of a "
                    "zero-padded buffer), rs, ar (default ag)")
    ap.add_argument("--groups", default="dp,tp", help="mesh dims to use (default dp,tp)")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    crashed = failed = 0
    start = time.monotonic()
    for i in range(args.runs):
        codes = _one_run(args)
        crash = any(c is not None and c < 0 for c in codes)
        crashed += crash
        failed += (not crash) and any(c != 0 for c in codes)
        print(f"run {i + 1}/{args.runs}: exit codes {codes}", flush=True)
    print()
    print("| kinds | groups | collectives | in flight | iterations | runs | crashed | other | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.kinds} | {args.groups} | {args.collectives} | {args.in_flight} | {args.iters} | "
          f"{args.runs} | "
          f"{crashed} | {failed} | {time.monotonic() - start:.0f} s |")
    return 1 if crashed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
