#!/usr/bin/env python3
"""Python front end figures: tracing time/CPU of an example model, optimize_placement from
Python against `autoshard plan` on the same graph file, and the whole AutoParallel workflow
from Python (trace, export, graph hand-off, plan) against the CLI planning the built-in model
of the same architecture (docs/benchmarks.md, section Python).

    AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python build/venv/bin/python \
        bench/python_bench.py --cli build/autoshard [--model llama3_8b --batch 8 --seq 2048 \
        --mesh 8x8 --builtin llama3-8b --repeat 3 --phases 10]

Prints a table: phase, wall seconds, CPU seconds (the CLI's: its user + system time).  On a
shared machine CPU seconds are the steadier figure; the end-to-end rows are the fastest of
--repeat runs of each side.  Peak memory of the trace: run
`/usr/bin/time -v python/autoshard-trace ...` (Maximum resident set size).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def run_cli(cmd: list[str]):
    """(completed process, wall s, CPU s of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r, w, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True, text=True))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r, w, cpu


def phase_table(workflow, runs: int) -> None:
    """Runs the workflow `runs` times with a CPU timer on each phase; prints the fastest of each.

    The timers wrap the functions AutoParallel calls (the trace, the export, the dict hand-off,
    the solve, the placements' conversion) and Python's collector callbacks; "rest" is the
    workflow's time outside them."""
    import gc

    import autoshard.api as api
    import autoshard.optimizer as optimizer
    import autoshard.tracer.export as export
    import autoshard.tracer.trace as trace
    from autoshard import core

    acc: dict = {}

    def timer(label, fn):
        def wrapped(*args, **kwargs):
            c = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[label] = acc.get(label, 0.0) + time.process_time() - c
        return wrapped

    patches = [(trace, "trace_training_step", "trace"), (export, "to_graph_dict", "export"),
               (api, "convert_placements", "placements (when read)"),
               (optimizer.ShardingOptimizer, "get_solution", "solve")]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    saved_from_dict = core.Graph.from_dict
    # Builds with ShardingOptimizer.from_dict hand the dict over with it (the graph read
    # straight into the optimizer): timed as the hand-off.
    saved_opt_from_dict = getattr(core.ShardingOptimizer, "from_dict", None)
    gc_start: list = []

    def on_gc(phase, info):
        if phase == "start":
            gc_start.append(time.process_time())
        elif gc_start:
            key = f"collection (gen {info['generation']})"
            acc[key] = acc.get(key, 0.0) + time.process_time() - gc_start.pop()
    best: dict = {}
    try:
        for obj, name, label in patches:
            setattr(obj, name, timer(label, getattr(obj, name)))
        core.Graph.from_dict = staticmethod(timer("from_dict", saved_from_dict))
        if saved_opt_from_dict is not None:
            core.ShardingOptimizer.from_dict = staticmethod(timer("from_dict",
                                                                  saved_opt_from_dict))
        gc.callbacks.append(on_gc)
        for _ in range(runs):
            acc.clear()
            c = time.process_time()
            result = workflow()
            dict(result[0])  # read the placements (a lazy mapping in recent builds)
            total = time.process_time() - c
            # A collection runs inside whatever phase allocates: its time is in that phase's
            # timer too, so it is shown apart ("of which") and not subtracted twice.
            acc["rest"] = total - sum(v for k, v in acc.items() if not k.startswith("collection"))
            acc["total"] = total
            for k, v in acc.items():
                best.setdefault(k, []).append(v)
    finally:
        gc.callbacks.remove(on_gc)
        for obj, name, fn in saved:
            setattr(obj, name, fn)
        core.Graph.from_dict = saved_from_dict
        if saved_opt_from_dict is not None:
            core.ShardingOptimizer.from_dict = saved_opt_from_dict
    print(f"\nAutoParallel workflow by phase (CPU s, fastest of {runs}; a collection counts "
          "only in the runs it happens in, and is also inside the phase it interrupted):")
    for k, v in best.items():
        print(f"  {k:<38} {min(v):>8.3f}   ({len(v)} of {runs} runs)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3_8b", help="factory in autoshard.tracer.examples.llama")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--mesh", default="2x8")
    ap.add_argument("--dims", default="dp,tp")
    ap.add_argument("--cli", required=True, help="the autoshard binary")
    ap.add_argument("--builtin", default="llama3-8b",
                    help="the CLI's built-in model of the same architecture (--model)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the AutoParallel workflow and of the CLI, alternating; the "
                         "table shows the fastest of each (a shared machine's noise only adds "
                         "time)")
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="also run N workflows with a CPU timer on each phase (trace, export, "
                         "from_dict, solve, placements, collections) and print the fastest of "
                         "each")
    a = ap.parse_args()
    import torch  # noqa: F401  (import time is not part of the figures)

    from autoshard import AutoParallel, core
    from autoshard.tracer import examples  # noqa: F401
    from autoshard.tracer.examples import llama
    from autoshard.tracer.export import to_graph_dict, write_graph_json
    from autoshard.tracer.trace import gc_paused, trace_training_step

    rows = []
    factory = getattr(llama, a.model)
    (m, i, l, t), w, c = timed(lambda: factory(batch=a.batch, seq=a.seq))
    rows.append(("build model on meta", w, c))
    traced, w, c = timed(lambda: trace_training_step(m, i, l, t))
    rows.append(("trace (dispatch recorder)", w, c))
    graph, w, c = timed(lambda: to_graph_dict(traced, a.model))
    rows.append(("export to graph dict", w, c))
    with gc_paused():  # as AutoParallel.build hands it off
        _, w, c = timed(lambda: core.Graph.from_json(json.dumps(graph, check_circular=False)))
        rows.append(("hand-off as JSON text (dumps+from_json)", w, c))
        if hasattr(core.Graph, "from_dict"):  # absent in builds before it (for before/after)
            _, w, c = timed(lambda: core.Graph.from_dict(graph))
            rows.append(("hand-off as dict (from_dict)", w, c))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.graph.json")
        write_graph_json(graph, path)
        shape = [int(x) for x in a.mesh.split("x")]
        mesh = core.Mesh(shape, a.dims.split(","))
        opt, w, c = timed(lambda: core.plan_graph(path, mesh))
        rows.append(("optimize_placement (Python, load+plan)", w, c))
        cmd = [a.cli, "plan", "--graph", path, "--mesh", a.mesh, "--mesh-dims", a.dims, "--json"]
        r, w, c = run_cli(cmd)
        rows.append(("autoshard plan --graph (CLI process)", w, c))
        cli = json.loads(r.stdout)
        same = abs(cli["objective_us"] - opt.solution.objective_us) <= 1e-9 * cli["objective_us"]
    # The AutoParallel workflow end to end, on a fresh model (nothing cached by the runs above
    # but PyTorch's own lazy imports), against the CLI on its built-in model.
    m, i, l, t = factory(batch=a.batch, seq=a.seq)

    def autoparallel():
        with AutoParallel(m, lambda: (i, t), mesh, loss_fn=l) as autop:
            return autop.optimize_placement(), autop.sharding_optimizer.solution
    cmd = [a.cli, "plan", "--model", a.builtin, "--batch", str(a.batch), "--seq", str(a.seq),
           "--mesh", a.mesh, "--mesh-dims", a.dims, "--json"]
    # The two sides alternate, run by run, so that a burst of load on the shared machine
    # slows both rather than one side's runs.
    runs, cli_runs = [], []
    for _ in range(a.repeat):
        runs.append(timed(autoparallel))
        cli_runs.append(run_cli(cmd))
    plan = runs[0][0][1]
    w_py, c_py = min(r[1] for r in runs), min(r[2] for r in runs)
    rows.append(("AutoParallel: trace+export+hand-off+plan", w_py, c_py))
    # optimize_placement's result is filled from the plan when first read (a lazy mapping in
    # builds that have SolutionPlacements; a dict, already filled, before): reading it all.
    reads = [timed(lambda r=r: dict(r[0][0]))[1:] for r in runs]
    rows.append(("  then reading every placement (dict(...))", min(x[0] for x in reads),
                 min(x[1] for x in reads)))
    r = cli_runs[0][0]
    w_cli, c_cli = min(x[1] for x in cli_runs), min(x[2] for x in cli_runs)
    rows.append((f"autoshard plan --model {a.builtin} (CLI)", w_cli, c_cli))
    rows.append(("ratio Python / CLI", w_py / w_cli, c_py / c_cli))
    builtin = json.loads(r.stdout)
    print(f"{'phase':<42} {'wall s':>8} {'cpu s':>8}")
    for name, w, c in rows:
        print(f"{name:<42} {w:>8.2f} {c:>8.2f}")
    print(f"nodes {len(graph['nodes'])}; same objective as the CLI: {same}; AutoParallel plan "
          f"{plan.status} {plan.objective_us / 1e3:.1f} ms, built-in {builtin['status']} "
          f"{builtin['objective_us'] / 1e3:.1f} ms")
    if a.phases:
        phase_table(autoparallel, a.phases)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
