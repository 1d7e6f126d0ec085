"""Models the meta tracer cannot take at face value, and the per-rank worker of
test_datadep.py (importable by spawned processes): a speech model trained with CTC (an op
without a Meta kernel), a Mixture of Experts with Hugging Face's expert loop over `nonzero`
and a block with an `.item()` branch (data-dependent code, run as eager islands).  The apply machinery is _apply_worker's; these models are registered
into its model table only inside the worker processes (run_jobs), so test_apply's list is
unchanged."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

import _apply_worker as W


def make_speech():
    """autoshard.tracer.examples.speech at a tiny size: batch 4, 12 frames, 8 features,
    alphabet of 6, padded targets of 4 with per-sample lengths, seeded; its Conv1d front end
    (its DTensor strategies: autoshard.dtensor_rules)."""
    from autoshard.tracer.examples.speech import CtcSpeechModel, SpeechConfig, ctc_loss

    torch.manual_seed(0)
    model = CtcSpeechModel(SpeechConfig(n_mels=8, hidden=16, n_layers=2, vocab=6, conv=True))
    g = torch.Generator().manual_seed(1)
    features = torch.randn(4, 8, 12, generator=g)
    targets = torch.randint(1, 6, (4, 4), generator=g)
    input_lengths = torch.tensor([12, 11, 12, 10])
    target_lengths = torch.tensor([4, 2, 3, 4])
    return model, (features,), (targets, input_lengths, target_lengths), ctc_loss


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(x)))


class LoopMoE(nn.Module):
    """Top-k routed experts in a ModuleList, dispatched by the loop Hugging Face's eager MoE
    blocks use: the experts hit (`nonzero`), then per expert its tokens (`torch.where`)."""

    def __init__(self, dim: int = 16, hidden: int = 32, n_experts: int = 4, top_k: int = 2):
        super().__init__()
        self.n_experts, self.top_k = n_experts, top_k
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = x.reshape(-1, d)
        weights = F.softmax(self.gate(h), dim=1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        mask = F.one_hot(chosen, self.n_experts).permute(2, 1, 0)   # [E, k, tokens]
        expert_hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in expert_hit:
            e = e[0]
            slot, token = torch.where(mask[e])
            y = self.experts[e](h[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(h.dtype))
        return out.reshape(b, s, d)


class LoopMoEModel(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.moe = LoopMoE(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        return self.head(h + self.moe(h))


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def make_moe_loop():
    """LoopMoEModel (4 experts, top-2) on 4 x 8 tokens, seeded so that every expert is hit."""
    torch.manual_seed(0)
    model = LoopMoEModel()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 32, (4, 8), generator=g)
    labels = torch.randint(0, 32, (4, 8), generator=g)
    return model, (tokens,), (labels,), token_loss


class GatedBlock(nn.Module):
    """A residual block whose extra layer is added when some activation exceeds a limit and
    subtracted at half weight otherwise: a branch on `.item()` (the trace takes True, the
    default; the test data take False, so replaying the trace would be wrong)."""

    def __init__(self, dim: int = 16, limit: float = 50.0) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.extra = nn.Linear(dim, dim)
        self.limit = limit

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + F.gelu(self.fc(h))
        if (h.abs().amax(-1) > self.limit).any().item():
            return h + self.extra(h)
        return h - 0.5 * self.extra(h)


class BranchModel(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(8, dim)
        self.block = GatedBlock(dim)
        self.out = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(self.inp(x)))


def make_branch():
    torch.manual_seed(0)
    model = BranchModel()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    return model, (x,), (y,), W.squared_error


def make_mixtral_loop():
    """_moe_worker's tiny Hugging Face Mixtral with its experts' eager implementation: the loop
    over `expert_hit = (...).nonzero()` and `torch.where(expert_mask[e])` (transformers'
    MixtralExperts.forward), seeded."""
    import _moe_worker as M

    model, inputs, targets, loss_fn = M.make_mixtral()
    model.config._experts_implementation = "eager"
    return model, inputs, targets, loss_fn


MODELS = {"speech": make_speech, "moe_loop": make_moe_loop, "branch": make_branch,
          "mixtral_loop": make_mixtral_loop}


def trace(key: str):
    """(traced step, graph dict) of a model of MODELS, as the apply test traces."""
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict

    model, inputs, targets, loss_fn = MODELS[key]()
    traced = trace_for_apply(model, inputs, loss_fn, targets)
    return traced, to_graph_dict(traced)


def run_jobs(mesh, jobs: Sequence[dict]) -> list[dict]:
    """_apply_worker.run_jobs with these models registered (in this worker process only); each
    result also says how many forwards each island module ran eagerly ("islands")."""
    import warnings

    from autoshard.tracer.datadep import DataDependentWarning

    from autoshard.islands import islands_run

    W.MODELS.update(MODELS)
    results = []
    for job in jobs:
        before = islands_run()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataDependentWarning)
            (res,) = W.run_jobs(mesh, [job])
        after = islands_run()
        res["islands"] = {m: n - before.get(m, 0) for m, n in after.items()
                          if n != before.get(m, 0)}
        results.append(res)
    return results
