"""A LLaMA-3-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP,
untied input/output embeddings, next-token cross-entropy loss.

Parameter names follow Meta's reference checkpoints: tok_embeddings,
layers.N.attention.{wq,wk,wv,wo}, layers.N.feed_forward.{w1,w2,w3}, layers.N.attention_norm,
layers.N.ffn_norm, norm, output.  Rotary uses the real-valued rotate-half form (the complex
form of Meta's reference code: examples/complex_rotary.py).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._compat import parse_dtype, sdpa_available
from ..meta_init import meta_init


@dataclasses.dataclass
class LlamaConfig:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim: int = 14336
    vocab_size: int = 128256
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_seq_len: int = 8192


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    # x: [b, s, h, d]; cos/sin: [s, d]
    cos = cos[None, :, None, :].to(x.dtype)
    sin = sin[None, :, None, :].to(x.dtype)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        rep = self.n_heads // self.n_kv_heads
        if rep > 1:  # grouped-query attention: share each kv head among `rep` query heads
            k = k[:, :, :, None, :].expand(b, s, self.n_kv_heads, rep, self.head_dim)
            k = k.reshape(b, s, self.n_heads, self.head_dim)
            v = v[:, :, :, None, :].expand(b, s, self.n_kv_heads, rep, self.head_dim)
            v = v.reshape(b, s, self.n_heads, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [b, h, s, d]
        if sdpa_available():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.13: explicit causal softmax attention
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
            scores = scores + mask.to(scores.dtype)
            o = torch.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg.dim, cfg.ffn_dim)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = self._rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @staticmethod
    def _rope_tables(cfg: LlamaConfig):
        hd = cfg.dim // cfg.n_heads
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos(), ang.sin()

    def forward(self, tokens):
        s = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def cross_entropy_loss(logits, labels):
    """Token-level cross entropy in float32 (logits [b, s, V], labels [b, s])."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def llama(batch: int = 8, seq: int = 2048, dtype="bf16", layers: int = 32, dim: int = 4096,
          heads: int = 32, kv_heads: int = 8, ffn: int = 14336, vocab: int = 128256):
    """Factory: a LLaMA-style model on the meta device with token inputs and labels.

    Returns (model, (tokens,), cross_entropy_loss, (labels,)).  Defaults: LLaMA-3 8B.
    """
    cfg = LlamaConfig(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                      ffn_dim=ffn, vocab_size=vocab, max_seq_len=max(seq, 1))
    model = meta_init(Transformer, cfg)
    dt = parse_dtype(dtype)
    if dt is not None:
        # Cast the weights; the RoPE tables stay float32 like the reference implementation.
        for mod in model.modules():
            for n, p in list(mod.named_parameters(recurse=False)):
                setattr(mod, n, nn.Parameter(p.to(dt), requires_grad=p.requires_grad))
    tokens = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    labels = torch.empty(batch, seq, dtype=torch.int64, device="meta")
    return model, (tokens,), cross_entropy_loss, (labels,)


def llama3_8b(batch: int = 8, seq: int = 2048, dtype="bf16"):
    return llama(batch=batch, seq=seq, dtype=dtype)


def llama3_70b(batch: int = 8, seq: int = 2048, dtype="bf16"):
    return llama(batch=batch, seq=seq, dtype=dtype, layers=80, dim=8192, heads=64, kv_heads=8,
                 ffn=28672)


def llama_tiny(batch: int = 2, seq: int = 64, dtype="f32", layers: int = 2):
    """The fixture model: 2 layers, hidden 256, 4 heads, 2 kv heads, ffn 512, vocab 1024."""
    return llama(batch=batch, seq=seq, dtype=dtype, layers=layers, dim=256, heads=4, kv_heads=2,
                 ffn=512, vocab=1024)
