"""Pooling token vectors into one vector per text, and backbones without their own pooler.

Every model pools the last hidden states itself (DPR takes the raw [CLS] vector, sentence
transformers mean-pool), so a backbone's built-in pooler (BERT's dense+tanh on [CLS]) is never
used: it is dropped, or its parameters would get no gradient (breaking DDP and wasting memory).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from transformers import AutoModel

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.backbone import load_backbone

POOLINGS = ("cls", "mean", "max")


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """[B, L, H] token vectors -> [B, H]; "mean" and "max" ignore padding (mask 0)."""
    if how == "cls":
        return hidden[:, 0]
    keep = mask.bool().unsqueeze(-1)
    if how == "mean":
        summed = hidden.masked_fill(~keep, 0.0).sum(1)
        return summed / keep.sum(1).clamp(min=1).to(hidden.dtype)
    if how == "max":
        return hidden.masked_fill(~keep, float("-inf")).max(1).values
    raise UserError(f"unknown pooling {how!r}; choose from {POOLINGS}")


def without_pooler(model: nn.Module) -> nn.Module:
    """Drop the backbone's own pooler (BERT-style models skip it when it is None)."""
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def pretrained_encoder(name_or_path: str | os.PathLike) -> nn.Module:
    """Pretrained backbone (:func:`~pyserini_moe.modeling.backbone.load_backbone`), no pooler."""

    return without_pooler(load_backbone(name_or_path))


def encoder_from_config(config: Any) -> nn.Module:
    """Randomly initialised backbone of a saved config (no download), no pooler."""

    return without_pooler(AutoModel.from_config(config))
