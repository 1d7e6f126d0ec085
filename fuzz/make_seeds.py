#!/usr/bin/env python3
"""Regenerates the committed seed corpora under fuzz/corpus/ from the repo's fixtures.

Graph seeds are slices of tests/fixtures/*.graph.json (the first ops of each traced model plus
everything they read, in the file's own order) so that the fuzzer mutates small, valid,
realistic files; the IOPDDL seeds are ../shared/iopddl/example.json plain and gzipped plus a
tiny edge-free instance.  Placements seeds are written by `autoshard plan -o` (see
scripts/fuzz.sh --seeds) because they must match the harness's graph and mesh.
Usage: fuzz/make_seeds.py  (from anywhere; stdlib only)
"""
import gzip
import json
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def refs(v):
    """Names a graph-JSON tensor reference points to."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict) and "node" in v:
        return [v["node"]]
    return []


def slice_graph(path, n_ops, name):
    g = json.load(open(path))
    nodes = g["nodes"]
    by_name = {n["name"]: n for n in nodes}
    keep = set()
    ops = [n for n in nodes if n["kind"] == "op"][:n_ops]
    stack = [n["name"] for n in ops]
    while stack:
        x = stack.pop()
        if x in keep:
            continue
        keep.add(x)
        for r in by_name[x].get("inputs", []):
            stack.extend(refs(r))
    out = {"format": g["format"], "version": g["version"], "name": name,
           "nodes": [n for n in nodes if n["name"] in keep]}
    gp = [p for p in g.get("grad_pairs", []) if p["param"] in keep and
          all(r in keep for r in refs(p["grad"]))]
    if gp:
        out["grad_pairs"] = gp
    return out


def write(sub, name, data):
    d = os.path.join(CORPUS, sub)
    os.makedirs(d, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(d, name), mode) as f:
        f.write(data)


COMPLEX_ROTARY = """{"format": "autoshard-graph", "version": 1, "name": "complex_rotary",
 "nodes": [
  {"name": "q", "kind": "input", "outputs": [{"shape": [2, 8, 4, 8, 2], "dtype": "f32"}]},
  {"name": "freqs_cis", "kind": "buffer", "outputs": [{"shape": [8, 8], "dtype": "c64"}]},
  {"name": "z", "kind": "op", "op": "view_as_complex", "inputs": ["q"],
   "outputs": [{"shape": [2, 8, 4, 8], "dtype": "c64"}]},
  {"name": "f", "kind": "op", "op": "view", "inputs": ["freqs_cis"], "attrs": {"size": [1, 8, 1, 8]},
   "outputs": [{"shape": [1, 8, 1, 8], "dtype": "complex64"}]},
  {"name": "rot", "kind": "op", "op": "mul.Tensor", "inputs": ["z", "f"],
   "outputs": [{"shape": [2, 8, 4, 8], "dtype": "c64"}]},
  {"name": "r", "kind": "op", "op": "view_as_real", "inputs": ["rot"],
   "outputs": [{"shape": [2, 8, 4, 8, 2], "dtype": "f32"}]},
  {"name": "w", "kind": "op", "op": "_to_copy", "inputs": ["rot"], "attrs": {"dtype": "c128"},
   "outputs": [{"shape": [2, 8, 4, 8], "dtype": "c128"}]},
  {"name": "out", "kind": "output", "inputs": ["r", "w"]}
 ]}
"""


def dump_graph(g):
    lines = [json.dumps(n, separators=(",", ":")) for n in g["nodes"]]
    head = {k: v for k, v in g.items() if k != "nodes"}
    text = json.dumps(head)[:-1] + ',\n "nodes": [\n  ' + ",\n  ".join(lines) + "\n ]}\n"
    json.loads(text)
    return text


def main():
    fx = os.path.join(ROOT, "tests", "fixtures")
    for f, n in [("llama2l", 12), ("resnet18_b2", 10), ("vit_tiny", 12)]:
        g = slice_graph(os.path.join(fx, f + ".graph.json"), n, f + "_slice")
        write("graph_json", f + "_slice.json", dump_graph(g))
    # The example of docs/graph-format.md (multi-output op, backward, grad pair, loss).
    doc = open(os.path.join(ROOT, "docs", "graph-format.md")).read()
    start = doc.index("```json\n") + len("```json\n")
    write("graph_json", "doc_example.json", doc[start:doc.index("```", start)])
    # Complex dtypes (c64, c128; PyTorch's spelling too) through a rotary's views and mul.
    write("graph_json", "complex_rotary.json", COMPLEX_ROTARY)

    write("hardware_json", "base_h100.json", '{"base": "h100", "memory_gb": 40}\n')
    write("hardware_json", "custom.json", json.dumps({
        "name": "custom", "peak_bf16_tflops": 312, "peak_fp32_tflops": 19.5, "hbm_gbps": 2039,
        "memory_bytes": 85899345920, "nvlink_gbps": 600, "intra_busbw_gbps": 230,
        "inter_busbw_gbps": 23, "intra_latency_us": 0.6, "inter_latency_us": 2.7,
        "base_latency_us": 6.6, "gpus_per_node": 8, "efficiency": 0.7,
        "launch_floor_us": 7.0}, indent=1) + "\n")

    ex = os.path.join(ROOT, "..", "shared", "iopddl", "example.json")
    text = open(ex).read()
    write("iopddl", "example.json", text)
    write("iopddl", "example.json.gz", gzip.compress(text.encode(), mtime=0))
    write("iopddl", "no_edges.json", json.dumps({"problem": {
        "name": "tiny", "nodes": {"intervals": [[0, 2], [1, 3]], "costs": [[1, 2], [3]],
                                  "usages": [[4, 5], [6]]}, "edges": {"nodes": [], "costs": []}}}))
    shutil.rmtree(os.path.join(CORPUS, "tmp"), ignore_errors=True)


if __name__ == "__main__":
    main()
