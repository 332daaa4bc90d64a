"""CoT-MAE's pre-training model (cot-mote.txt section 3.3, eq. 11-12): a CoT-MoTE encoder, an MLM
head per encoder, and a one-layer causal decoder that rebuilds a neighbouring context from the
encoder's [CLS] bottleneck. Trained by :mod:`pyserini_moe.train.pretrain`
(``python -m pyserini_moe.pretrain``); what it leaves is the encoder, saved as a CotMoteEncoder.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel

from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.cotmote import CotMoteEncoder
from pyserini_moe.modeling.heads import SpladeHead
from pyserini_moe.modeling.pooling import pool


class ContextualMae(nn.Module):
    """Encoder + MLM heads + a one-layer causal decoder over the [CLS] bottleneck (eq. 11-12)."""

    def __init__(self, encoder: CotMoteEncoder, mlm_heads: list[SpladeHead],
                 switch_experts: bool = False) -> None:
        super().__init__()
        self.encoder = encoder
        self.mlm_heads = nn.ModuleList(mlm_heads)  # one per encoder (two for 'separate')
        config = copy.deepcopy(encoder.backbone.config)
        config.num_hidden_layers, config.is_decoder, config.add_cross_attention = 1, True, False

        self.decoder = AutoModel.from_config(config)
        self.decoder.pooler = None
        # The decoder reads word vectors of the encoder's own vocabulary matrix (not a copy).
        self.decoder.embeddings.word_embeddings = encoder.backbone.get_input_embeddings()
        self.switch_experts = switch_experts

    def route_side(self, side: Side) -> Side:
        if not self.switch_experts:
            return side
        return Side.PASSAGE if side == Side.QUERY else Side.QUERY

    def loss(self, anchors: dict[str, torch.Tensor], labels: torch.Tensor,
             context: dict[str, torch.Tensor], side: Side) -> tuple[torch.Tensor, torch.Tensor]:
        """(MLM loss, decoder loss) of one side's batch. ``labels`` holds the original ids at
        masked positions and -100 elsewhere."""
        side = self.route_side(side)
        hidden = self.encoder.hidden_states(anchors["input_ids"], anchors["attention_mask"], side)
        head = self.mlm_heads[1 if side == Side.PASSAGE and len(self.mlm_heads) > 1 else 0]
        masked = labels != -100
        mlm = F.cross_entropy(head.logits(hidden[masked]), labels[masked]) if masked.any() \
            else hidden.sum() * 0.0
        encoder, _ = self.encoder.encoder_for(side)
        ids, mask = context["input_ids"], context["attention_mask"]
        embeds = encoder.get_input_embeddings()(ids)
        # The [CLS] slot gets the bottleneck: the encoder's dense vector ([CLS] in the paper).
        bottleneck = pool(hidden, anchors["attention_mask"], self.encoder.pooling)
        embeds = torch.cat([bottleneck.unsqueeze(1), embeds[:, 1:]], dim=1)
        out = self.decoder(inputs_embeds=embeds, attention_mask=mask,
                           use_cache=False).last_hidden_state
        targets = ids[:, 1:].masked_fill(~mask[:, 1:].bool(), -100)
        decoded = head.logits(out[:, :-1])
        dec = F.cross_entropy(decoded.reshape(-1, decoded.shape[-1]), targets.reshape(-1),
                              ignore_index=-100)
        return mlm, dec


def mlm_heads_for(encoder: CotMoteEncoder, backbone: str) -> list[SpladeHead]:
    """An MLM head per encoder, tied to its word embeddings. An encoder with an ``mlm`` sparse
    head predicts through that very head, so pre-training shapes the head fine-tuning starts
    from; otherwise the checkpoint's own MLM head when it has one (bert-base-uncased), else eq.
    4's plain projection h E^T (MiniLM ships without)."""
    if encoder.args["sparse_head"] == "mlm":
        return list(encoder.sparse_heads)
    heads = []
    for module in encoder.encoders():
        head = SpladeHead(module.config, module.get_input_embeddings())
        if not head.load_pretrained(backbone):  # no MLM head: eq. 4's projection, no warning
            head = SpladeHead(module.config, module.get_input_embeddings(), transform=False)
        heads.append(head.to(encoder.device))
    return heads


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer: Any,
                ratio: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of ``ratio`` of the real non-special tokens: 80% [MASK], 10% a random token,
    10% unchanged. Returns (masked ids, labels with -100 where nothing is predicted)."""
    special = torch.tensor([[tok in tokenizer.all_special_ids for tok in row]
                            for row in input_ids.tolist()], device=input_ids.device)
    candidates = attention_mask.bool() & ~special
    draw = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    chosen = candidates & (draw < ratio)
    labels = input_ids.masked_fill(~chosen, -100)
    action = torch.rand(input_ids.shape, generator=generator).to(input_ids.device)
    masked = input_ids.clone()
    masked[chosen & (action < 0.8)] = tokenizer.mask_token_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    random_ids = torch.randint(len(tokenizer), input_ids.shape, generator=generator)
    masked[swap] = random_ids.to(input_ids.device)[swap]
    return masked, labels
