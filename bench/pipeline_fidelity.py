#!/usr/bin/env python3
"""Pipeline simulation fidelity: torchtitan's published Llama 3.1 405B runs on 512 H100s
(PP 8 x FSDP x TP 8, Tables 5 and 6 of pytorch/torchtitan
`benchmarks/llama3_h100_202412_torchtitan.md`) planned by `autoshard plan` with torchtitan's
layout pinned (`--algo`, equal stages, the published schedule, full recomputation) and
converted to tokens/s/GPU (docs/benchmarks.md, section Fidelity).

    python3 bench/pipeline_fidelity.py [--bin build/autoshard]

Conversions.  torchtitan logs tokens/s per GPU as the rank's tokens over the step time and
the non-data-parallel degree cp x tp x pp (train.py at the benchmarked commit 9dec370:
`ntokens_since_last_log += labels.numel()`, counted before the context-parallel split, and
`tps = ntokens_since_last_log / (time_delta * parallel_dims.non_data_parallel_size)`), so
    step = local batch x seq / (tps x cp x tp x pp).
Microbatches: none are given in the tables, so torchtitan's default at 9dec370 holds, the pp
degree (torchtitan/parallelisms/pipelining_utils.py build_pipeline_schedule: `n_microbatches =
job_config.experimental.pipeline_parallel_degree` when unset): 8, which is also autoshard's
default (--microbatches absent).  Interleaved 1F1B: 2 stages per rank
(generate_split_points' default for multi-stage schedules), equal stages.

The published runs are compiled, Float8 and AsyncTP.  The simulator prices the first two per op
(`--compile --float8`, docs/cost-model.md "Compile and Float8"): the linear layers' matmuls (not
the output projection, as torchtitan converts them) at the dense FP8 tensor-core peak, twice the
BF16 one (NVIDIA H100 datasheet), after the cast of their operands to FP8, attention left in
BF16; memory-bound ops (the casts among them) divided by the
compile speed-up derived from Table 1's compile-only row (`bench/fidelity.py --derive-compile`).
Float8 thus gains most where the linear layers dominate the step and least where attention does
(the long-sequence CP row), which a uniform factor cannot show.  AsyncTP is not modelled: it
only hides TP collectives behind matmuls, so it can shorten the simulated step, never lengthen it
(torchtitan Table 4 measures x1.057 on 70B).  The eager bf16 step is printed beside it.
The band "at peak" reruns each row at the two ends of h100-500w's unknown sustained peak
(torchtitan's footnote 2: between H100 NVL 835.5 and SXM 989 dense BF16 TFLOPS, FP8 twice each).
Memory: the stages' parameters stay gathered over the microbatches (FSDP2 under torchtitan's
PP, PlannerOptions::params_gathered_once); the simulated peak counts that copy (the stage's
parameters at their size gathered over dp, held all step).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

TT_2412 = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
# The published runs' torch.compile + Float8, priced per op by the simulator.
KERNELS = ["--compile", "--float8"]
# h100-500w's sustained peak is unknown (torchtitan's footnote 2): the two ends it names, dense
# BF16 / FP32 / FP8 TFLOPS of H100 NVL and SXM (NVIDIA H100 datasheet; FP8 halved from the
# sparsity figures 3341 and 3958).
PEAK_BOUNDS = (("835.5", 835.5, 60.0, 1670.5), ("989", 989.0, 67.0, 1979.0))


@dataclass
class Row:
    """One published 405B measurement and the autoshard command that pins its layout."""

    name: str
    source: str
    tps: float  # published tokens/s/GPU
    local_batch: int
    seq: int
    non_dp: int  # cp x tp x pp
    mem_gib: float
    args: list[str]

    def step_s(self) -> float:
        """The step time the published figure implies."""
        return self.local_batch * self.seq / (self.tps * self.non_dp)

    def tps_of(self, step_s: float) -> float:
        """tokens/s/GPU of a step time, as torchtitan logs it."""
        return self.local_batch * self.seq / (step_s * self.non_dp)


def rows() -> list[Row]:
    """Table 5's two schedules and three rows of Table 6 (figures checked against TT_2412)."""
    base = ["--model", "llama3-405b", "--recompute", "full", "--hardware", "h100-500w",
            "--memory-limit", "0"]
    t5 = base + ["--mesh", "8x8x8", "--mesh-dims", "pp,dp,tp", "--seq", "8192", "--batch", "256",
                 "--algo", "fsdp+tp"]
    return [
        Row("T5 1F1B", TT_2412 + " Table 5", 100, 32, 8192, 64, 82.5, t5 + ["--schedule", "1F1B"]),
        Row("T5 Interleaved 1F1B", TT_2412 + " Table 5", 128, 32, 8192, 64, 72.7,
            t5 + ["--schedule", "Interleaved1F1B"]),
        # Table 6: TP 8, PP 8, local batch 8, 1F1B; global batch = FSDP x 8.
        Row("T6 FSDP 8, CP 1, seq 32768", TT_2412 + " Table 6", 76, 8, 32768, 64, 75.3,
            base + ["--mesh", "8x8x8", "--mesh-dims", "pp,dp,tp", "--seq", "32768", "--batch", "64",
                    "--algo", "fsdp+tp", "--schedule", "1F1B"]),
        Row("T6 FSDP 4, CP 2, seq 65536", TT_2412 + " Table 6", 47, 8, 65536, 128, 75.9,
            base + ["--mesh", "8x4x2x8", "--mesh-dims", "pp,dp,cp,tp", "--seq", "65536", "--batch", "32",
                    "--algo", "cp+fsdp", "--schedule", "1F1B"]),
        Row("T6 FSDP 2, CP 4, seq 131072", TT_2412 + " Table 6", 31, 8, 131072, 256, 77.1,
            base + ["--mesh", "8x2x4x8", "--mesh-dims", "pp,dp,cp,tp", "--seq", "131072", "--batch", "16",
                    "--algo", "cp+fsdp", "--schedule", "1F1B"]),
    ]


def with_peak(args: list[str], path: str) -> list[str]:
    """ARGS with --hardware replaced by the hardware JSON file at PATH."""
    out = list(args)
    out[out.index("--hardware") + 1] = path
    return out


def simulate(binary: str, args: list[str]) -> dict:
    """Runs `autoshard plan ARGS --json`; returns the pipelined step (s) and peak (GiB)."""
    cmd = [binary, "plan", *args, "--json", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    d = json.loads(proc.stdout)
    return {"step_s": d["step_us"] / 1e6, "bubble_s": d["bubble_us"] / 1e6,
            "peak_gib": max(d["rank_peak_memory_bytes"]) / 2**30, "schedule": d["schedule"],
            "v": d["stages_per_rank"], "M": d["microbatches"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("AUTOSHARD_BIN", "build/autoshard"))
    a = ap.parse_args()
    if not (os.path.isfile(a.bin) and os.access(a.bin, os.X_OK)):
        print(f"pipeline_fidelity.py: {a.bin}: not an executable autoshard binary (--bin)", file=sys.stderr)
        return 1
    try:
        table(a.bin)
    except (RuntimeError, json.JSONDecodeError, KeyError) as e:
        print(f"pipeline_fidelity.py: {e}", file=sys.stderr)
        return 1
    return 0


def peak_files(tmp: str) -> list[str]:
    """Hardware JSON files for h100-500w at the two ends of its unknown peak, written in TMP."""
    paths = []
    for tag, bf16, fp32, fp8 in PEAK_BOUNDS:
        path = os.path.join(tmp, f"h100-500w-{tag}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"base": "h100-500w", "name": f"h100-500w@{tag}", "peak_bf16_tflops": bf16,
                       "peak_fp32_tflops": fp32, "peak_fp8_tflops": fp8}, f)
        paths.append(path)
    return paths


def table(binary: str) -> None:
    """Plans every row and prints the Markdown table, the Table 5 ratio and the commands."""
    print("| run | schedule | published | published step | simulated step: eager bf16 "
          "| compile + Float8 | bubble | tok/s/GPU | sim / published tok/s | at peak 835.5 .. 989 "
          "| peak GiB: sim / published |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    sims, eager = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        peaks = peak_files(tmp)
        for r in rows():
            e = simulate(binary, r.args)
            s = simulate(binary, r.args + KERNELS)
            eager[r.name], sims[r.name] = e, s
            tps = r.tps_of(s["step_s"])
            band = " .. ".join(f"{r.tps_of(simulate(binary, with_peak(r.args, p) + KERNELS)['step_s']) / r.tps:.3f}"
                               for p in peaks)
            sched = s["schedule"] + (f" v={s['v']}" if s["v"] > 1 else "") + f", M={s['M']}"
            print(f"| {r.name} | {sched} | {r.tps:g} tok/s/GPU | {r.step_s():.2f} s | {e['step_s']:.2f} s "
                  f"| {s['step_s']:.2f} s | {s['bubble_s']:.2f} s | {tps:.1f} | {tps / r.tps:.3f} | {band} "
                  f"| {s['peak_gib']:.1f} / {r.mem_gib} |")
    print()
    for label, d in (("compile + Float8", sims), ("eager bf16", eager)):
        ratio = d["T5 1F1B"]["step_s"] / d["T5 Interleaved 1F1B"]["step_s"]
        print(f"Table 5, 1F1B : Interleaved 1F1B step, {label}: simulated {ratio:.3f}, "
              f"published {128 / 100:.3f} ({(ratio / 1.28 - 1) * 100:+.1f} %)")
    print()
    print("commands (each with --json --threads 1; the compile + Float8 column adds "
          + " ".join(KERNELS) + "):")
    for r in rows():
        print("  autoshard plan " + " ".join(r.args))


if __name__ == "__main__":
    sys.exit(main())
