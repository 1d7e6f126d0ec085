"""Lists the distinct op names of graph JSON files (pure Python).

    python3 -m autoshard.tracer.opnames FILE...   -> "op<TAB>count<TAB>files" lines, sorted by op
"""
from __future__ import annotations

import json
import os
import sys


def op_counts(paths):
    counts: dict[str, int] = {}
    where: dict[str, set] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            g = json.load(f)
        tag = os.path.basename(path).split(".")[0]
        for n in g["nodes"]:
            if n.get("kind") == "op":
                counts[n["op"]] = counts.get(n["op"], 0) + 1
                where.setdefault(n["op"], set()).add(tag)
    return counts, where


def main(argv=None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    counts, where = op_counts(paths)
    print("# distinct ATen op names in: " + " ".join(os.path.basename(p) for p in paths))
    print("# op\tnodes\tgraphs   (regenerate: tests/fixtures/regenerate.sh)")
    for op in sorted(counts):
        print(f"{op}\t{counts[op]}\t{','.join(sorted(where[op]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
