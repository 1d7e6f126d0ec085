"""The traced graph's hand-off to the C++ core: `Graph.from_dict` (the dict converted straight
into the reader's JSON value, what AutoParallel uses) gives the same graph and the same plan as
the JSON text path (`Graph.from_json(json.dumps(...))`, the file reader), and the same errors."""
import json
import os

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


def test_fixture_file_same_as_file_reader(core):
    path = os.path.join(FIXTURES, "llama2l.graph.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert core.Graph.from_dict(doc).to_json() == core.Graph.load(path).to_json()


def test_tuples_are_lists(core, traced_dict):
    doc = dict(traced_dict, nodes=tuple(traced_dict["nodes"]))
    assert core.Graph.from_dict(doc).to_json() == core.Graph.from_dict(traced_dict).to_json()


@pytest.mark.parametrize("value, why", [
    (float("inf"), "non-finite float"),
    ({1, 2}, "unsupported value of type set"),
])
def test_values_json_cannot_hold(core, traced_dict, value, why):
    doc = json.loads(json.dumps(traced_dict))
    op = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "op")
    doc["nodes"][op]["attrs"]["bad"] = value
    with pytest.raises(ValueError, match=f"^<traced>: /nodes/{op}/attrs/bad: {why}"):
        core.Graph.from_dict(doc, "<traced>")


def test_reader_errors_are_the_file_readers(core, traced_dict):
    doc = json.loads(json.dumps(traced_dict))
    op = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "op")
    doc["nodes"][op]["inputs"] = ["no_such_node"]
    messages = []
    for load in (lambda: core.Graph.from_dict(doc, "g"),
                 lambda: core.Graph.from_json(json.dumps(doc), "g")):
        with pytest.raises(Exception) as e:
            load()
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert f"/nodes/{op}/inputs/0" in messages[0] and "unknown node 'no_such_node'" in messages[0]
    assert "\n" not in messages[0]
