"""Models, plans and the per-rank worker of test_pipeline.py (importable by spawned processes)."""
from __future__ import annotations

import contextlib
import copy
import faulthandler
import sys
from typing import Sequence

import torch

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)
import _apply_worker as W

GLOBAL_BATCH = 8
MICROBATCHES = 4
SEQ = 8


def make_llama4(batch: int = GLOBAL_BATCH):
    """A 4-layer LLaMA (hidden 16, 4 heads, 2 KV heads), seeded weights, `batch` sequences."""
    from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=16, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=64,
                      max_seq_len=SEQ)
    model = Transformer(cfg)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (GLOBAL_BATCH, SEQ), generator=g)
    labels = torch.randint(0, 64, (GLOBAL_BATCH, SEQ), generator=g)
    return model, (tokens[:batch],), (labels[:batch],), cross_entropy_loss


def trace_microbatch(microbatches: int = MICROBATCHES):
    """The training step of ONE microbatch (the graph a pipelined plan is made for), with
    attention as its math decomposition (matmuls and a softmax): the pipeline planner's
    placements.json does not carry the "context_parallel" entries of fused attention nodes
    it shards on the sequence, which the runtime refuses."""
    from autoshard.tracer.export import to_graph_dict
    from autoshard.tracer.trace import trace_training_step

    model, inputs, targets, loss_fn = make_llama4(GLOBAL_BATCH // microbatches)
    traced = trace_training_step(copy.deepcopy(model), inputs, loss_fn, targets, attention=None)
    return traced, to_graph_dict(traced)


# --- counting collectives -------------------------------------------------------------------
#: the functional collectives the lowered graphs call (their waits are not counted)
COLLECTIVE_OPS = ("all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor",
                  "all_to_all_single")


def collective_counter():
    """A TorchDispatchMode counting the functional collectives run while it is active
    (.count), whoever runs them: the stages' graphs, the schedule, the step's end."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "_c10d_functional" and \
                    func._overloadpacket.__name__ in COLLECTIVE_OPS:
                Counter.count += 1
            return func(*args, **(kwargs or {}))

    return Counter()


def reduced_params(stage) -> int:
    """The stage's parameters whose gradient the lowering redistributes into the parameter's
    placement with a collective (its "grad:<param>" stamps): what the planner prices once per
    step."""
    from autoshard.lower import META_KEY, collective_kind

    names = set()
    for n in stage.lowered_backward.graph.nodes:
        edge = n.meta.get(META_KEY, {}).get("edge", "")
        if collective_kind(n) is not None and edge.startswith("grad:"):
            names.add(edge.rsplit(":", 1)[0])
    return len(names)


def off_plan(pipe, placements: dict) -> list:
    """The ops of this rank's stage graphs without a planned node, or in another stage than
    the plan gives theirs ("stage": -1, every stage that uses it, fits any): the runtime
    places none by a rule of its own."""
    from autoshard.lower import META_KEY

    last = len(placements["pipeline"]["stages"]) - 1
    out = []
    for s in pipe.stages:
        for n in s._graph.gm.graph.nodes:
            planned = n.meta.get(META_KEY, {}).get("node")
            if n.op != "call_function" or planned == "tangent":
                continue
            if planned is None:  # every lowered op names the planned node it runs
                out.append(f"{n.name}: no planned node")
                continue
            planned = planned[len("grad:"):] if planned.startswith("grad:") else planned
            want = last if planned == "loss" else placements["placements"][planned]["stage"]
            if want not in (s.index, -1):
                out.append(f"{n.name} ({planned}): stage {s.index}, planned {want}")
    return out


def count_step(pipe, microbatches: int) -> int:
    """Collectives this rank runs in one step of `microbatches` microbatches (of the plan's
    microbatch size) through `pipe`'s own stages, scheduled by a schedule of that many
    microbatches; the step's gradients are dropped.  The stages are the ones the counted run
    uses: lowering a second pipeline per count took about as long as the run."""
    import dataclasses

    from torch.distributed import pipelining

    from autoshard.pipeline import PipelineRunner

    cls = type(pipe.schedule)
    single = issubclass(cls, pipelining.schedules.PipelineScheduleSingle)
    stages = pipe.pipeline_stages[0] if single else pipe.pipeline_stages
    runner = PipelineRunner(dataclasses.replace(pipe.spec, microbatches=microbatches), pipe.stages,
                            cls(stages, microbatches, loss_fn=pipe.schedule._loss_fn),
                            pipe._n_inputs, pipe._first_inputs, pipe.pipeline_stages)
    _, inputs, targets, _ = make_llama4(GLOBAL_BATCH // MICROBATCHES * microbatches)
    counter = collective_counter()
    with counter:
        runner.step(*inputs, *targets)
    for p in pipe.parameters():
        p.grad = None
    return counter.count


# --- the worker -----------------------------------------------------------------------------
def run_pipeline(mesh, placements: dict, steps: int = 3, lr: float = 1e-2,
                 count: bool = False) -> dict:
    """Builds this rank's stages, runs `steps` AdamW steps on the full batch, compares with the
    single-process reference: loss (last stage), first-step gradients, final parameters.
    count: also the collectives of the first step ("collectives") and of a step of half the
    microbatches ("collectives_half"), and the stages' reduced parameters ("reduced")."""
    faulthandler.dump_traceback_later(240, exit=True, file=sys.stderr)
    from autoshard.pipeline import apply_pipeline

    traced, graph = trace_microbatch(placements["pipeline"]["microbatches"])
    model, inputs, targets, loss_fn = make_llama4()
    ref_losses, ref_grads, ref_params = W._reference(model, inputs, targets, loss_fn, steps, lr)
    pipe = apply_pipeline(model, placements, mesh, traced=traced, graph=graph)
    if count:
        half = count_step(pipe, placements["pipeline"]["microbatches"] // 2)
    opt = torch.optim.AdamW(pipe.parameters(), lr=lr)
    res: dict = {"loss_err": [], "grad_err": {}, "param_err": {},
                 "stages": [s.index for s in pipe.stages],
                 # zero bubble: per stage, the ops its W runs and the values B hands to W
                 "split": [[s._parts.weight_nodes, s._parts.n_handoff] if s._parts else None
                           for s in pipe.stages],
                 # the plan's schedule in each stage: redistributions moved to their planned
                 # issue point, collectives saved by its buckets
                 "scheduled": [[s._split.prefetched + s._split.issued, s._split.bucketed]
                               for s in pipe.stages]}
    res["deferred"] = sorted(n for s in pipe.stages for n in s.deferred_params)
    # zero bubble: per stage, its backward's ops placed by their planned node's "part" and
    # those without one (placed by the rule: autoshard.backward_split)
    res["parts"] = [[s._parts.planned, s._parts.unplanned] if s._parts else None
                    for s in pipe.stages]
    res["off_plan"] = off_plan(pipe, placements)
    if count:
        res["collectives_half"] = half
        res["reduced"] = sum(reduced_params(s) for s in pipe.stages)
    for i in range(steps):
        counter = collective_counter()
        with counter if count and i == 0 else contextlib.nullcontext():
            loss = pipe.step(*inputs, *targets)
        if count and i == 0:
            res["collectives"] = counter.count
        if loss is not None:
            res["loss_err"].append(abs(loss.item() - ref_losses[i]) / abs(ref_losses[i]))
        if i == 0:
            for n, p in pipe.named_parameters():
                res["grad_err"][n] = W.rel_err(p.grad.full_tensor(), ref_grads[n])
        opt.step()
        opt.zero_grad()
    for n, p in pipe.named_parameters():
        res["param_err"][n] = W.rel_err(p.detach().full_tensor(), ref_params[n])
    faulthandler.cancel_dump_traceback_later()
    return res


def run_pipelines(mesh, plans: list, steps: int = 3, lr: float = 1e-2,
                  count: Sequence[bool] = ()) -> dict:
    """run_pipeline for several plans (e.g. one per schedule) in the same ranks, one after the
    other: one process launch for all of them (count: per plan, whether to count)."""
    return {"runs": [run_pipeline(mesh, p, steps, lr, k < len(count) and count[k])
                     for k, p in enumerate(plans)]}
