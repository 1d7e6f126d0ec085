"""A small speech recogniser trained with CTC: a 1-D convolution front end over filterbank
frames, a linear encoder, per-frame log-probabilities over the output alphabet and
`F.ctc_loss` (Graves et al. 2006) with tensor lengths, the form speech models use.

PyTorch has no Meta kernel for the `.Tensor` overload of `aten::_ctc_loss` that this calls,
nor for its backward; the tracer supplies them while it traces (tracer/meta_kernels.py).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..meta_init import meta_init

__all__ = ["SpeechConfig", "CtcSpeechModel", "ctc_loss", "ctc_speech"]


@dataclasses.dataclass
class SpeechConfig:
    n_mels: int = 80        # filterbank features per frame
    hidden: int = 256
    n_layers: int = 2       # linear encoder layers after the convolution
    vocab: int = 32         # output alphabet, blank (0) included
    conv: bool = True       # front end: Conv1d over time (True) or a per-frame Linear


class CtcSpeechModel(nn.Module):
    """features [N, n_mels, T] -> log_probs [T, N, vocab] (the layout ctc_loss reads)."""

    def __init__(self, cfg: SpeechConfig):
        super().__init__()
        self.conv = (nn.Conv1d(cfg.n_mels, cfg.hidden, kernel_size=3, padding=1) if cfg.conv
                     else None)
        self.frame = None if cfg.conv else nn.Linear(cfg.n_mels, cfg.hidden)
        self.layers = nn.ModuleList(nn.Linear(cfg.hidden, cfg.hidden) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.hidden, cfg.vocab)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.conv is not None:
            h = F.gelu(self.conv(features)).transpose(1, 2)      # [N, T, hidden]
        else:
            h = F.gelu(self.frame(features.transpose(1, 2)))
        for layer in self.layers:
            h = h + F.gelu(layer(h))
        return F.log_softmax(self.head(h), dim=-1).transpose(0, 1)


def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
             target_lengths: torch.Tensor) -> torch.Tensor:
    """CTC loss, blank 0, mean over the batch of each sample's loss over its target length."""
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0,
                      reduction="mean", zero_infinity=True)


def ctc_speech(batch: int = 8, frames: int = 100, target_len: int = 20, n_mels: int = 80,
               hidden: int = 256, n_layers: int = 2, vocab: int = 32, conv: bool = True):
    """Factory (autoshard-trace convention): (model, (features,), ctc_loss, (targets,
    input_lengths, target_lengths)) on meta; targets padded to [batch, target_len]."""
    cfg = SpeechConfig(n_mels=n_mels, hidden=hidden, n_layers=n_layers, vocab=vocab, conv=conv)
    model = meta_init(CtcSpeechModel, cfg)
    meta = torch.device("meta")
    features = torch.empty(batch, n_mels, frames, device=meta)
    targets = torch.empty(batch, target_len, dtype=torch.long, device=meta)
    lengths = torch.empty(batch, dtype=torch.long, device=meta)
    return model, (features,), ctc_loss, (targets, lengths, lengths.clone())
