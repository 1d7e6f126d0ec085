"""Structural checks of autoshard graph JSON (pure Python: no torch needed).

Mirrors the invariants of the C++ Graph::validate() plus the file-level fields, so fixtures can
be checked where torch is not installed:  python3 -m autoshard.tracer.validate FILE...
"""
from __future__ import annotations

import json
import sys

DTYPES = {"f32", "bf16", "f16", "f8", "i64", "i32", "bool", "c64", "c128"}
KINDS = {"input", "parameter", "buffer", "op", "output"}
PHASES = {"forward", "backward", "optimizer"}
TOP_KEYS = {"format", "version", "name", "nodes", "grad_pairs", "loss", "tangents", "islands"}
NODE_KEYS = {"name", "kind", "op", "phase", "inputs", "attrs", "outputs", "module", "source"}
OUTPUT_KEYS = {"shape", "dtype", "none"}


def _unknown(obj: dict, allowed: set) -> list:
    """Members the C++ reader would reject (names starting with "_" are extensions)."""
    return sorted(k for k in obj if k not in allowed and not k.startswith("_"))


def _check_attr(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, dict):
        return set(v) == {"float"} and v["float"] in ("inf", "-inf", "nan")
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def validate_graph(g: dict) -> list[str]:
    """Returns a list of error messages (empty when the graph is valid)."""
    c = _Checker()
    c.header(g)
    nodes = g.get("nodes")
    if not isinstance(nodes, list):
        return c.errs + ["nodes must be a list"]
    for i, n in enumerate(nodes):
        c.node(i, n)
    c.grad_pairs(g.get("grad_pairs", []))
    if g.get("loss") is not None:
        c.ref(g["loss"], "loss")
    c.tangents(g.get("tangents", []))
    c.islands(g.get("islands", []))
    return c.errs


class _Checker:
    """Collects the errors of one graph; references are checked against the nodes seen so far,
    since a node may only use earlier ones."""

    def __init__(self) -> None:
        self.errs: list[str] = []
        self.n_out: dict[str, int] = {}
        self.kind_of: dict[str, str] = {}
        self.shapes: dict[str, list] = {}

    def header(self, g: dict) -> None:
        if g.get("format") != "autoshard-graph":
            self.errs.append('format must be "autoshard-graph"')
        if g.get("version") != 1:
            self.errs.append("version must be 1")
        if not isinstance(g.get("name"), str):
            self.errs.append("name must be a string")
        for k in _unknown(g, TOP_KEYS):
            self.errs.append(f"unknown top-level member {k!r}")

    def ref(self, r, where: str) -> None:
        if isinstance(r, str):
            name, k = r, 0
        elif isinstance(r, dict) and "node" in r and set(r) <= {"node", "output"}:
            name, k = r["node"], r.get("output", 0)
        else:
            self.errs.append(f"{where}: bad tensor reference {r!r}")
            return
        if name not in self.n_out:
            self.errs.append(f"{where}: reference to unknown or later node {name!r}")
        elif not isinstance(k, int) or not 0 <= k < self.n_out[name]:
            self.errs.append(f"{where}: {name!r} has no output {k!r}")

    def node(self, i: int, n: dict) -> None:
        errs = self.errs
        name = n.get("name")
        where = f"node {i} ({name})"
        if not isinstance(name, str) or not name:
            errs.append(f"{where}: missing name")
            return
        if name in self.n_out:
            errs.append(f"{where}: duplicate name")
        for k in _unknown(n, NODE_KEYS):
            errs.append(f"{where}: unknown member {k!r}")
        kind = n.get("kind")
        if kind not in KINDS:
            errs.append(f"{where}: bad kind {kind!r}")
        for j, r in enumerate(n.get("inputs", [])):
            self.ref(r, f"{where} input {j}")
        outs = n.get("outputs", [])
        self.outputs(where, kind, outs)
        if kind == "op":
            if not isinstance(n.get("op"), str) or not n["op"]:
                errs.append(f"{where}: op node without op")
            if n.get("phase") not in PHASES:
                errs.append(f"{where}: bad phase {n.get('phase')!r}")
            for k, v in n.get("attrs", {}).items():
                if not _check_attr(v):
                    errs.append(f"{where}: attr {k!r} has unsupported value {v!r}")
        elif kind in ("input", "parameter", "buffer") and n.get("inputs"):
            errs.append(f"{where}: {kind} nodes take no inputs")
        self.n_out[name] = len(outs)
        self.kind_of[name] = kind
        self.shapes[name] = [o.get("shape") for o in outs]

    def outputs(self, where: str, kind, outs: list) -> None:
        errs = self.errs
        if kind == "output":
            if outs:
                errs.append(f"{where}: output nodes have no outputs")
        elif not outs:
            errs.append(f"{where}: no outputs")
        for o in outs:
            for k in _unknown(o, OUTPUT_KEYS):
                errs.append(f"{where}: unknown output member {k!r}")
            shape = o.get("shape")
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                errs.append(f"{where}: bad shape {shape!r}")
            if o.get("dtype") not in DTYPES:
                errs.append(f"{where}: bad dtype {o.get('dtype')!r}")

    def grad_pairs(self, pairs: list) -> None:
        errs, shapes = self.errs, self.shapes
        seen_params = set()
        for gp in pairs:
            p = gp.get("param")
            if self.kind_of.get(p) != "parameter":
                errs.append(f"grad pair: {p!r} is not a parameter")
            if p in seen_params:
                errs.append(f"grad pair: {p!r} listed twice")
            seen_params.add(p)
            r = gp.get("grad")
            self.ref(r, f"grad pair {p}")
            gname, k = (r, 0) if isinstance(r, str) else (r.get("node"), r.get("output", 0)) \
                if isinstance(r, dict) else (None, 0)
            if p in shapes and gname in shapes and isinstance(k, int) \
                    and k < len(shapes[gname]) and shapes[gname][k] != shapes[p][0]:
                errs.append(f"grad pair {p}: gradient shape {shapes[gname][k]} != parameter "
                            f"shape {shapes[p][0]}")

    def tangents(self, tangents) -> None:
        if not isinstance(tangents, list):
            self.errs.append("tangents: expected an array of node names")
            return
        for i, t in enumerate(tangents):
            self.ref(t, f"tangents/{i}")

    def islands(self, islands) -> None:
        if not isinstance(islands, list):
            self.errs.append("islands: expected an array")
            return
        for i, isl in enumerate(islands):
            if not isinstance(isl, dict) or not isinstance(isl.get("module"), str):
                self.errs.append(f"islands/{i}: expected an object with a string 'module'")
            elif _unknown(isl, {"module", "sources"}) or not all(
                    isinstance(x, str) for x in isl.get("sources", [])):
                self.errs.append(f"islands/{i}: only 'module' and 'sources' (strings) are "
                                 "allowed")


def main(argv=None) -> int:
    """`python -m autoshard.tracer.validate FILE...`: checks each file, prints one line per
    problem; returns 1 if any file is invalid."""
    bad = 0
    for path in (argv if argv is not None else sys.argv[1:]):
        with open(path, encoding="utf-8") as f:
            errs = validate_graph(json.load(f))
        for e in errs[:20]:
            print(f"{path}: {e}")
        bad += bool(errs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
