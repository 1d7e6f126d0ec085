#!/usr/bin/env python3
"""The pipeline runtime's step with gradient reductions once per step against once per microbatch.

    AUTOSHARD_BIN=build/autoshard AUTOSHARD_CORE=$(ls build/_core*.so) \
        build/venv/bin/python bench/pipeline_runtime_bench.py \
        [--schedules 1F1B,InterleavedZeroBubble] [--microbatches 4,8] [--steps 10]

Model and plans: test_pipeline.py's (tests/python/_pipeline_worker.py): a 4-layer LLaMA (dim 16),
global batch 8 of 8 tokens, planned by `autoshard plan --mesh 2x2 --mesh-dims pp,dp
--microbatches M --schedule S` (2 stages; 4 for interleaved and zero-bubble schedules), run by
`apply_pipeline` on 4 gloo ranks of this machine.  Per (schedule, M), each rank builds the
pipeline twice, `reduce_once_per_step=True` (the default) and False (every backward reduces its
gradients, as before), counts the functional collectives of one step, then times `--steps`
steps of each, alternating.  Printed: collectives per step and the median step wall time, the
slowest rank's (a step ends when every rank's does).
"""
from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))


def _rank(mesh, plan: dict, steps: int) -> dict:
    import torch

    import _pipeline_worker as P
    from autoshard.pipeline import apply_pipeline

    m = plan["pipeline"]["microbatches"]
    traced, graph = P.trace_microbatch(m)
    model, inputs, targets, _ = P.make_llama4()
    pipes = {mode: apply_pipeline(copy.deepcopy(model), plan, mesh, traced=traced, graph=graph,
                                  reduce_once_per_step=mode)
             for mode in (True, False)}
    out: dict = {}
    for mode, pipe in pipes.items():
        counter = P.collective_counter()
        with counter:
            pipe.step(*inputs, *targets)  # also the warm-up
        out[f"collectives_{mode}"] = counter.count
        out[f"ms_{mode}"] = []
    for _ in range(steps):
        for mode, pipe in pipes.items():
            torch.distributed.barrier()
            t0 = time.perf_counter()
            pipe.step(*inputs, *targets)
            for p in pipe.parameters():
                p.grad = None
            out[f"ms_{mode}"].append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", default="1F1B,InterleavedZeroBubble")
    ap.add_argument("--microbatches", default="4,8")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()

    import _apply_worker as W
    import _dtensor_ref
    import _pipeline_worker as P

    binary = _dtensor_ref.autoshard_binary()
    if binary is None:
        sys.exit("pipeline_runtime_bench.py: set AUTOSHARD_BIN to the autoshard binary")
    print("| schedule | M | collectives per step, rank 0 (once / per microbatch) | "
          "step ms, median of the slowest rank (once / per microbatch) |")
    print("|---|---|---|---|")
    for schedule in args.schedules.split(","):
        for m in (int(x) for x in args.microbatches.split(",")):
            _, graph = P.trace_microbatch(m)
            with tempfile.TemporaryDirectory(prefix="autoshard-ppbench-") as tmp:
                spr = 1 if schedule in ("1F1B", "GPipe") else 2
                plan = W.plan(binary, graph, [2, 2], ["pp", "dp"], [], tmp,
                              ["--microbatches", str(m), "--schedule", schedule,
                               "--stages-per-rank", str(spr)])
                res = W.launch(4, [2, 2], ["pp", "dp"],
                               functools.partial(_rank, plan=plan, steps=args.steps), tmp,
                               600)
            med = {mode: max(statistics.median(r[f"ms_{mode}"]) for r in res)
                   for mode in (True, False)}
            print(f"| {schedule} | {m} | {res[0]['collectives_True']} / "
                  f"{res[0]['collectives_False']} | {med[True]:.1f} / {med[False]:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
