"""Models, plans and the per-rank worker of test_pipeline.py (importable by spawned processes)."""
from __future__ import annotations

import copy
import faulthandler
import sys

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


# --- the worker -----------------------------------------------------------------------------
def run_pipeline(mesh, placements: dict, steps: int = 3, lr: float = 1e-2) -> dict:
    """Builds this rank's stages, runs `steps` AdamW steps on the full batch, compares with the
    single-process reference: loss (last stage), first-step gradients, final parameters."""
    faulthandler.dump_traceback_later(240, exit=True, file=sys.stderr)
    from autoshard.pipeline import apply_pipeline

    traced, graph = trace_microbatch(placements["pipeline"]["microbatches"])
    model, inputs, targets, loss_fn = make_llama4()
    ref_losses, ref_grads, ref_params = W._reference(model, inputs, targets, loss_fn, steps, lr)
    pipe = apply_pipeline(model, placements, mesh, traced=traced, graph=graph)
    opt = torch.optim.AdamW(pipe.parameters(), lr=lr)
    res: dict = {"loss_err": [], "grad_err": {}, "param_err": {},
                 "stages": [s.index for s in pipe.stages],
                 # zero bubble: per stage, the ops its W runs and the values B hands to W
                 "split": [[s._parts.weight_nodes, s._parts.n_handoff] if s._parts else None
                           for s in pipe.stages]}
    for i in range(steps):
        loss = pipe.step(*inputs, *targets)
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


def run_pipelines(mesh, plans: list, steps: int = 3, lr: float = 1e-2) -> dict:
    """run_pipeline for several plans (e.g. one per schedule) in the same ranks, one after the
    other: one process launch for all of them."""
    return {"runs": [run_pipeline(mesh, p, steps, lr) for p in plans]}
