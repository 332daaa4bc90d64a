"""Dense bi-encoders: one shared (Siamese) backbone, or DPR's separate query/passage encoders."""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import (
    Encoded,
    RetrievalModel,
    Side,
    SingleBackboneModel,
    default_device,
    register,
)
from pyserini_moe.modeling.pooling import (
    POOLINGS,
    encoder_from_config,
    pool,
    pretrained_encoder,
)


def _embed(backbone: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
           pooling: str, normalize: bool) -> torch.Tensor:
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    vec = pool(hidden, attention_mask, pooling)
    return F.normalize(vec, dim=-1) if normalize else vec


@register
class SiameseBiEncoder(SingleBackboneModel):
    """Queries and passages through the same backbone; score = dot product of pooled vectors.

    Defaults (mean pooling, L2-normalised) are how all-MiniLM-L6-v2 was trained; normalised
    vectors give cosine scores in [-1, 1], so train them with a temperature (e.g. 0.05).
    """

    model_type = "siamese"
    representations = ("dense",)

    def __init__(self, backbone: nn.Module, tokenizer: Any, pooling: str = "mean",
                 normalize: bool = True) -> None:
        super().__init__(tokenizer, {"pooling": pooling, "normalize": normalize})
        if pooling not in POOLINGS:
            raise UserError(f"unknown pooling {pooling!r}; choose from {POOLINGS}")
        self.backbone = backbone
        self.pooling = pooling
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        return Encoded(dense=_embed(self.backbone, input_ids, attention_mask, self.pooling,
                                    self.normalize))


@register
class DprBiEncoder(RetrievalModel):
    """DPR: a query encoder and a passage encoder, both starting from the same pretrained backbone.

    [CLS] pooling and unnormalised dot product by default, as in DPR. Saved with the query
    encoder's config at the root and the passage encoder's in ``passage/``.
    """

    model_type = "dpr"
    representations = ("dense",)

    def __init__(self, query_encoder: nn.Module, passage_encoder: nn.Module, tokenizer: Any,
                 pooling: str = "cls", normalize: bool = False) -> None:
        super().__init__(tokenizer, {"pooling": pooling, "normalize": normalize})
        if pooling not in POOLINGS:
            raise UserError(f"unknown pooling {pooling!r}; choose from {POOLINGS}")
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder
        self.pooling = pooling
        self.normalize = normalize

    @classmethod
    def from_backbone(cls, name: str | os.PathLike = DEFAULT_BACKBONE,
                      device: str | torch.device | None = None, **args: Any) -> DprBiEncoder:
        """Both encoders are copies of the pretrained backbone, with the constructor's ``args``;
        on ``device`` (default: CUDA when present)."""
        query_encoder = pretrained_encoder(name)
        model = cls(query_encoder, copy.deepcopy(query_encoder), load_tokenizer(name), **args)
        return model.to(device or default_device())

    @classmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any, **args: Any) -> DprBiEncoder:
        return cls(encoder_from_config(configs[""]), encoder_from_config(configs["passage"]),
                   tokenizer, **args)

    def backbone_configs(self) -> dict[str, Any]:
        return {"": self.query_encoder.config, "passage": self.passage_encoder.config}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        encoder = self.query_encoder if side == Side.QUERY else self.passage_encoder
        return Encoded(dense=_embed(encoder, input_ids, attention_mask, self.pooling,
                                    self.normalize))
