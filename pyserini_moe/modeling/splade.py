"""SPLADE: learned sparse term weights over the tokenizer vocabulary (Formal et al., SPLADE-max)."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, check_device, register
from pyserini_moe.modeling.heads import SpladeHead, splade_head
from pyserini_moe.modeling.pooling import encoder_from_config, pretrained_encoder


@register
class SpladeEncoder(RetrievalModel):
    """One backbone + a :class:`SpladeHead` (MLM head tied to the word embeddings) for both sides;
    score = dot product of the [B, V] weight vectors (what an inverted index computes).
    """

    model_type = "splade"
    representations = ("sparse",)

    def __init__(self, backbone: nn.Module, head: SpladeHead, tokenizer: Any) -> None:
        super().__init__(tokenizer, {})
        self.backbone = backbone
        self.head = head
        self.pretrained_head = False  # set by from_backbone: did the checkpoint have an MLM head?

    @classmethod
    def from_backbone(cls, name: str | os.PathLike = DEFAULT_BACKBONE,
                      device: str | torch.device | None = None) -> SpladeEncoder:
        """Pretrained backbone, its MLM head when the checkpoint has one (else a random transform
        on the tied embeddings); on ``device`` (default: CUDA when present)."""
        backbone = pretrained_encoder(name)
        head, found = splade_head(backbone, name)
        model = cls(backbone, head, load_tokenizer(name))
        model.pretrained_head = found
        return model.to(check_device(device))

    @classmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any, **args: Any) -> SpladeEncoder:
        backbone = encoder_from_config(configs[""])
        return cls(backbone, splade_head(backbone)[0], tokenizer, **args)

    def backbone_configs(self) -> dict[str, Any]:
        return {"": self.backbone.config}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return Encoded(sparse=self.head(hidden, attention_mask))

    def score(self, q: Encoded, p: Encoded) -> torch.Tensor:
        return q.sparse @ p.sparse.T
