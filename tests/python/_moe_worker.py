"""Mixture-of-Experts models and the per-rank worker of test_moe.py (importable by spawned
processes).  The apply machinery is _apply_worker's; the MoE model is registered into its
model table only inside the worker processes (run_moe_jobs), so test_apply's own model list
is unchanged."""
from __future__ import annotations

from typing import Sequence

import torch

import _apply_worker as W


def make_moe():
    """A 2-layer LLaMA-style decoder whose FFN is 4 routed experts (top-2, stacked weights,
    torch._grouped_mm) plus a shared expert (autoshard.tracer.examples.moe), seeded."""
    from autoshard.tracer.examples.moe import MoEConfig, MoETransformer, cross_entropy_loss

    torch.manual_seed(0)
    cfg = MoEConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=16, vocab_size=64,
                    max_seq_len=8, n_experts=4, top_k=2, expert_dim=16, shared_dim=16)
    model = MoETransformer(cfg)
    # Data seed 4: no gradient element within 1e3 x of AdamW's eps (1e-8), where the update
    # g / (|g| + eps) turns a last-bit difference of g into a visible parameter difference.
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, 64, (4, 8), generator=g)
    labels = torch.randint(0, 64, (4, 8), generator=g)
    return model, (tokens,), (labels,), cross_entropy_loss


def hf_loss(out, labels):
    """Token cross entropy of a Hugging Face causal LM's logits."""
    return torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten())


def make_mixtral():
    """A tiny Hugging Face Mixtral (2 layers, 4 experts, top-2; its experts' default
    grouped_mm path: sort, histc, cumsum, `_grouped_mm` over rows sorted by expert), seeded."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=16,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=16,
                                     num_local_experts=4, num_experts_per_tok=2,
                                     initializer_range=0.2)  # gradients well above AdamW's eps
    model = transformers.MixtralForCausalLM(cfg)
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, 64, (4, 8), generator=g)
    labels = torch.randint(0, 64, (4, 8), generator=g)
    return model, (tokens,), (labels,), hf_loss


MODELS = {"moe": make_moe, "mixtral": make_mixtral}


def trace(key: str):
    """(traced step, graph dict) of a model of MODELS, as the apply test traces."""
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict

    model, inputs, targets, loss_fn = MODELS[key]()
    traced = trace_for_apply(model, inputs, loss_fn, targets)
    return traced, to_graph_dict(traced)


def run_moe_jobs(mesh, jobs: Sequence[dict]) -> list[dict]:
    """_apply_worker.run_jobs with the MoE models registered (in this worker process only)."""
    W.MODELS.update(MODELS)
    return W.run_jobs(mesh, jobs)
