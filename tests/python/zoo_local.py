"""Plain-PyTorch architectures of the zoo (tests/python/zoo_models.py) that transformers does
not ship, written here in the style of the code people train: two LLaMA variants whose rotary
embedding runs on complex tensors (`torch.polar`, `torch.view_as_complex`), and two recurrent
models (`nn.LSTM`, `nn.GRU`).

* `MetaStyleLlama`: the layout of Meta's reference LLaMA -- the complex64 table a plain
  attribute (not a buffer: `Module.to(dtype)` leaves it complex), broadcast to the queries by
  a reshape, attention written out (scores, additive causal mask, softmax in float32), the
  SwiGLU width rounded up to a multiple.
* `TitanStyleLlama3`: the layout of torchtitan's llama3 -- the table a buffer built with
  LLaMA-3's frequency scaling (long wavelengths slowed by a factor, a smooth band between),
  grouped-query attention with the key/value heads repeated by expand + reshape, fused SDPA,
  weights kept in float32 (torchtitan trains float32 master weights).
* `LstmLM`: a word-level LSTM language model (embedding, 2-layer nn.LSTM, tied decoder).
* `GruTagger`: a bidirectional 2-layer nn.GRU sequence tagger.

Each class takes a `LocalConfig` and `forward(input_ids)` returns logits, so the zoo's text
inputs and default loss apply unchanged.  All code is written for this file.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["LocalConfig", "MetaStyleLlama", "TitanStyleLlama3", "LstmLM", "GruTagger"]


@dataclasses.dataclass
class LocalConfig:
    """The sizes of a local zoo model (the zoo's small defaults: zoo_models.py)."""

    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_multiple: int = 32
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    rope_scale: float = 8.0          # LLaMA-3 frequency scaling (TitanStyleLlama3)
    rope_original_len: int = 16      # the context length the scaling keeps
    eps: float = 1e-5


def rotation_table(head_dim: int, seq: int, theta: float,
                   scale: float = 1.0, original_len: int = 0) -> torch.Tensor:
    """complex64 [seq, head_dim / 2]: e^(i p w_k) for position p and pair frequency
    w_k = theta^(-2k / head_dim).  With scale > 1, LLaMA-3's scaling: frequencies whose
    wavelength exceeds original_len are divided by `scale`, those under original_len / 4 kept,
    and the band between interpolated linearly in original_len / wavelength."""
    freqs = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    if scale > 1.0:
        wavelen = 2 * math.pi / freqs
        ratio = original_len / wavelen                      # periods in the original context
        smooth = ((ratio - 1.0) / (4.0 - 1.0)).clamp(0.0, 1.0)
        freqs = (1.0 - smooth) * freqs / scale + smooth * freqs
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def rotate_pairs(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [b, s, h, d] with consecutive (even, odd) entries as complex numbers, times
    table [s, d / 2] broadcast over batch and heads; x's dtype."""
    as_complex = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    shape = [1] * as_complex.dim()
    shape[1], shape[-1] = as_complex.shape[1], as_complex.shape[-1]
    return torch.view_as_real(as_complex * table.reshape(shape)).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x), hidden 8/3 dim rounded up to a multiple."""

    def __init__(self, dim: int, multiple: int) -> None:
        super().__init__()
        hidden = multiple * ((int(8 * dim / 3) + multiple - 1) // multiple)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class _Attention(nn.Module):
    """Grouped-query attention on rotated queries and keys; `fused` picks SDPA over the
    written-out scores."""

    def __init__(self, cfg: LocalConfig, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.n_heads, self.n_kv = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def _repeat(self, t: torch.Tensor) -> torch.Tensor:
        b, s, kv, d = t.shape
        rep = self.n_heads // kv
        return t[:, :, :, None, :].expand(b, s, kv, rep, d).reshape(b, s, kv * rep, d)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = rotate_pairs(self.wq(x).view(b, s, self.n_heads, self.head_dim), table)
        k = rotate_pairs(self.wk(x).view(b, s, self.n_kv, self.head_dim), table)
        v = self.wv(x).view(b, s, self.n_kv, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, self._repeat(k), self._repeat(v)))
        if self.fused:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
            mask = torch.full((s, s), float("-inf"), device=x.device).triu(1)
            probs = F.softmax(scores.float() + mask, dim=-1).type_as(q)
            out = probs @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class _Block(nn.Module):
    def __init__(self, cfg: LocalConfig, fused: bool) -> None:
        super().__init__()
        self.attention = _Attention(cfg, fused)
        self.feed_forward = SwiGLU(cfg.dim, cfg.ffn_multiple)
        self.attention_norm = RMSNorm(cfg.dim, cfg.eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), table)
        return h + self.feed_forward(self.ffn_norm(h))


class _Decoder(nn.Module):
    def __init__(self, cfg: LocalConfig, fused: bool) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(_Block(cfg, fused) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def run(self, input_ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(input_ids)
        for layer in self.layers:
            h = layer(h, table)
        return self.output(self.norm(h)).float()


class MetaStyleLlama(_Decoder):
    """Meta's reference layout (see the module); the table a plain complex64 attribute."""

    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__(cfg, fused=False)
        self.freqs_cis = rotation_table(cfg.dim // cfg.n_heads, 2 * cfg.max_seq_len,
                                        cfg.rope_theta)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.run(input_ids, self.freqs_cis[:input_ids.shape[1]])


class TitanStyleLlama3(_Decoder):
    """torchtitan's llama3 layout (see the module); the scaled table a buffer."""

    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__(cfg, fused=True)
        self.register_buffer("freqs_cis", rotation_table(
            cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta, cfg.rope_scale,
            cfg.rope_original_len), persistent=True)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.run(input_ids, self.freqs_cis[:input_ids.shape[1]])


class LstmLM(nn.Module):
    """Embedding -> 2-layer nn.LSTM -> decoder tied to the embedding."""

    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.rnn = nn.LSTM(cfg.dim, cfg.dim, num_layers=cfg.n_layers, batch_first=True)
        self.decoder = nn.Linear(cfg.dim, cfg.vocab_size)
        self.decoder.weight = self.embed.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(input_ids))
        return self.decoder(out)


class GruTagger(nn.Module):
    """Embedding -> bidirectional 2-layer nn.GRU -> a tag per token (16 tags)."""

    def __init__(self, cfg: LocalConfig, n_tags: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.rnn = nn.GRU(cfg.dim, cfg.dim // 2, num_layers=cfg.n_layers, batch_first=True,
                          bidirectional=True)
        self.tags = nn.Linear(cfg.dim, n_tags)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(input_ids))
        return self.tags(out)
