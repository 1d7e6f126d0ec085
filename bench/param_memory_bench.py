#!/usr/bin/env python3
"""Parameter memory constraints on the built-in models: status, objective, gap and solve CPU
seconds per case (docs/benchmarks.md, "Traced graphs").  Run it against two builds to compare:

    AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python build/venv/bin/python bench/param_memory_bench.py
"""
from __future__ import annotations

import sys
import time

from autoshard import core

GiB = 1 << 30
#: (model, mesh, low, high, device memory limit in bytes or None for the hardware's)
CASES = [("llama3-8b", [2, 8], 0.0, 1 / 16, 20 * GiB), ("llama3-8b", [2, 8], 0.0, 0.25, 24 * GiB),
         ("llama3-8b", [8, 8], 0.0, 1 / 64, None), ("llama3-8b", [2, 8], 0.0, 0.5, 30 * GiB),
         ("gpt2", [2, 4], 0.0, 0.125, 2 * GiB), ("llama3-8b", [2, 8], 0.1, 0.2, None)]


def main() -> int:
    print("| model | mesh | low | high | device limit GiB | status | objective ms | gap | solve CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, shape, low, high, limit in CASES:
        opt_ = core.planner_options(time_limit_s=60)
        if limit is not None:
            opt_.memory_limit_bytes = limit
        opt = core.ShardingOptimizer(core.Graph.builtin(name), core.Mesh(shape, ["dp", "tp"]), opt_)
        opt.add_parameter_memory_constraint(low, high)
        c = time.process_time()
        p = opt.get_solution()
        cpu = time.process_time() - c
        lim = "default" if limit is None else f"{limit / GiB:g}"
        print(f"| {name} | {'x'.join(map(str, shape))} | {low:g} | {high:.4g} | {lim} | {p.status} | "
              f"{p.objective_us / 1e3:.3f} | {p.gap:.2e} | {cpu:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
