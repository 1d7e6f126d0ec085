"""The traced graph's hand-off to the C++ core: `Graph.from_dict` (the file reader walking the
dict in place, what AutoParallel uses) gives the same graph and the same plan as
the JSON text path (`Graph.from_json(json.dumps(...))`, the file reader), and the same errors."""
import json
import os
import re
from typing import Any

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def traced_dict():
    from autoshard.tracer.examples import llama
    from autoshard.tracer.export import to_graph_dict
    from autoshard.tracer.trace import trace_training_step

    model, inputs, loss, targets = llama.llama_tiny(batch=2, seq=64, layers=2)
    return to_graph_dict(trace_training_step(model, inputs, loss, targets), "llama_tiny")


def test_traced_graph_same_as_json_path(core, traced_dict):
    fast = core.Graph.from_dict(traced_dict, "<traced>")
    text = core.Graph.from_json(json.dumps(traced_dict), "<traced>")
    assert len(fast) == len(traced_dict["nodes"]) > 100
    assert fast.to_json() == text.to_json()
    mesh = core.Mesh([2, 4], ["dp", "tp"])
    plans = []
    for g in (fast, text):
        opt = core.ShardingOptimizer(g, mesh, core.planner_options(threads=1))
        plan = opt.get_solution()
        assert plan.has_solution
        summary = json.loads(opt.summary_json())
        del summary["phase_seconds"]  # wall-clock timings, the only thing allowed to differ
        plans.append((opt.placements_json(plan), summary))
    assert plans[0] == plans[1]


def test_optimizer_from_dict_same_plan(core, traced_dict):
    """ShardingOptimizer.from_dict (what AutoParallel uses: the graph read straight into the
    optimizer) plans as ShardingOptimizer(Graph.from_dict(...)), and reports bad input alike."""
    mesh = core.Mesh([2, 4], ["dp", "tp"])
    options = core.planner_options(threads=1)
    direct = core.ShardingOptimizer.from_dict(traced_dict, mesh, options, "<traced>")
    via_graph = core.ShardingOptimizer(core.Graph.from_dict(traced_dict, "<traced>"), mesh,
                                       options)
    assert direct.graph.to_json() == via_graph.graph.to_json()
    plans = [opt.get_solution() for opt in (direct, via_graph)]
    assert all(p.has_solution for p in plans)
    assert direct.placements_json(plans[0]) == via_graph.placements_json(plans[1])
    bad = dict(traced_dict, version=2)
    with pytest.raises(RuntimeError, match=r"^<traced>: /version: unsupported version 2"):
        core.ShardingOptimizer.from_dict(bad, mesh, options, "<traced>")


def test_fixture_file_same_as_file_reader(core):
    path = os.path.join(FIXTURES, "llama2l.graph.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert core.Graph.from_dict(doc).to_json() == core.Graph.load(path).to_json()


def test_tuples_are_lists(core, traced_dict):
    doc = dict(traced_dict, nodes=tuple(traced_dict["nodes"]))
    assert core.Graph.from_dict(doc).to_json() == core.Graph.from_dict(traced_dict).to_json()


@pytest.mark.parametrize("value, why", [
    (float("inf"), r"non-finite float inf \(JSON spells it \{\"float\": \"inf\"\}\)"),
    ({1, 2}, r"value of type set \(not JSON\)"),
])
def test_values_json_cannot_hold(core, traced_dict, value, why):
    doc = json.loads(json.dumps(traced_dict))
    op = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "op")
    doc["nodes"][op]["attrs"]["bad"] = value
    name = doc["nodes"][op]["name"]
    with pytest.raises(RuntimeError) as e:
        core.Graph.from_dict(doc, "<traced>")
    assert re.match(f"^<traced>: /nodes/{op}/attrs/bad \\(node '{name}'\\): unsupported "
                    f"attribute value {why}", str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def _bad_doc(traced_dict, edit):
    """A copy of the traced dict with one op node edited by edit(node); -> (doc, index)."""
    doc = json.loads(json.dumps(traced_dict))
    op = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "op")
    edit(doc["nodes"][op])
    return doc, op


@pytest.mark.parametrize("edit, where, why", [
    (lambda n: n.update(op={1}), "/op", "expected a string, got value of type set (not JSON)"),
    (lambda n: n.update({7: 1}), "", "object key of type int (expected str)"),
    (lambda n: n.update(op="mm\udc80"), "/op", "string is not valid UTF-8"),
    (lambda n: n["outputs"][0]["shape"].__setitem__(0, 2 ** 70), "/outputs/0/shape/0",
     "expected an integer, got number 1.1805916207174113e+21"),
    (lambda n: n["outputs"][0]["shape"].__setitem__(0, 2 ** 63), "/outputs/0/shape/0",
     "integer 9223372036854775808 out of range"),
    (lambda n: n.update(inputs=[None]), "/inputs/0",
     "expected a node name or {\"node\": name, \"output\": k}, got null"),
])
def test_bad_dict_one_line_at_location(core, traced_dict, edit, where, why):
    """Bad values the dict reader meets in place: one line naming the node and the pointer."""
    doc, op = _bad_doc(traced_dict, edit)
    name = doc["nodes"][op]["name"]
    with pytest.raises(RuntimeError) as e:
        core.Graph.from_dict(doc, "<traced>")
    assert str(e.value) == f"<traced>: /nodes/{op}{where} (node '{name}'): {why}"


def _dict_and_text_errors(core: Any, doc: dict, kind: type) -> list[str]:
    """The messages `Graph.from_dict` and `Graph.from_json` raise on `doc`, in that order."""
    messages = []
    for load in (lambda: core.Graph.from_dict(doc, "g"),
                 lambda: core.Graph.from_json(json.dumps(doc), "g")):
        with pytest.raises(kind) as e:
            load()
        messages.append(str(e.value))
    return messages


@pytest.mark.parametrize("edit", [
    lambda n: n["outputs"][0]["shape"].__setitem__(0, 2 ** 63),
    lambda n: n["outputs"][0]["shape"].__setitem__(0, 2 ** 70),
    lambda n: n["outputs"][0]["shape"].__setitem__(0, 1.5),
    lambda n: n.update(kind=True),
    lambda n: n.update(attrs=[1]),
    lambda n: n.update(unknown=1),
])
def test_bad_dict_same_message_as_text(core, traced_dict, edit):
    """Where JSON can spell the bad value, the dict and the text give the same message."""
    doc, _ = _bad_doc(traced_dict, edit)
    messages = _dict_and_text_errors(core, doc, RuntimeError)
    assert messages[0] == messages[1]


def test_reader_errors_are_the_file_readers(core, traced_dict):
    doc = json.loads(json.dumps(traced_dict))
    op = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "op")
    doc["nodes"][op]["inputs"] = ["no_such_node"]
    messages = _dict_and_text_errors(core, doc, Exception)
    assert messages[0] == messages[1]
    assert f"/nodes/{op}/inputs/0" in messages[0] and "unknown node 'no_such_node'" in messages[0]
    assert "\n" not in messages[0]
