"""A LLaMA-style decoder whose rotary embedding uses complex tensors, the way Meta's reference
LLaMA, torchtitan's llama3 and AutoParallel's llama3 write it: a complex64 table
`freqs_cis = torch.polar(ones, angles)`, queries and keys paired into complex numbers with
`torch.view_as_complex`, rotated by one complex multiply and unpaired with
`torch.view_as_real`.

Everything else is examples/llama.py's model (RMSNorm, grouped-query attention, SwiGLU MLP).
`table="buffer"` precomputes the complex table as a buffer (what those three models do);
`table="forward"` builds it with torch.polar inside every forward from a real angle buffer,
so the step itself runs polar.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._compat import parse_dtype
from ..meta_init import meta_init
from .llama import FeedForward, LlamaConfig, RMSNorm, cross_entropy_loss

__all__ = ["ComplexRotaryTransformer", "rotary_angles", "apply_complex_rotary",
           "complex_rotary_tiny", "cross_entropy_loss"]

TABLES = ("buffer", "forward")


def rotary_angles(head_dim: int, seq: int, theta: float) -> torch.Tensor:
    """The rotary angles (RoPE: Su et al. 2021): position p times theta^(-2i / head_dim) for
    each of the head_dim / 2 pairs; float32 [seq, head_dim / 2]."""
    pair = torch.arange(head_dim // 2, dtype=torch.float32)
    inv_freq = torch.pow(theta, -2.0 * pair / head_dim)
    return torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]


def apply_complex_rotary(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Rotates consecutive (even, odd) pairs of x [b, s, h, d] by the complex table
    freqs_cis [s, d / 2]; the result has x's dtype."""
    b, s, h, d = x.shape
    pairs = torch.view_as_complex(x.float().reshape(b, s, h, d // 2, 2))
    rotated = pairs * freqs_cis.view(1, s, 1, d // 2)
    return torch.view_as_real(rotated).flatten(3).type_as(x)


class ComplexRotaryAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_complex_rotary(q, freqs_cis), apply_complex_rotary(k, freqs_cis)
        rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, h, s, d]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class ComplexRotaryBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention = ComplexRotaryAttention(cfg)
        self.feed_forward = FeedForward(cfg.dim, cfg.ffn_dim)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class ComplexRotaryTransformer(nn.Module):
    """Token ids [b, s] -> logits [b, s, vocab], rotary on complex tensors (see the module)."""

    def __init__(self, cfg: LlamaConfig, table: str = "buffer"):
        super().__init__()
        if table not in TABLES:
            raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
        self.cfg = cfg
        self.table = table
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(ComplexRotaryBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        angles = rotary_angles(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
        if table == "buffer":
            self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles),
                                 persistent=False)
        else:
            self.register_buffer("rope_angles", angles, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        if self.table == "buffer":
            freqs_cis = self.freqs_cis[:s]
        else:
            angles = self.rope_angles[:s]
            freqs_cis = torch.polar(torch.ones_like(angles), angles)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, freqs_cis)
        return self.output(self.norm(h))


def complex_rotary_tiny(batch: int = 2, seq: int = 64, dtype="bf16", table: str = "buffer"):
    """Factory (the op-coverage fixture): 2 layers, hidden 256, 4 heads, 2 KV heads, ffn 512,
    vocab 1024, on the meta device; weights in `dtype`, the rotary table complex64.

    Returns (model, (tokens,), cross_entropy_loss, (labels,))."""
    cfg = LlamaConfig(dim=256, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=512,
                      vocab_size=1024, max_seq_len=max(seq, 1))
    model = meta_init(ComplexRotaryTransformer, cfg, table)
    dt = parse_dtype(dtype)
    if dt is not None:
        for mod in model.modules():
            for n, p in list(mod.named_parameters(recurse=False)):
                setattr(mod, n, nn.Parameter(p.to(dt), requires_grad=p.requires_grad))
    tokens = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    labels = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    return model, (tokens,), cross_entropy_loss, (labels,)
