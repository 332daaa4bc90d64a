"""SPLADE: learned sparse term weights over the tokenizer vocabulary (Formal et al., SPLADE-max)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch import nn

from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, check_device
from pyserini_moe.modeling.heads import SpladeHead, keep_top_k, splade_head
from pyserini_moe.modeling.pooling import encoder_from_config, pretrained_encoder
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import check, non_negative


@dataclasses.dataclass(frozen=True)
class SpladeArgs(ModelArgs):
    """How many of a text's largest term weights each side keeps (0: every term)."""

    query_top_k: int = dataclasses.field(default=0, metadata=check(non_negative))
    passage_top_k: int = dataclasses.field(default=0, metadata=check(non_negative))


@register
class SpladeEncoder(RetrievalModel):
    """One backbone + a :class:`SpladeHead` (MLM head tied to the word embeddings) for both sides;
    score = dot product of the [B, V] weight vectors (what an inverted index computes).

    ``query_top_k`` / ``passage_top_k`` keep only that many of a text's largest weights (0: all),
    in training as in encoding: a model trained through the cut learns to rank with the terms
    its index and queries will hold, where pruning a trained model afterwards loses what the
    dropped terms carried.
    """

    model_type = "splade"
    representations = ("sparse",)

    Args = SpladeArgs

    def __init__(self, backbone: nn.Module, head: SpladeHead, tokenizer: Any, **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        self.backbone = backbone
        self.head = head
        self.top_k = {Side.QUERY: a.query_top_k, Side.PASSAGE: a.passage_top_k}
        self.pretrained_head = False  # set by from_backbone: did the checkpoint have an MLM head?

    @classmethod
    def from_backbone(cls, name: str | os.PathLike | None = None,
                      device: str | torch.device | None = None, **args: Any) -> SpladeEncoder:
        """Pretrained backbone (default: the packaged MiniLM), its MLM head when the checkpoint
        has one (else a random transform on the tied embeddings); on ``device`` (default: CUDA
        when present)."""
        name = DEFAULT_BACKBONE if name is None else name
        backbone = pretrained_encoder(name)
        head, found = splade_head(backbone, name)
        model = cls(backbone, head, load_tokenizer(name), **args)
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
        return Encoded(sparse=keep_top_k(self.head(hidden, attention_mask), self.top_k[side]))

    def similarity(self, q: Encoded, p: Encoded) -> torch.Tensor:
        return q.sparse @ p.sparse.T
