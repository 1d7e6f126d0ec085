"""The torch 2.x tracer: the dispatch recorder gives make_fx's graph; Core ATen decomposition;
mixed precision; no weights allocated."""
import pytest

torch = pytest.importorskip("torch")


def structure(g):
    """(op, phase, module, input positions) per node, with `detach` nodes bypassed (the
    autograd engine detaches the loss seed in eager mode; make_fx does not record it)."""
    nodes = g["nodes"]
    alias = {}
    for n in nodes:
        if n.get("op") == "detach":
            src = n["inputs"][0]
            alias[n["name"]] = alias.get(src, src) if isinstance(src, str) else src
    kept = [n for n in nodes if n.get("op") != "detach"]
    index = {n["name"]: i for i, n in enumerate(kept)}

    def ref(x):
        if isinstance(x, str):
            x = alias.get(x, x)
        if isinstance(x, str):
            return index[x]
        return (index[alias.get(x["node"], x["node"])], x["output"])
    return [(n["kind"], n.get("op"), n.get("phase"), n.get("module"), n.get("attrs"),
             [ref(x) for x in n.get("inputs", [])], n.get("outputs")) for n in kept]


def test_dispatch_recorder_equals_make_fx():
    from autoshard.tracer import to_graph_dict, trace_training_step
    from autoshard.tracer.examples.vit import vit_tiny

    graphs = {}
    for tracer in ("dispatch", "make_fx"):
        m, i, l, t = vit_tiny(batch=2)
        graphs[tracer] = to_graph_dict(trace_training_step(m, i, l, t, tracer=tracer), "v")
    assert structure(graphs["dispatch"]) == structure(graphs["make_fx"])


def test_core_aten_and_mixed_precision():
    from autoshard.tracer import to_graph_dict, trace_training_step
    from autoshard.tracer.examples.llama import llama_tiny

    m, i, l, t = llama_tiny(batch=2, seq=32)
    tr = trace_training_step(m, i, l, t, decompose="core_aten", param_dtype=torch.bfloat16)
    ops = {n.target for n in tr.gm.graph.nodes if n.op == "call_function"
           and isinstance(n.target, torch._ops.OpOverload)}
    non_core = [str(o) for o in ops if torch.Tag.core not in o.tags and not o.is_view]
    assert non_core == []
    g = to_graph_dict(tr, "l")
    params = {n["name"]: n for n in g["nodes"] if n["kind"] == "parameter"}
    assert params["output.weight"]["outputs"][0]["dtype"] == "f32"
    assert any(n.get("op") == "_to_copy.default" or n.get("op") == "_to_copy"
               for n in g["nodes"] if n.get("attrs", {}).get("dtype") == "bf16")
