"""A LLaMA-style decoder whose feed-forward is a Mixture of Experts: a top-k router, routed
experts whose weights are stacked along a leading expert dim (one [E, ...] tensor per
projection, multiplied by one grouped matmul, `torch._grouped_mm`, as torchtitan's grouped
experts do) and an always-on shared expert (DeepSeek-V3 / Qwen2-MoE style).

Tokens reach the experts through a capacity-padded dispatch tensor (GShard, Lepikhin et al.
2020, arXiv:2006.16668, section 2.2): each batch row (a "group") gives every expert C slots,
C = ceil(capacity_factor * seq * top_k / n_experts); a token's position in its expert's queue
is a cumulative sum over the group, tokens past the capacity are dropped.  Every shape is
static, so the step traces on the meta device, and expert parallelism is a placement: the
dispatched activations [E, B, C, D] split on their expert dim (like the stacked weights) are
the same tensor as the batch-split ones, moved by one all-to-all (autoshard's Shard(1) ->
Shard(0) redistribution), and back after the experts.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._compat import parse_dtype
from ..meta_init import meta_init
from .llama import Attention, FeedForward, LlamaConfig, RMSNorm, cross_entropy_loss

__all__ = ["MoEConfig", "MoE", "MoETransformer", "moe", "cross_entropy_loss"]


@dataclasses.dataclass
class MoEConfig(LlamaConfig):
    n_experts: int = 8
    top_k: int = 2
    expert_dim: int = 1024      # hidden size of one routed expert
    shared_dim: int = 1024      # hidden size of the shared expert (0: none)
    capacity_factor: float = 1.25
    grouped_mm: bool = True     # torch._grouped_mm (torchtitan); False: torch.bmm


class MoE(nn.Module):
    """Routed experts (stacked weights w1, w3: [E, dim, hidden], w2: [E, hidden, dim]) plus an
    optional shared expert.  Input and output [B, S, dim]."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        e, d, h = cfg.n_experts, cfg.dim, cfg.expert_dim
        self.n_experts, self.top_k, self.capacity_factor = e, cfg.top_k, cfg.capacity_factor
        self.grouped_mm = cfg.grouped_mm and hasattr(torch, "_grouped_mm")
        self.router = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, d, h) / math.sqrt(d))
        self.w3 = nn.Parameter(torch.randn(e, d, h) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(e, h, d) / math.sqrt(h))
        self.shared = FeedForward(d, cfg.shared_dim) if cfg.shared_dim > 0 else None

    def capacity(self, seq: int) -> int:
        """Slots per expert and batch row."""
        return max(1, math.ceil(self.capacity_factor * seq * self.top_k / self.n_experts))

    def _mm(self, a, b):
        return torch._grouped_mm(a, b) if self.grouped_mm else torch.bmm(a, b)

    def forward(self, x):
        b, s, d = x.shape
        e, k, c = self.n_experts, self.top_k, self.capacity(s)
        probs = F.softmax(self.router(x).float(), dim=-1)              # [B, S, E]
        weight, index = torch.topk(probs, k, dim=-1)                   # [B, S, k]
        weight = (weight / weight.sum(-1, keepdim=True)).to(x.dtype)
        experts = torch.arange(e, device=x.device)
        hit = (index.unsqueeze(-1) == experts).to(x.dtype).reshape(b, s * k, e)
        pos = torch.cumsum(hit, dim=1) - 1                             # queue position
        slots = torch.arange(c, device=x.device).to(x.dtype)
        # [B, S*k, E, C]: 1 where (token, choice) sits in slot c of expert e; none past C.
        dispatch = hit.unsqueeze(-1) * (pos.unsqueeze(-1) == slots).to(x.dtype)
        xr = x.unsqueeze(2).expand(b, s, k, d).reshape(b, s * k, d)
        xe = torch.einsum("btec,btd->ebcd", dispatch, xr).reshape(e, b * c, d)
        hid = F.silu(self._mm(xe, self.w1)) * self._mm(xe, self.w3)  # [E, B*C, hidden]
        ye = self._mm(hid, self.w2).reshape(e, b, c, d)
        combine = dispatch * weight.reshape(b, s * k, 1, 1)
        y = torch.einsum("btec,ebcd->btd", combine, ye).reshape(b, s, k, d).sum(2)
        return y + self.shared(x) if self.shared is not None else y


class MoEBlock(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.moe = MoE(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.moe(self.ffn_norm(h))


class MoETransformer(nn.Module):
    """Token embedding, `n_layers` MoE blocks, final norm and output projection."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        from .llama import Transformer

        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(MoEBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = Transformer._rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens):
        s = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def moe(batch: int = 8, seq: int = 64, dtype="f32", layers: int = 2, dim: int = 256,
        heads: int = 4, kv_heads: int = 2, experts: int = 8, top_k: int = 2,
        expert_dim: int = 256, shared_dim: int = 256, vocab: int = 1024):
    """Factory: the MoE decoder on the meta device with token inputs and labels.

    Returns (model, (tokens,), cross_entropy_loss, (labels,))."""
    cfg = MoEConfig(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                    ffn_dim=expert_dim, vocab_size=vocab, max_seq_len=max(seq, 1),
                    n_experts=experts, top_k=top_k, expert_dim=expert_dim,
                    shared_dim=shared_dim)
    model = meta_init(MoETransformer, cfg)
    dt = parse_dtype(dtype)
    if dt is not None:
        for mod in model.modules():
            for n, p in list(mod.named_parameters(recurse=False)):
                setattr(mod, n, nn.Parameter(p.to(dt), requires_grad=p.requires_grad))
    tokens = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    labels = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    return model, (tokens,), cross_entropy_loss, (labels,)
