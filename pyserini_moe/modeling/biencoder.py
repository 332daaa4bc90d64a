"""Dense bi-encoders: one shared (Siamese) backbone, or DPR's separate query/passage encoders."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import (
    TRANSFORMERS_WEIGHTS_FILE,
    Encoded,
    RetrievalModel,
    Side,
    SingleBackboneModel,
    check_device,
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
    # Saved as sentence-transformers saves a model: transformers' model.safetensors (the backbone's
    # own keys), modules.json, the pooling config; SentenceTransformer(folder), AutoModel and
    # Pyserini's auto encoder class then give this model's vectors.
    weights_file = TRANSFORMERS_WEIGHTS_FILE
    hf_prefix = "backbone."

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

    def write_foreign_files(self, folder: Path) -> None:
        """sentence-transformers' module list: Transformer (this folder), Pooling, Normalize."""
        modules = [{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"}]
        if self.normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
            (folder / "2_Normalize").mkdir()
        (folder / "modules.json").write_text(json.dumps(modules, indent=2))
        limit = getattr(self.backbone.config, "max_position_embeddings", 512)
        (folder / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": min(limit, 512), "do_lower_case": False}, indent=2))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": self.backbone.config.hidden_size,
            "pooling_mode_cls_token": self.pooling == "cls",
            "pooling_mode_mean_tokens": self.pooling == "mean",
            "pooling_mode_max_tokens": self.pooling == "max",
            "pooling_mode_mean_sqrt_len_tokens": False}, indent=2))


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
        return model.to(check_device(device))

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
