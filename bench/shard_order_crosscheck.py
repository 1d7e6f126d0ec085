#!/usr/bin/env python3
"""autoshard's `--comm-model dtensor` against torch 2.13's redistribute_cost on specs with shard
orders (strided shards), many random cases (tests/python/test_dtensor_crosscheck.py runs a
fixed 60 of them).

    AUTOSHARD_BIN=build/autoshard PYTHONPATH=python python bench/shard_order_crosscheck.py \\
        [--cases 600] [--seed 20261205]

Prints how many cases agree within 1e-9 relative (both impossible counts as agreeing), how many
have an order on either side, by mesh rank, and every disagreement (case, ours, torch); exit
status 1 when any disagrees.  torch runs in this process under a fake process group.
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import _paths  # noqa: E402,F401  (puts python/ on sys.path)
import _dtensor_ref as ref  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--bin", default=None, help="autoshard binary (default $AUTOSHARD_BIN, build/)")
    args = ap.parse_args()
    binary = args.bin or ref.autoshard_binary()
    if binary is None:
        print("autoshard binary not found (set AUTOSHARD_BIN or --bin)", file=sys.stderr)
        return 2
    cases = ref.random_ordered_cases(args.cases, args.seed)
    t0 = time.perf_counter()
    ours = ref.autoshard_costs(binary, cases)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = [ref.torch_cost(c) for c in cases]
    t_torch = time.perf_counter() - t0
    stats: collections.Counter = collections.Counter()
    bad = []
    for case, got, want in zip(cases, ours, theirs):
        ordered = "_S(" in case.src + case.dst
        key = f"{len(case.mesh)}-D {'ordered' if ordered else 'default'}"
        stats[key] += 1
        if math.isinf(want) or got is None:
            ok = math.isinf(want) and got is None
            stats["impossible"] += 1 if ok else 0
        else:
            ok = math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
        stats["agree"] += 1 if ok else 0
        if not ok:
            bad.append((case, got, want))
    print(f"{stats['agree']} of {len(cases)} agree ({stats['impossible']} impossible on both "
          f"sides); autoshard {t_ours:.2f} s for all, torch {t_torch:.2f} s")
    for key in sorted(k for k in stats if "-D" in k):
        print(f"  {key}: {stats[key]}")
    for case, got, want in bad:
        print(f"DISAGREE {case}: autoshard {got} torch {want}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
