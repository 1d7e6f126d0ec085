#!/usr/bin/env python3
"""Writes the bad-input corpus (one file per case) next to this script.

The expected one-line errors are not generated: they live in cases.tsv, checked by hand
against the CLI, and tests/cli/bad_inputs.sh compares them exactly.  valid.graph.json (a slice
of the traced llama fixture) is the base most cases corrupt; placements cases are planned for
it on a 2x2 dp,tp mesh.  Stdlib only; deterministic (gzip mtime 0).
Usage: tests/bad_inputs/generate.py
"""
import copy
import gzip
import json
import os
import struct
import subprocess
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(name, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(HERE, name), mode) as f:
        f.write(data)


def graph_text(g):
    head = {k: v for k, v in g.items() if k != "nodes"}
    nodes = ",\n  ".join(json.dumps(n, separators=(",", ":")) for n in g["nodes"])
    return json.dumps(head)[:-1] + ',\n "nodes": [\n  ' + nodes + "\n ]}\n"


def graphs():
    text = open(os.path.join(HERE, "valid.graph.json")).read()
    base = json.loads(text)
    nodes = base["nodes"]
    idx = {n["name"]: i for i, n in enumerate(nodes)}

    def variant(name, edit):
        g = copy.deepcopy(base)
        edit(g)
        put(name, graph_text(g))

    put("truncated.graph.json", text[: len(text) // 2])
    put("empty.graph.json", "")
    # A bit flip inside a node name: 0x61 'a' -> 0xe1, an invalid UTF-8 lead byte.
    raw = bytearray(text.encode())
    pos = raw.index(b'"embedding"') + 2
    raw[pos] ^= 0x80
    put("bitflip_utf8.graph.json", bytes(raw))
    variant("wrong_format.graph.json", lambda g: g.update(format="onnx"))
    variant("unknown_version.graph.json", lambda g: g.update(version=2))
    variant("wrong_type_version.graph.json", lambda g: g.update(version="1"))
    variant("wrong_type_shape.graph.json",
            lambda g: g["nodes"][0]["outputs"][0].update(shape="1024x256"))
    variant("wrong_type_nodes.graph.json", lambda g: g.update(nodes={"a": 1}))
    variant("negative_dim.graph.json", lambda g: g["nodes"][0]["outputs"][0].update(shape=[-1, 256]))
    variant("unknown_dtype.graph.json", lambda g: g["nodes"][0]["outputs"][0].update(dtype="f128"))
    variant("unknown_kind.graph.json", lambda g: g["nodes"][0].update(kind="weight"))
    variant("unknown_field.graph.json", lambda g: g["nodes"][1].update(shapes=[1]))
    emb = idx["embedding"]
    variant("dangling_ref.graph.json",
            lambda g: g["nodes"][emb].update(inputs=["tok_embeddings.weight", "tokenz"]))
    variant("dangling_output.graph.json",
            lambda g: g["nodes"][emb].update(inputs=["tok_embeddings.weight",
                                                     {"node": "tokens", "output": 3}]))
    variant("self_ref.graph.json",
            lambda g: g["nodes"][emb].update(inputs=["tok_embeddings.weight", "embedding"]))

    # A cycle: two ops reading each other (the file order is the schedule, so the first one
    # necessarily refers to a node defined later).
    def cycle(g):
        ops = [i for i, n in enumerate(g["nodes"]) if n["kind"] == "op"]
        a, b = ops[1], ops[2]
        g["nodes"][a]["inputs"] = [g["nodes"][b]["name"]]
        g["nodes"][b]["inputs"] = [g["nodes"][a]["name"]]
    variant("cycle.graph.json", cycle)
    variant("duplicate_name.graph.json", lambda g: g["nodes"][2].update(name=g["nodes"][1]["name"]))
    variant("huge_shape.graph.json",
            lambda g: g["nodes"][0]["outputs"][0].update(shape=[2147483648, 2147483648]))
    variant("huge_dim.graph.json",
            lambda g: g["nodes"][0]["outputs"][0].update(shape=[4611686018427387904]))
    variant("int_overflow.graph.json",
            lambda g: g["nodes"][0]["outputs"][0].update(shape=[18446744073709551616]))

    def huge_total(g):  # 65 inputs of 2^50 bytes each: 2^56 + 2^50 bytes in all
        for k in range(65):
            g["nodes"].insert(0, {"name": f"big{k}", "kind": "input",
                                  "outputs": [{"shape": [16777216, 16777216], "dtype": "f32"}]})
    variant("huge_total.graph.json", huge_total)
    variant("grad_shape_mismatch.graph.json",
            lambda g: g.update(grad_pairs=[{"param": "tok_embeddings.weight", "grad": "embedding"}]))
    put("deep_nesting.graph.json", "[" * 100000 + "]" * 100000)


def placements():
    text = open(os.path.join(ROOT, "fuzz", "corpus", "placements_json",
                             "llama2l_slice_2x2.json")).read()
    put("valid.placements.json", text)
    base = json.loads(text)

    def variant(name, edit):
        p = copy.deepcopy(base)
        edit(p)
        put(name, json.dumps(p, indent=1) + "\n")

    put("truncated.placements.json", text[: len(text) // 3])
    variant("unknown_version.placements.json", lambda p: p.update(version=7))
    variant("mesh_mismatch.placements.json", lambda p: p.update(mesh_shape=[4, 2]))
    variant("dim_names_mismatch.placements.json", lambda p: p.update(mesh_dim_names=["dp", "cp"]))
    variant("unknown_node.placements.json",
            lambda p: p["placements"].update({"no_such_node": {"output": "RR", "inputs": []}}))
    variant("bad_spec.placements.json",
            lambda p: p["placements"]["embedding"].update(output="S(x)R"))
    variant("wrong_type_output.placements.json",
            lambda p: p["placements"]["embedding"].update(output=5))
    variant("wrong_type_input.placements.json",
            lambda p: p["placements"]["embedding"].update(inputs=["RR", 3]))
    variant("input_count.placements.json",
            lambda p: p["placements"]["embedding"].update(inputs=["RR"]))
    variant("mesh_ndim.placements.json",
            lambda p: p["placements"]["embedding"].update(output="R"))
    variant("wrong_type_placements.placements.json", lambda p: p.update(placements=[1, 2]))


def hardware():
    good = {"base": "h100", "memory_gb": 40}

    def variant(name, edit):
        h = dict(good)
        edit(h)
        put(name, json.dumps(h) + "\n")

    put("truncated.hw.json", json.dumps(good)[:15])
    variant("unknown_field.hw.json", lambda h: h.update(memroy_gb=40))
    variant("unknown_base.hw.json", lambda h: h.update(base="tpu9"))
    variant("negative.hw.json", lambda h: h.update(hbm_gbps=-1))
    variant("wrong_type.hw.json", lambda h: h.update(hbm_gbps="fast"))
    variant("efficiency.hw.json", lambda h: h.update(efficiency=1.5))
    variant("both_memory.hw.json", lambda h: h.update(memory_bytes=1000))
    variant("huge_memory.hw.json", lambda h: h.update(memory_gb=1e300))
    variant("gpus_per_node.hw.json", lambda h: h.update(gpus_per_node=0))
    put("not_object.hw.json", "[1, 2]\n")
    put("number_overflow.hw.json", '{"base": "h100", "hbm_gbps": 1e999}\n')


def iopddl():
    text = open(os.path.join(ROOT, "..", "shared", "iopddl", "example.json")).read()
    base = json.loads(text)
    gz = gzip.compress(text.encode(), mtime=0)

    def variant(name, edit):
        p = copy.deepcopy(base)
        edit(p["problem"])
        put(name, json.dumps(p) + "\n")

    put("truncated.iopddl.json", text[: len(text) // 2])
    put("truncated.iopddl.json.gz", gz[: len(gz) // 2])
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0x10
    put("bitflip.iopddl.json.gz", bytes(flipped))
    # A forged ISIZE trailer claiming 4 GiB: must not drive the output buffer's size.
    forged = bytearray(gz)
    forged[-4:] = b"\xff\xff\xff\xff"
    put("forged_isize.iopddl.json.gz", bytes(forged))
    put("trailing_garbage.iopddl.json.gz", gz + b"garbage!")
    variant("dangling_edge.iopddl.json", lambda p: p["edges"]["nodes"].__setitem__(1, [0, 9]))
    variant("self_loop.iopddl.json", lambda p: p["edges"]["nodes"].__setitem__(1, [2, 2]))
    variant("edge_cost_count.iopddl.json", lambda p: p["edges"]["costs"][1].pop())
    variant("usage_count.iopddl.json", lambda p: p["nodes"]["usages"][2].pop())
    variant("no_strategies.iopddl.json", lambda p: (p["nodes"]["costs"].__setitem__(0, []),
                                                  p["nodes"]["usages"].__setitem__(0, [])))
    variant("reversed_interval.iopddl.json", lambda p: p["nodes"]["intervals"].__setitem__(0, [70, 30]))
    variant("wrong_type_cost.iopddl.json", lambda p: p["nodes"]["costs"][1].__setitem__(0, "55"))
    variant("float_cost.iopddl.json", lambda p: p["nodes"]["costs"][1].__setitem__(0, 55.5))
    variant("int_overflow.iopddl.json", lambda p: p.update(usage_limit=99999999999999999999))
    variant("missing_usages.iopddl.json", lambda p: p["nodes"].pop("usages"))
    put("missing_problem.iopddl.json", json.dumps({"problme": base["problem"]}) + "\n")
    put("deep_nesting.iopddl.json", '{"problem": {"name": ' + "[" * 100000 + "]" * 100000 + "}}")


def container(magic, version, payload, raw_payload_size=None):
    """A state/replay container (io/container.h) around `payload`, with a correct CRC."""
    comp = subprocess.run(["zstd", "-q", "-c", "-3", f"--stream-size={len(payload)}"], input=payload,
                          capture_output=True, check=True).stdout
    size = len(payload) if raw_payload_size is None else raw_payload_size
    head = magic + struct.pack("<IIIQQ", version, 1, 0, size, len(comp))
    crc = zlib.crc32(comp, zlib.crc32(head))
    return head + struct.pack("<I", crc) + comp


def state():
    """Cases from valid.ap (`autoshard plan --graph valid.graph.json --mesh 2x2 -o DIR`)."""
    path = os.path.join(HERE, "valid.ap")
    if not os.path.exists(path):
        return
    ap = open(path, "rb").read()
    payload = subprocess.run(["zstd", "-q", "-d", "-c"], input=ap[36:], capture_output=True,
                             check=True).stdout
    put("empty.ap", b"")
    put("truncated_header.ap", ap[:20])
    put("truncated.ap", ap[: len(ap) // 2])
    put("bad_magic.ap", b"PK\x03\x04" + ap[4:])
    put("unknown_version.ap", ap[:4] + struct.pack("<I", 99) + ap[8:])
    flipped = bytearray(ap)
    flipped[36 + 100] ^= 0x04
    put("bitflip.ap", bytes(flipped))
    put("huge_size.ap", ap[:16] + struct.pack("<Q", 1 << 62) + ap[24:])
    put("payload_garbage.ap", container(ap[:4], 1, b"\xff" * 200))
    put("payload_truncated.ap", container(ap[:4], 1, payload[: len(payload) // 2]))
    put("replay_magic.ap", container(b"ASRP", 1, payload))


if __name__ == "__main__":
    graphs()
    placements()
    hardware()
    iopddl()
    state()
