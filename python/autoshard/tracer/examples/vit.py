"""A small Vision Transformer (pre-norm, LayerNorm, GELU MLP, class token, learned positions).

Patch embedding is a strided Conv2d, attention is explicit (softmax(QK^T/sqrt(d))V) or
F.scaled_dot_product_attention where available.  Parameter names: patch_embed, cls_token,
pos_embed, blocks.N.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}, norm, head.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._compat import parse_dtype, sdpa_available
from ..meta_init import meta_init


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        if sdpa_available():
            o = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            o = torch.matmul(a.softmax(dim=-1), v)
        return self.proj(o.transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, dim * mlp_ratio)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=224, patch=16, dim=768, depth=12, heads=12, mlp_ratio=4,
                 num_classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        n = (image_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # [b, n, dim]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def classification_loss(logits, labels):
    return F.cross_entropy(logits.float(), labels)


def vit(batch: int = 32, image_size: int = 224, patch: int = 16, dim: int = 768,
        depth: int = 12, heads: int = 12, mlp_ratio: int = 4, num_classes: int = 1000,
        dtype="f32"):
    """Factory: ViT (defaults: ViT-B/16).  Returns (model, (images,), loss, (labels,))."""
    model = meta_init(VisionTransformer, image_size, patch, dim, depth, heads, mlp_ratio,
                      num_classes)
    dt = parse_dtype(dtype)
    if dt is not None:
        model = model.to(dt)
    images = torch.empty(batch, 3, image_size, image_size, dtype=dt or torch.float32,
                         device="meta")
    labels = torch.empty(batch, dtype=torch.int64, device="meta")
    return model, (images,), classification_loss, (labels,)


def vit_tiny(batch: int = 2, image_size: int = 32, dtype="f32", depth: int = 2):
    """The fixture model: 32x32 images, patch 8, dim 64, 2 blocks, 4 heads, 10 classes."""
    return vit(batch=batch, image_size=image_size, patch=8, dim=64, depth=depth, heads=4,
               mlp_ratio=4, num_classes=10, dtype=dtype)
