"""Models the meta tracer cannot take at face value, and the per-rank worker of
test_datadep.py (importable by spawned processes): a speech model trained with CTC (an op
without a Meta kernel).  The apply machinery is _apply_worker's; these models are registered
into its model table only inside the worker processes (run_jobs), so test_apply's list is
unchanged."""
from __future__ import annotations

from typing import Sequence

import torch

import _apply_worker as W


def make_speech():
    """autoshard.tracer.examples.speech at a tiny size: batch 4, 12 frames, 8 features,
    alphabet of 6, padded targets of 4 with per-sample lengths, seeded."""
    from autoshard.tracer.examples.speech import CtcSpeechModel, SpeechConfig, ctc_loss

    torch.manual_seed(0)
    model = CtcSpeechModel(SpeechConfig(n_mels=8, hidden=16, n_layers=2, vocab=6))
    g = torch.Generator().manual_seed(1)
    features = torch.randn(4, 8, 12, generator=g)
    targets = torch.randint(1, 6, (4, 4), generator=g)
    input_lengths = torch.tensor([12, 11, 12, 10])
    target_lengths = torch.tensor([4, 2, 3, 4])
    return model, (features,), (targets, input_lengths, target_lengths), ctc_loss


MODELS = {"speech": make_speech}


def trace(key: str):
    """(traced step, graph dict) of a model of MODELS, as the apply test traces."""
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict

    model, inputs, targets, loss_fn = MODELS[key]()
    traced = trace_for_apply(model, inputs, loss_fn, targets)
    return traced, to_graph_dict(traced)


def run_jobs(mesh, jobs: Sequence[dict]) -> list[dict]:
    """_apply_worker.run_jobs with these models registered (in this worker process only)."""
    W.MODELS.update(MODELS)
    return W.run_jobs(mesh, jobs)
