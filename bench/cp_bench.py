#!/usr/bin/env python3
"""Issue 25 item 2: context parallelism as a planner decision, through the CLI.

For each long-sequence case on a mesh with a ``cp`` dim: the default plan (context-parallel
attention offered), its planning time (user CPU seconds of the process, one solver thread),
the CP kind it chose (ring / allgather, on which dim), its simulated step; the best plan
without context parallelism (``--no-context-parallel``) and torchtitan's CP x FSDP recipe
(``--algo cp+fsdp``: sequence split on cp, FSDP over the data dims and cp, TP on tp), each
simulated by the step simulator.  Prints a Markdown table.

    bench/cp_bench.py [--bin build/autoshard] [--quick]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from typing import Optional

CASES = [
    ("llama3-8b seq 32k, 2x4 cp,tp", ["--model", "llama3-8b", "--seq", "32768", "--batch", "1",
                                      "--mesh", "2x4", "--mesh-dims", "cp,tp"]),
    ("llama3-8b seq 128k, 8x8 cp,tp", ["--model", "llama3-8b", "--seq", "131072", "--batch", "1",
                                       "--mesh", "8x8", "--mesh-dims", "cp,tp"]),
    ("llama3-8b seq 32k batch 8, 2x4x8 dp,cp,tp",
     ["--model", "llama3-8b", "--seq", "32768", "--batch", "8", "--mesh", "2x4x8", "--mesh-dims", "dp,cp,tp"]),
    ("llama3-70b seq 32k, 4x8 cp,tp", ["--model", "llama3-70b", "--seq", "32768", "--batch", "1",
                                       "--mesh", "4x8", "--mesh-dims", "cp,tp"]),
    ("llama3-70b seq 128k, 16x8 cp,tp", ["--model", "llama3-70b", "--seq", "131072", "--batch", "1",
                                         "--mesh", "16x8", "--mesh-dims", "cp,tp"]),
]


def run(binary: str, args: list[str]) -> tuple[Optional[dict], float]:
    """Runs ``plan --json``; returns (result or None, user CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    p = subprocess.run([binary, "plan", *args, "--json", "--threads", "1"], capture_output=True, text=True)
    user = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    if p.returncode != 0 or not p.stdout.strip():
        sys.stderr.write(f"{' '.join(args)}: {p.stderr.strip()[:300]}\n")
        return None, user
    return json.loads(p.stdout), user


def simulated(doc: Optional[dict]) -> Optional[float]:
    """Simulated step in ms of a plan that fits, else None."""
    if not doc or not doc.get("has_solution"):
        return None
    if doc.get("memory_limit_bytes", 0) and doc["peak_memory_bytes"] > doc["memory_limit_bytes"]:
        return None
    return doc["simulation"]["step_us"] / 1000


def objective(doc: Optional[dict]) -> Optional[float]:
    """The plan's objective (overlap-aware step estimate) in ms, or None."""
    return doc["objective_us"] / 1000 if doc and doc.get("has_solution") else None


def cp_kind(doc: Optional[dict]) -> str:
    """'ring on cp (160 ops)' style summary of the plan's context parallelism."""
    if not doc or not doc.get("context_parallel"):
        return "none"
    return ", ".join(f"{u['kind']} on {u['mesh_dim']} ({u['attention_ops']} ops)" for u in doc["context_parallel"])


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/autoshard")
    ap.add_argument("--quick", action="store_true", help="the 8b cases only")
    ap.add_argument("--case", default="", help="only the cases whose name contains this")
    a = ap.parse_args()
    print("| case | plan s (user) | CP chosen | sim ms | objective ms | gap | no-CP sim / obj ms | "
          "cp+fsdp sim / obj ms (its CP) | sim saving vs no-CP | sim saving vs cp+fsdp |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|---:|")
    for name, args in CASES:
        if (a.quick and "70b" in name) or a.case not in name:
            continue
        best, secs = run(a.bin, args)
        nocp, _ = run(a.bin, [*args, "--no-context-parallel"])
        titan, _ = run(a.bin, [*args, "--algo", "cp+fsdp"])
        s, n, t = simulated(best), simulated(nocp), simulated(titan)
        gap = f"{best['gap'] * 100:.2f}%" if best and best.get("gap") is not None else "-"
        vs = lambda o: "-" if s is None or o is None else f"{(o - s) / o * 100:+.1f}%"
        print(f"| {name} | {secs:.2f} | {cp_kind(best)} | {fmt(s)} | {fmt(objective(best))} | {gap} | "
              f"{fmt(n)} / {fmt(objective(nocp))} | {fmt(t)} / {fmt(objective(titan))} ({cp_kind(titan)}) | "
              f"{vs(n)} | {vs(t)} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
