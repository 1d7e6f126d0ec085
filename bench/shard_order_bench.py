#!/usr/bin/env python3
"""Issue 39 item 5: shard orders measured through the CLI.  One Markdown table: for each case the
objective and the simulated step without and with `--shard-orders`, AutoParallel's placements
evaluated in autoshard's model beside the plan autoshard chooses, and the planning time of the
whole process (median of --repeats runs, user + system CPU seconds, the two settings run
alternately so that a shared machine's load falls on both) as a ratio with / without.

    AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python build/venv/bin/python \\
        bench/shard_order_bench.py --bin build/autoshard [--ap-placements AP.json] [--repeats 5]

Cases: llama3-8b on 16x8 (dp, tp) at seq 8192, batch 32 (the optimum and `--algo fsdp+tp`,
which pins FSDP2's tp-first layout either way); AutoParallel's LLaMA-3 8B traced on 8x8
(tests/fixtures/ap_llama3_8b_8x8.replay, its additive objective); planning time of llama3-8b
8x8 and llama3-70b 8x8x8 (dp, fsdp, tp).

--ap-placements: AutoParallel's own plan of its LLaMA-3 8B on 8x8 (bench/autoparallel_plan.py
writes it and its graph).  Its parameters (`primals_K`, in parameter order) and its matmuls'
outputs (ap_pinned_replay) are pinned on the replay's graph, the rest solved; AutoParallel
orders a parameter's `S(0)S(0)` tp-first at run time (its shardings/ordered_sharding.py), so
with `--shard-orders` such a parameter is pinned as `_S(0,tp)S(0)`, without as DTensor's default.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from typing import Optional

REPLAY = "tests/fixtures/ap_llama3_8b_8x8.replay"
L16 = ["--model", "llama3-8b", "--mesh", "16x8", "--mesh-dims", "dp,tp", "--seq", "8192",
       "--batch", "32"]
PLAN_CASES = [
    ("llama3-8b 16x8 seq 8192 batch 32, optimum", L16),
    ("same, `--algo fsdp+tp` (tp-first either way)", L16 + ["--algo", "fsdp+tp"]),
    ("AP's LLaMA-3 8B traced, 8x8, optimum (additive)", ["--replay", REPLAY]),
]
TIME_CASES = [
    ("llama3-8b 8x8 dp,tp, optimum", ["--model", "llama3-8b", "--mesh", "8x8", "--mesh-dims", "dp,tp"]),
    ("llama3-70b 8x8x8 dp,fsdp,tp, optimum",
     ["--model", "llama3-70b", "--mesh", "8x8x8", "--mesh-dims", "dp,fsdp,tp"]),
]
ORDERS = ["--shard-orders"]


def run(binary: str, args: list[str]) -> tuple[Optional[dict], float]:
    """`plan ARGS --json --threads 1`: (the result or None, user + system CPU seconds)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([binary, "plan", *args, "--json", "--threads", "1"], capture_output=True,
                       text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0 or not p.stdout.strip():
        sys.stderr.write(f"plan {' '.join(args)}: rc {p.returncode}: {p.stderr[-400:]}\n")
        return None, cpu
    return json.loads(p.stdout), cpu


def figures(doc: Optional[dict]) -> tuple[Optional[float], Optional[float]]:
    """(objective ms, simulated step ms) of a plan."""
    if not doc or not doc.get("has_solution"):
        return None, None
    return doc["objective_us"] / 1e3, doc["simulation"]["step_us"] / 1e3


def ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.1f}"


def pct(x: Optional[float], base: Optional[float]) -> str:
    return "-" if x is None or not base else f"{100 * (x / base - 1):+.1f} %"


def _mm_key(name: str) -> int:
    m = re.fullmatch(r"mm(?:_(\d+))?", name)
    return int(m.group(1) or 0) if m else -1


def _flat_spec(spec: str, rank: int) -> Optional[str]:
    """A [b, s, n] matmul output's spec on autoshard's [b*s, n]: S(0), S(1) -> S(0), S(2) -> S(1).
    None where the rows are cut sequence before batch (no plain spec of the flat dim); a sequence
    cut under a batch cut is priced as the row cut of the same size."""
    parts = re.findall(r"_?S\(\d+(?:,\d+)?\)|P\([a-z]+\)|R", spec)
    out, seen_seq = [], False
    for p in parts:
        m = re.fullmatch(r"S\((\d+)\)", p)
        if rank == 3 and m:
            d = int(m.group(1))
            if d == 0 and seen_seq:
                return None
            seen_seq |= d == 1
            p = f"S({max(d - 1, 0)})"
        out.append(p)
    return "".join(out)


def _transposed(spec: str) -> str:
    return re.sub(r"S\(([01])\)", lambda m: f"S({1 - int(m.group(1))})", spec)


def ap_pinned_replay(ap_file: str, strided: bool, out: str) -> tuple[int, int]:
    """Writes REPLAY with AutoParallel's parameter and matmul placements pinned to `out`;
    returns (parameters pinned, matmuls pinned).  Needs AUTOSHARD_CORE (the Python module).

    AutoParallel's joint graph (AP_FILE.graph.json, bench/autoparallel_plan.py) writes each
    linear as an einsum on [b, s, k]; autoshard's trace as an mm on [b*s, k].  They are paired in
    graph order, each mm with the next unpaired einsum of its shape (a weight gradient may be
    transposed -- always, square ones included --, a backward pair may come in the other order);
    only outputs are pinned."""
    from autoshard.core import ShardingOptimizer

    ap = json.load(open(ap_file))["placements"]
    ap_graph = json.load(open(ap_file + ".graph.json"))
    so = ShardingOptimizer.load_replay(REPLAY)
    nodes = json.loads(so.graph.to_json())["nodes"]
    params = [n["name"] for n in nodes if n["kind"] == "parameter"]
    ap_params = sorted((k for k in ap if re.fullmatch(r"primals_\d+", k)),
                       key=lambda k: int(k.split("_")[1]))[:len(params)]
    tp = dict(zip(so.mesh.dim_names, so.mesh.shape)).get("tp", 1)
    for mine, theirs in zip(params, ap_params):
        spec = ap[theirs]["output"]
        if strided and spec == "S(0)S(0)":
            spec = f"_S(0,{tp})S(0)"  # AutoParallel's run-time order (ordered_sharding.py)
        so.add_node_constraint(mine, spec, name=f"ap:{mine}")
    einsums = [(k, v[1]) for k, v in ap_graph.items() if v[0] == "aten.einsum.default"]
    used = [False] * len(einsums)
    pinned, pos = 0, 0
    for n in sorted((n for n in nodes if n.get("op") == "mm"), key=lambda n: _mm_key(n["name"])):
        want = n["outputs"][0]["shape"]
        for j in range(pos, min(pos + 4, len(einsums))):
            k, shape = einsums[j]
            if used[j]:
                continue
            if len(shape) == 3 and [shape[0] * shape[1], shape[2]] == want:
                spec = _flat_spec(ap[k]["output"], 3)
            elif len(shape) == 2 and shape[::-1] == want:
                # A weight gradient: AutoParallel's einsum writes it [in, out], autoshard's mm
                # [out, in] -- square ones (wq, wo) too, which match either way round.
                spec = _transposed(ap[k]["output"])
            elif shape == want:
                spec = ap[k]["output"]
            else:
                continue
            used[j] = True
            while pos < len(used) and used[pos]:
                pos += 1
            if spec is not None:
                so.add_node_constraint(n["name"], spec, name=f"ap:{n['name']}")
                pinned += 1
            break
    so.save_replay(out)
    return len(params), pinned


def plan_rows(a) -> list[str]:
    rows = []
    cases = list(PLAN_CASES)
    tmp = tempfile.mkdtemp(prefix="shard-order-bench-")
    if a.ap_placements:
        for strided in (False, True):
            path = os.path.join(tmp, f"ap{int(strided)}.replay")
            np_, nm = ap_pinned_replay(a.ap_placements, strided, path)
            cases.append((f"AP's own plan pinned ({np_} parameters, {nm} matmuls)"
                          + (" as `_S(0,tp)S(0)`" if strided else " in default order"), ["--replay", path]))
    optimum = {}
    for name, args in cases:
        # A strided pin needs the ordered strategies: that replay runs with --shard-orders only.
        base = (None, None) if "_S(0" in name else figures(run(a.bin, args)[0])
        orders = figures(run(a.bin, args + ORDERS)[0])
        if name.endswith("optimum (additive)"):
            optimum = {"off": base[0], "on": orders[0]}
        vs = ""
        if name.startswith("AP's own plan"):
            # Each pinned replay holds one setting: compare it with the optimum of the same setting.
            key = "on" if "_S(0" in name else "off"
            vs = f" ({pct(orders[0] if key == 'on' else base[0], optimum.get(key))} vs the optimum)"
        rows.append(f"| {name}{vs} | {ms(base[0])} | {ms(base[1])} | {ms(orders[0])} | {ms(orders[1])} "
                    f"| {pct(orders[0], base[0])} | | | |")
    return rows


def time_rows(a) -> list[str]:
    rows = []
    for name, args in TIME_CASES:
        off, on, obj = [], [], [None, None]
        for _ in range(a.repeats):
            d0, t0 = run(a.bin, args)
            d1, t1 = run(a.bin, args + ORDERS)
            off.append(t0)
            on.append(t1)
            obj = [figures(d0), figures(d1)]
        m0, m1 = statistics.median(off), statistics.median(on)
        rows.append(f"| {name} | {ms(obj[0][0])} | {ms(obj[0][1])} | {ms(obj[1][0])} | {ms(obj[1][1])} "
                    f"| {pct(obj[1][0], obj[0][0])} | {m0:.2f} | {m1:.2f} | **{m1 / m0:.2f}** |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/autoshard")
    ap.add_argument("--ap-placements", help="AutoParallel's save_placements JSON (8x8 LLaMA-3 8B)")
    ap.add_argument("--repeats", type=int, default=5, help="planning-time runs per setting")
    ap.add_argument("--no-timing", action="store_true")
    a = ap.parse_args()
    print("| case | objective ms | simulated ms | objective ms, `--shard-orders` | simulated ms, "
          "`--shard-orders` | objective with / without | plan CPU s without | with | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in plan_rows(a):
        print(r, flush=True)
    if not a.no_timing:
        for r in time_rows(a):
            print(r, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
