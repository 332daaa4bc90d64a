"""Training losses shared by every model."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pyserini_moe.modeling.heads import flops

__all__ = ["contrastive_loss", "flops"]


def contrastive_loss(scores: torch.Tensor, positive_index: torch.Tensor,
                     temperature: float = 1.0) -> torch.Tensor:
    """NLL of each query's positive among all batch passages (in-batch + hard negatives), as in
    DPR / TASER eq. 2: scores [Bq, Bp] with passages [positives..., negatives...]."""
    return F.cross_entropy(scores / temperature, positive_index)
