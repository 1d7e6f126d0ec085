"""torchvision ResNets as trace factories (classification with cross-entropy)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._compat import parse_dtype
from ..meta_init import meta_init


def _resnet(arch: str, batch: int, image_size: int, num_classes: int, dtype):
    import torchvision  # optional dependency: only these factories need it

    ctor = getattr(torchvision.models, arch)
    model = meta_init(ctor, num_classes=num_classes)
    dt = parse_dtype(dtype)
    if dt is not None:
        model = model.to(dt)  # meta -> meta: free
    images = torch.empty(batch, 3, image_size, image_size, dtype=dt or torch.float32,
                         device="meta")
    labels = torch.empty(batch, dtype=torch.int64, device="meta")
    return model, (images,), classification_loss, (labels,)


def classification_loss(logits, labels):
    return F.cross_entropy(logits.float(), labels)


def resnet18(batch: int = 32, image_size: int = 224, num_classes: int = 1000, dtype="f32"):
    """Factory: torchvision resnet18 (BatchNorm in training mode), images [batch,3,H,W]."""
    return _resnet("resnet18", batch, image_size, num_classes, dtype)


def resnet50(batch: int = 32, image_size: int = 224, num_classes: int = 1000, dtype="f32"):
    return _resnet("resnet50", batch, image_size, num_classes, dtype)
