#!/usr/bin/env python3
"""Python front end figures: tracing time/CPU of an example model, and optimize_placement from
Python against `autoshard plan` on the same graph file (docs/benchmarks.md, section Python).

    AUTOSHARD_CORE=build-python/_core*.so PYTHONPATH=python build/venv/bin/python \
        bench/python_bench.py --cli build-python/autoshard [--model llama3_8b --batch 8 --seq 2048]

Prints a table: phase, wall seconds, CPU seconds.  Peak memory of the trace: run
`/usr/bin/time -v python/autoshard-trace ...` (Maximum resident set size).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3_8b", help="factory in autoshard.tracer.examples.llama")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mesh", default="2x8")
    ap.add_argument("--dims", default="dp,tp")
    ap.add_argument("--cli", required=True, help="the autoshard binary")
    a = ap.parse_args()
    import torch  # noqa: F401  (import time is not part of the figures)

    from autoshard import core
    from autoshard.tracer import examples  # noqa: F401
    from autoshard.tracer.examples import llama
    from autoshard.tracer.export import to_graph_dict, write_graph_json
    from autoshard.tracer.trace import trace_training_step

    rows = []
    factory = getattr(llama, a.model)
    (m, i, l, t), w, c = timed(lambda: factory(batch=a.batch, seq=a.seq))
    rows.append(("build model on meta", w, c))
    traced, w, c = timed(lambda: trace_training_step(m, i, l, t))
    rows.append(("trace (dispatch recorder)", w, c))
    graph, w, c = timed(lambda: to_graph_dict(traced, a.model))
    rows.append(("export to graph dict", w, c))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.graph.json")
        write_graph_json(graph, path)
        shape = [int(x) for x in a.mesh.split("x")]
        mesh = core.Mesh(shape, a.dims.split(","))
        opt, w, c = timed(lambda: core.plan_graph(path, mesh))
        rows.append(("optimize_placement (Python, load+plan)", w, c))
        cmd = [a.cli, "plan", "--graph", path, "--mesh", a.mesh, "--mesh-dims", a.dims, "--json"]
        r, w, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True, text=True))
        rows.append(("autoshard plan --graph (CLI process)", w, float("nan")))
        cli = json.loads(r.stdout)
        same = abs(cli["objective_us"] - opt.solution.objective_us) <= 1e-9 * cli["objective_us"]
    print(f"{'phase':<42} {'wall s':>8} {'cpu s':>8}")
    for name, w, c in rows:
        print(f"{name:<42} {w:>8.2f} {c:>8.2f}")
    print(f"nodes {len(graph['nodes'])}; same objective as the CLI: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
