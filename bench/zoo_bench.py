#!/usr/bin/env python3
"""The zoo: every architecture of tests/python/zoo_models.py (transformers 5.x and the
plain-PyTorch models of zoo_local.py, small configs, meta weights) traced and planned on a 2x4
(dp, tp) mesh through autoshard.AutoParallel; prints one Markdown table row per model
(docs/zoo.md).

    AUTOSHARD_CORE=$(ls build/_core*.so) build/venv/bin/python bench/zoo_bench.py [NAME...]
        [--time-limit S] [--threads N] [--param-memory] [--json FILE] [--write-doc FILE]

--write-doc replaces the table between FILE's `<!-- zoo-table:begin -->` and
`<!-- zoo-table:end -->` lines with this run's (all entries, no --param-memory only).

Columns: kind (the kinds of code issue 40 added: complex rotary, expert loop, ctc, rnn);
graph nodes (all kinds) and op nodes of the traced step; trace s (model call, loss
and backward recorded + graph export); plan s (problem build + solve + checks); params/device:
the plan's parameter bytes per device over the unsharded bytes (--param-memory asks for at most
1/8, AutoParallel's add_parameter_memory_constraint() default); fallbacks:
the ops planned replicated for want of a sharding rule (the zoo wants none); status: the
solver's status, or the first line of the error.  Exit status 1 when any model fails or
falls back.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("python", os.path.join("tests", "python")):
    if os.path.join(ROOT, sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, sub))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="zoo entries to run (default: all)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="solver limit per model, s")
    ap.add_argument("--threads", type=int, default=1, help="solver threads")
    ap.add_argument("--param-memory", action="store_true",
                    help="plan under add_parameter_memory_constraint() (params 1/8 per device)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--write-doc", metavar="FILE",
                    help="write the table between FILE's zoo-table markers (docs/zoo.md)")
    args = ap.parse_args(argv)
    if args.write_doc and (args.names or args.param_memory):
        print("zoo_bench: --write-doc takes the whole zoo without --param-memory",
              file=sys.stderr)
        return 2

    import zoo_models as Z
    import transformers

    unknown = [n for n in args.names if n not in Z.BY_NAME]
    if unknown:
        print(f"zoo_bench: unknown model(s) {', '.join(unknown)}; known: "
              f"{', '.join(Z.BY_NAME)}", file=sys.stderr)
        return 2
    entries = [Z.BY_NAME[n] for n in args.names] if args.names else Z.ZOO
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")

    lines = [f"`transformers {transformers.__version__}, mesh 2x4 (dp, tp), batch {Z.BATCH}, "
             f"seq {Z.SEQ}, {Z.LAYERS} layers, hidden {Z.HIDDEN}`", "",
             "| model | family | kind | class | nodes | op nodes | trace s | plan s "
             "| params/device | fallbacks | status |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    print("\n".join(lines), flush=True)
    results = []
    for e in entries:
        r = Z.plan_entry(e, time_limit_s=args.time_limit, threads=args.threads,
                         param_memory=args.param_memory)
        results.append(r)
        lines.append(_row(e, r))
        print(lines[-1], flush=True)
    ok = sum(r.ok for r in results)
    lines += ["", f"{ok}/{len(results)} planned with full coverage "
              f"({len({r.family for r in results if r.ok})} families)"]
    print("\n".join(lines[-2:]))
    if args.write_doc:
        _write_doc(args.write_doc, lines)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    return 0 if ok == len(results) else 1


def _row(e, r) -> str:
    """One Markdown table row of entry `e`'s result `r`."""
    status = r.error or r.status
    fb = ", ".join(r.fallback_ops) if r.fallback_ops else "0"
    params = "-" if r.error else f"1/{1 / r.param_fraction:.2g}"
    return (f"| {r.name} | {r.family} | {e.kind or '-'} | {e.model_class} | {r.graph_nodes} | "
            f"{r.op_nodes} | {r.trace_s:.2f} | {r.plan_s:.2f} | {params} | {fb} | "
            f"{status.replace('|', '/')} |")


def _write_doc(path: str, lines: list[str]) -> None:
    """Replaces the lines between path's zoo-table markers with `lines`."""
    begin, end = "<!-- zoo-table:begin -->", "<!-- zoo-table:end -->"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(begin) != 1 or text.count(end) != 1:
        raise SystemExit(f"zoo_bench: {path}: needs one {begin} and one {end} line")
    head, rest = text.split(begin)
    tail = rest.split(end)[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)


if __name__ == "__main__":
    sys.exit(main())
