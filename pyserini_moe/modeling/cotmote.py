"""CoT-MoTE: mixture of textual experts in every Transformer block (Ma et al., cot-mote.txt).

Every block keeps one self-attention for queries and passages and splits its FFN sub-layer into a
Q-FFN (queries) and a P-FFN (passages), both initialised from the pretrained FFN (eq. 7-9; the
surgery is :func:`~pyserini_moe.modeling.experts.insert_experts` with the deterministic router).
One forward gives two representations of the last layer:

* dense: the [CLS] vector, DEN = h_0 (eq. 3), scored by dot product;
* sparse: SPR = max_i log(1 + ReLU(h_i E^T)) with E the word-embedding matrix (eq. 4), scored by
  dot product; only the ``sparse_top_k`` largest weights of each text are kept (section 3.3:
  "Top-k sparse vectors for similarity computation"). We apply the same cut while training, so
  the scores the model is trained on are the scores an impact index computes. ``sparse_head``
  ``plain`` is eq. 4 as written; ``mlm`` puts BERT's MLM prediction transform and vocabulary bias
  in front of E^T (the checkpoint's own when it has one), for backbones whose last layer was never
  trained against E: on the packaged MiniLM, plain eq. 4 is positive on all 30,522 terms of a
  SciFact abstract and a passage's self-score is ~2e4 (measured), which no index or loss can use;

and the hybrid score s_den + s_spr (eq. 13), which fine-tuning optimises.

Variants for the paper's comparison (section 5.1, table 3): ``mote`` (the above), ``siamese``
(one FFN for both, i.e. the plain backbone) and ``separate`` (two full encoders, no parameter
shared).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

import torch
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, check_device
from pyserini_moe.modeling.experts import ExpertFeedForward, insert_experts, set_route, transformer_layers
from pyserini_moe.modeling.folder import is_saved_model, load_model
from pyserini_moe.modeling.heads import SpladeHead, keep_top_k, splade_head
from pyserini_moe.modeling.pooling import POOLINGS, encoder_from_config, pool, pretrained_encoder
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import check, non_negative, one_of

VARIANTS = ("mote", "siamese", "separate")
SPARSE_HEADS = ("plain", "mlm")
DEFAULT_TOP_K = 256


@dataclasses.dataclass(frozen=True)
class CotMoteArgs(ModelArgs):
    """``variant`` and ``sparse_head`` make the architecture; ``pooling`` of the dense vector
    ([CLS]: DEN = h_0, eq. 3) and ``sparse_top_k`` (0 keeps every term) say how it encodes, and a
    saved model fine-tuned further may change them."""

    variant: str = dataclasses.field(default="mote", metadata=check(one_of(VARIANTS)))
    pooling: str = dataclasses.field(default="cls", metadata=check(one_of(POOLINGS)))
    sparse_top_k: int = dataclasses.field(default=DEFAULT_TOP_K, metadata=check(non_negative))
    sparse_head: str = dataclasses.field(default="plain", metadata=check(one_of(SPARSE_HEADS)))


@register
class CotMoteEncoder(RetrievalModel):
    """CoT-MoTE (or its Siamese / fully separated baselines) over a BERT-style backbone.

    ``backbone`` encodes both sides (``mote``: routed through Q-FFN / P-FFN by side); for
    ``separate``, ``passage_backbone`` encodes the passages and ``backbone`` the queries.
    """

    model_type = "cotmote"
    paper = ("CoT-MoTE: Exploring ConTextual Masked Auto-Encoder Pre-training with "
             "Mixture-of-Textual-Experts for Passage Retrieval")
    representations = ("dense", "sparse")

    Args = CotMoteArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any,
                 passage_backbone: nn.Module | None = None, **args: Any) -> None:
        a = self.parse_args(args)
        variant, sparse_head = a.variant, a.sparse_head
        if (variant == "separate") != (passage_backbone is not None):
            raise UserError("a passage backbone is needed by, and only by, the 'separate' variant")
        super().__init__(tokenizer, a)
        self.backbone = backbone
        self.passage_backbone = passage_backbone
        self.variant = variant
        self.pooling = a.pooling
        self.sparse_top_k = a.sparse_top_k
        # A tuple, not a ModuleList: the blocks live inside the backbone already.
        self.expert_layers: tuple[ExpertFeedForward, ...] = ()
        if variant == "mote":
            layers = list(range(len(transformer_layers(backbone))))
            self.expert_layers = tuple(insert_experts(backbone, layers, 2, "det"))
        # Eq. 4 (plain) projects with E^T itself: no transform, no bias, nothing to learn but E.
        self.sparse_heads = nn.ModuleList(
            SpladeHead(b.config, b.get_input_embeddings(), transform=sparse_head == "mlm")
            for b in self.encoders())

    @classmethod
    def from_backbone(cls, name: str | os.PathLike | None = None,
                      device: str | torch.device | None = None, **args: Any) -> CotMoteEncoder:
        """A pretrained HF backbone (default: the packaged MiniLM; Q-FFN and P-FFN copied from its
        FFNs; an ``mlm`` sparse head from its MLM head, or SPLADE's random start without one), or
        a saved CoT-MoTE model of the same variant and sparse head, e.g. the output of
        ``python -m pyserini_moe.pretrain``."""
        name = DEFAULT_BACKBONE if name is None else name
        a = cls.parse_args(args)
        variant, sparse_head = a.variant, a.sparse_head
        if is_saved_model(name):
            model = load_model(name, check_device(device))
            if not isinstance(model, cls) or model.variant != variant:
                found = getattr(model, "variant", model.model_type)
                raise UserError(f"{name} holds a {model.model_type} model ({found}), not a "
                                f"cotmote {variant} one")
            saved_head = model.args.get("sparse_head", "plain")
            if saved_head != sparse_head:
                raise UserError(f"{name} has a {saved_head!r} sparse head, not {sparse_head!r}: "
                                "pre-train and fine-tune with the same --sparse-head")
            model.pooling = model.args["pooling"] = a.pooling
            model.sparse_top_k = model.args["sparse_top_k"] = a.sparse_top_k
            return model.train()
        backbone = pretrained_encoder(name)
        passage = copy.deepcopy(backbone) if variant == "separate" else None
        model = cls(backbone, load_tokenizer(name), passage_backbone=passage, **args)
        if sparse_head == "mlm":
            head = splade_head(backbone, name)[0]
            model.sparse_heads[0] = head
            if passage is not None:
                # The passage encoder starts as a copy of the query encoder, head included: two
                # independent random transforms would map the sides onto unrelated terms
                # (measured: separate sparse nDCG@10 0.019 on SciFact after fine-tuning).
                twin = copy.deepcopy(head)
                twin.embedding_weight = passage.get_input_embeddings().weight
                model.sparse_heads[1] = twin
        return model.to(check_device(device))

    @classmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any, **args: Any) -> CotMoteEncoder:
        backbone = encoder_from_config(configs[""])
        passage = encoder_from_config(configs["passage"]) if "passage" in configs else None
        return cls(backbone, tokenizer, passage_backbone=passage, **args)

    def backbone_configs(self) -> dict[str, Any]:
        configs = {"": self.backbone.config}
        if self.passage_backbone is not None:
            configs["passage"] = self.passage_backbone.config
        return configs

    def encoders(self) -> list[nn.Module]:
        """The query encoder, then the passage encoder when it is a separate one."""
        return [self.backbone] + ([self.passage_backbone] if self.passage_backbone is not None
                                  else [])

    def encoder_for(self, side: Side) -> tuple[nn.Module, SpladeHead]:
        """The backbone and sparse head that encode ``side`` (routing set for MoTE)."""
        index = 1 if side == Side.PASSAGE and self.passage_backbone is not None else 0
        return self.encoders()[index], self.sparse_heads[index]

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      side: Side) -> torch.Tensor:
        """Last-layer token vectors of ``side``'s encoder (Q-FFN or P-FFN for MoTE)."""
        set_route(self.expert_layers, side, attention_mask)
        encoder, _ = self.encoder_for(side)
        return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: Side,
                only: str | None = None) -> Encoded:
        """Both representations, or ``only`` one of them (an index needs one: skipping the
        [L x V] vocabulary projection makes dense encoding as cheap as a plain backbone's)."""
        hidden = self.hidden_states(input_ids, attention_mask, side)
        out = Encoded()
        if only in (None, "dense"):
            out.dense = pool(hidden, attention_mask, self.pooling)
        if only in (None, "sparse"):
            _, head = self.encoder_for(side)
            out.sparse = keep_top_k(head(hidden, attention_mask), self.sparse_top_k)
        return out

    def dense_score(self, q: Encoded, p: Encoded) -> torch.Tensor:
        return q.dense @ p.dense.T

    def sparse_score(self, q: Encoded, p: Encoded) -> torch.Tensor:
        return q.sparse @ p.sparse.T

    def similarity(self, q: Encoded, p: Encoded) -> torch.Tensor:
        """Hybrid similarity s_den + s_spr (eq. 13), what fine-tuning optimises."""
        return self.dense_score(q, p) + self.sparse_score(q, p)
