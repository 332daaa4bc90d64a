"""ColBERT: one projected vector per token, scored by late interaction (MaxSim)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.base import Encoded, Side, SingleBackboneModel
from pyserini_moe.modeling.heads import ProjectionHead, maxsim
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import MAX_WIDTH, check, size_up_to


@dataclasses.dataclass(frozen=True)
class ColbertArgs(ModelArgs):
    """``dim``: each token vector's size after the projection (ColBERT's 128)."""

    dim: int = dataclasses.field(default=128, metadata=check(size_up_to(MAX_WIDTH)))
    normalize: bool = True


@register
class ColbertEncoder(SingleBackboneModel):
    """Shared backbone + linear projection to ``dim`` (L2-normalised) for every token, [CLS]
    included; padding is masked out of both sides of MaxSim.
    """

    model_type = "colbert"
    representations = ("multi",)

    Args = ColbertArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any, **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        self.backbone = backbone
        self.head = ProjectionHead(backbone.config.hidden_size, a.dim, a.normalize)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return Encoded(multi=self.head(hidden), mask=attention_mask)

    def similarity(self, q: Encoded, p: Encoded) -> torch.Tensor:
        return maxsim(q.multi, q.mask, p.multi, p.mask)
