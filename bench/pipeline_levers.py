#!/usr/bin/env python3
"""Where the step and the memory of torchtitan's 405B pipelined job go, and what each lever is
worth (issue 41 item 2), in the calibrated simulator (docs/benchmarks.md "Pipelined runs").

    python3 bench/pipeline_levers.py [--bin build/autoshard] [--default] [--cp]

The job: Llama 3.1 405B on 8x8x8 (pp, dp, tp) of h100-500w, batch 256, seq 8192, 32
microbatches (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 5).  Each
row is one `autoshard plan ... --json` run: torchtitan's layout pinned (`--algo fsdp+tp`, equal
stages, FSDP2's parameters gathered once per step, the least recomputation of its modes that
fits) with one decision changed, or memory-free (`--memory-limit 0`) to give a floor.  With
--default also autoshard's default plan (slow: minutes on 2 cores); with --cp Table 6's row at
seq 131072 (8x2x4x8 pp,dp,cp,tp, batch 16, 8 microbatches): torchtitan's cp+fsdp and the default.

Columns.  step: the simulated step; "vs tt" = the torchtitan row's step / this step - 1 (the
--compare table's "faster by"; 15 % needs a step <= 29.246 / 1.15).  busiest rank: its stages'
microbatch times x M, what the step is made of before the fill and drain (the rest of the step,
"bubble+"); recompute: the mean rank's recomputation in it.  Memory, per device on the rank with
the highest peak (pipeline_refit.cc rank_peaks): state (parameter shards, gradients' and
optimizer state, a microbatch's working set at the forward/backward boundary), the parameters
kept gathered (once per step), the gradients summed over the microbatches before their one
reduction, the activations of the microbatches in flight, and the most passing work of a stage.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Optional

GiB = 2**30
JOB = ["--model", "llama3-405b", "--mesh", "8x8x8", "--mesh-dims", "pp,dp,tp", "--seq", "8192",
       "--batch", "256", "--hardware", "h100-500w"]
CP_JOB = ["--model", "llama3-405b", "--mesh", "8x2x4x8", "--mesh-dims", "pp,dp,cp,tp", "--seq", "131072",
          "--batch", "16", "--hardware", "h100-500w"]
TT = ["--algo", "fsdp+tp", "--recompute", "full"]
IL2 = ["--schedule", "Interleaved1F1B", "--stages-per-rank", "2"]
IL4 = ["--schedule", "Interleaved1F1B", "--stages-per-rank", "4"]


def levers() -> list[tuple[str, list[str]]]:
    """(what, args after JOB) per row; the first is the reference torchtitan row."""
    rows = [
        ("torchtitan Interleaved1F1B v=2 (the --compare row)", TT + IL2),
        ("  full recomputation everywhere (as published; limit 0)", TT + IL2 + ["--memory-limit", "0"]),
        ("  1F1B", TT + ["--schedule", "1F1B"]),
        ("  1F1B, full recomputation everywhere (limit 0)", TT + ["--schedule", "1F1B", "--memory-limit", "0"]),
        ("  as published: 8 microbatches, full recomputation everywhere (limit 0)",
         TT + IL2 + ["--microbatches", "8", "--memory-limit", "0"]),
        ("  16 microbatches", TT + IL2 + ["--microbatches", "16"]),
        ("  8 microbatches (torchtitan's default)", TT + IL2 + ["--microbatches", "8"]),
        ("  v=4", TT + IL4),
        ("  v=4, parameters gathered per use (FSDP2 reshard after forward)", TT + IL4 + ["--param-gather", "per-use"]),
    ]
    rows += [(f"  v=4, memory limit {g} GiB", TT + IL4 + ["--memory-limit", f"{g}GiB"]) for g in (80, 100, 120, 140, 160)]
    rows += [
        ("  v=4, no recomputation, memory-free (floor)", ["--algo", "fsdp+tp", "--recompute", "none", "--memory-limit", "0"] + IL4),
        ("  ZBVZeroBubble, no recomputation, memory-free", ["--algo", "fsdp+tp", "--recompute", "none", "--memory-limit", "0",
                                                          "--schedule", "ZBVZeroBubble"]),
    ]
    return rows


def run(binary: str, args: list[str]) -> tuple[Optional[dict], str]:
    """`plan ARGS --json -q`: (the document, '') or (None, the error's last line)."""
    p = subprocess.run([binary, "plan", *args, "--json", "-q"], capture_output=True, text=True, check=False)
    if p.returncode != 0 or not p.stdout.strip():
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:160]
    return json.loads(p.stdout), ""


def memory(d: dict) -> dict:
    """The peak rank's memory by part (GiB), summing to its peak as rank_peaks does."""
    peaks = d["rank_peak_memory_bytes"]
    r = max(range(len(peaks)), key=lambda i: peaks[i])
    parts = dict.fromkeys(("state", "gathered", "grads", "activations", "handover", "passing"), 0.0)
    for s in d["stages"]:
        if s["pp_rank"] != r:
            continue
        f = s["inflight_microbatches"]
        transient = max(0, s["microbatch_peak_bytes"] - s["boundary_bytes"])
        parts["state"] += s["boundary_bytes"] - s["activation_bytes"] - s["gathered_param_bytes"]
        parts["gathered"] += s["gathered_param_bytes"]
        parts["grads"] += s["deferred_grad_bytes"]
        parts["activations"] += f * s["activation_bytes"]
        parts["handover"] += s["deferred_microbatches"] * s["kept_for_w_bytes"]
        parts["passing"] = max(parts["passing"], transient)
    out = {k: v / GiB for k, v in parts.items()}
    out["peak"] = peaks[r] / GiB
    return out


def fits(d: dict) -> bool:
    """Whether every rank's peak is within the plan's memory limit (0: none)."""
    lim = d.get("memory_limit_bytes", 0)
    return not lim or max(d["rank_peak_memory_bytes"]) <= lim


def times(d: dict) -> dict:
    """Step, busiest rank's work, the rest (fill, drain, waits), mean recomputation (s)."""
    M, P = d["microbatches"], d["mesh_shape"][0]
    work: dict[int, float] = {}
    for s in d["stages"]:
        work[s["pp_rank"]] = work.get(s["pp_rank"], 0.0) + s["microbatch_us"] * M / 1e6
    busiest = max(work.values())
    return {"step": d["step_us"] / 1e6, "bound": d["lower_bound_us"] / 1e6, "busiest": busiest,
            "rest": d["step_us"] / 1e6 - busiest,
            "recompute": sum(s["recompute_us"] for s in d["stages"]) * M / P / 1e6}


def row(name: str, d: Optional[dict], err: str, ref: Optional[float]) -> str:
    """One Markdown row."""
    if d is None:
        return f"| {name} | no plan: {err} |" + " |" * 11
    t, m = times(d), memory(d)
    sched = d["schedule"] + (f" v={d['stages_per_rank']}" if d["stages_per_rank"] > 1 else "") + f", M={d['microbatches']}"
    vs = f"{(ref / t['step'] - 1) * 100:+.1f} %" if ref else "-"
    over = "" if fits(d) else " (over)"
    return (f"| {name} | {sched} | {t['step']:.3f} | {vs} | {t['busiest']:.3f} | {t['recompute']:.3f} | {t['rest']:.3f} "
            f"| {m['peak']:.2f}{over} | {m['state']:.1f} | {m['gathered']:.1f} | {m['grads']:.1f} "
            f"| {m['activations']:.1f} | {m['passing'] + m['handover']:.1f} |")


HEAD = ("| row | schedule | step s | vs tt | busiest rank s | recompute s | bubble+ s | peak GiB "
        "| state | gathered | summed grads | activations | passing |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("AUTOSHARD_BIN", "build/autoshard"))
    ap.add_argument("--default", action="store_true", help="also autoshard's default plan (minutes)")
    ap.add_argument("--cp", action="store_true", help="also Table 6's seq 131072 cp row")
    a = ap.parse_args()
    if not (os.path.isfile(a.bin) and os.access(a.bin, os.X_OK)):
        print(f"pipeline_levers.py: {a.bin}: not an executable autoshard binary (--bin)", file=sys.stderr)
        return 1
    print(HEAD)
    ref = None
    rows = levers() + ([("autoshard default plan", [])] if a.default else [])
    for name, args in rows:
        d, err = run(a.bin, JOB + args + ([] if "--microbatches" in args else ["--microbatches", "32"]))
        if ref is None:
            if d is None:
                print(f"pipeline_levers.py: the torchtitan row has no plan: {err}", file=sys.stderr)
                return 1
            ref = d["step_us"] / 1e6
        print(row(name, d, err, ref), flush=True)
    print(f"\n15 % faster than the torchtitan row: step <= {ref / 1.15:.3f} s")
    if a.cp:
        print("\nTable 6, seq 131072, 8x2x4x8 pp,dp,cp,tp, batch 16, M=8 (vs tt: the better torchtitan row):\n")
        print(HEAD)
        tt_cp = ["--algo", "cp+fsdp", "--recompute", "full"]
        cp_rows = (("torchtitan cp+fsdp 1F1B", tt_cp + ["--schedule", "1F1B"]),
                   ("torchtitan cp+fsdp Interleaved1F1B v=2", tt_cp + IL2),
                   ("autoshard default plan", []))
        done = [(name, *run(a.bin, CP_JOB + args)) for name, args in cp_rows]
        tt = [d["step_us"] / 1e6 for _, d, _ in done[:2] if d is not None and fits(d)]
        for name, d, err in done:
            print(row(name, d, err, min(tt) if tt else None))
    print("\ncommands: autoshard plan " + " ".join(JOB) + " [--microbatches 32] ARGS --json -q")
    return 0


if __name__ == "__main__":
    sys.exit(main())
