#!/usr/bin/env python3
"""Issue 23's targets for the overlap-aware objective, through the CLI as a user runs it.

For each case: the default plan (overlap-aware objective), the additive objective's plan,
today's ``--overlap`` discount plan and every fitting recipe (``--algo``), each simulated by the
step simulator; the default plan's objective, bound, gap and planning time (user CPU seconds
of the process, so that a busy machine does not inflate it; and the solve phases' wall
seconds, issue 23 item 6's measure).  Prints a Markdown table.

    bench/objective_bench.py [--bin build/autoshard] [--quick] [--only NAME]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from typing import Optional

CASES = [
    ("llama3-8b 2x8 batch 8", ["--model", "llama3-8b", "--mesh", "2x8", "--batch", "8"]),
    ("llama3-8b 4x4 batch 8", ["--model", "llama3-8b", "--mesh", "4x4", "--batch", "8"]),
    ("llama3-8b 8x8 batch 8", ["--model", "llama3-8b", "--mesh", "8x8", "--batch", "8"]),
    ("llama3-8b 8x8 batch 64", ["--model", "llama3-8b", "--mesh", "8x8", "--batch", "64"]),
    ("llama3-8b 16x8 seq 8192 batch 32",
     ["--model", "llama3-8b", "--mesh", "16x8", "--seq", "8192", "--batch", "32"]),
    ("llama3-70b 8x8", ["--model", "llama3-70b", "--mesh", "8x8"]),
    # One intra-op plan on the 3-D mesh (the case).  Its dims are not named pp: a pp
    # dim now makes a pipelined plan, which is the next row.
    ("llama3-70b 8x8x8", ["--model", "llama3-70b", "--mesh", "8x8x8", "--mesh-dims", "dp,fsdp,tp"]),
    # Pipelined over pp: every stage solve runs the same dual (the stage planner's step, its
    # bound and gap; no simulation of the whole pipeline, no recipes).
    ("llama3-70b 8x8x8 pipelined, batch 128, 16 microbatches",
     ["--model", "llama3-70b", "--mesh", "8x8x8", "--mesh-dims", "pp,dp,tp", "--batch", "128", "--microbatches", "16"]),
    # The traced AutoParallel LLaMA-3 8B (tests/fixtures/README.md): the replay carries the
    # additive objective and its own options, so only the objectives are compared.
    ("traced AP llama3-8b 8x8 (replay)", ["--replay", "tests/fixtures/ap_llama3_8b_8x8.replay"]),
]
RECIPES = ["ddp", "fsdp", "megatron", "fsdp+tp", "hsdp"]


def run(binary: str, args: list[str]) -> tuple[Optional[dict], float]:
    """Runs ``plan --json``; returns (result or None, user CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    p = subprocess.run([binary, "plan", *args, "--json", "--threads", "1"], capture_output=True, text=True)
    user = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    if p.returncode != 0 or not p.stdout.strip():
        return None, user
    return json.loads(p.stdout), user


def simulated(doc: Optional[dict]) -> Optional[float]:
    if not doc or not doc.get("has_solution") or doc.get("peak_memory_bytes", 0) > doc.get("memory_limit_bytes", 1e30):
        return None
    return doc["simulation"]["step_us"] / 1000


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/autoshard")
    ap.add_argument("--quick", action="store_true", help="the 8b cases only")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    a = ap.parse_args()
    print("| case | default sim ms | objective ms | bound ms | gap | plan s (user) | solve s (wall) | additive sim ms "
          "| additive plan s | --overlap sim ms | best recipe (sim ms) | target met |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for name, args in CASES:
        if (a.quick and "70b" in name) or a.only not in name:
            continue
        replay = "--replay" in args
        pipelined = "pp" in ",".join(args)
        d, t_d = run(a.bin, args + (["--objective", "overlap"] if replay else []))
        add, t_a = run(a.bin, args + ["--objective", "additive"])
        if pipelined:
            print(f"| {name} | - | {fmt(d['step_us'] / 1000 if d else None)} "
                  f"| {fmt(d['lower_bound_us'] / 1000 if d else None)} | {100 * d['gap']:.2f}% | {t_d:.2f} | - "
                  f"| - (step {fmt(add['step_us'] / 1000 if add else None)}) | {t_a:.2f} | - | - | - |", flush=True)
            continue
        ov = None if replay else run(a.bin, args + ["--overlap"])[0]
        recipes = {} if replay else {r: simulated(run(a.bin, args + ["--algo", r])[0]) for r in RECIPES}
        fitting = {r: s for r, s in recipes.items() if s is not None}
        best = min(fitting.items(), key=lambda kv: kv[1]) if fitting else None
        ds = simulated(d)
        met = ds is not None and all(ds <= s + 1e-6 for s in fitting.values()) and (
            simulated(ov) is None or ds <= simulated(ov) + 1e-6)
        solve_s = sum(v for k, v in (d or {}).get("phase_seconds", {}).items() if k.startswith("solve"))
        print(f"| {name} | {fmt(ds)} | {fmt(d['objective_us'] / 1000 if d else None)} "
              f"| {fmt(d['lower_bound_us'] / 1000 if d else None)} | {100 * d['gap']:.2f}% | {t_d:.2f} | {solve_s:.2f} "
              f"| {fmt(simulated(add))} | {t_a:.2f} | {fmt(simulated(ov))} "
              f"| {best[0] + ' ' + fmt(best[1]) if best else '-'} | {'-' if replay else 'yes' if met else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
