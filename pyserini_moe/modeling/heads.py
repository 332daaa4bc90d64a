"""Heads shared by every model (and reused by the MoE models): SPLADE term weights, ColBERT
token projections with late-interaction (MaxSim) scoring, and SPLADE's FLOPS regulariser.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM
from transformers.models.bert.modeling_bert import (
    BertPredictionHeadTransform,
)
from transformers.utils import logging as hf_logging

from pyserini_moe.modeling.backbone import resolve_backbone

log = logging.getLogger(__name__)

UNTRAINED_BIAS = -3.0  # initial vocabulary bias of a SPLADE head with no pretrained MLM weights


class SpladeHead(nn.Module):
    """Vocabulary term weights: max over real tokens of log(1 + ReLU(logits)).

    logits = transform(h) E^T + bias, a BERT MLM prediction head whose decoder is TIED to the
    backbone's word embeddings E (so backbones shipped without an MLM head, like MiniLM, only add
    the small transform). ``transform=False`` is CoT-MoTE's plain variant, log(1 + ReLU(h E^T)).
    """

    def __init__(self, config: Any, word_embeddings: nn.Embedding, transform: bool = True) -> None:
        super().__init__()
        self.embedding_weight = word_embeddings.weight  # the same Parameter: tied, not copied
        self.transform: nn.Module | None = None
        self.bias: nn.Parameter | None = None
        if transform:

            self.transform = BertPredictionHeadTransform(config)
            self.bias = nn.Parameter(torch.zeros(word_embeddings.num_embeddings))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, L, H] -> [B, L, V] MLM logits."""
        if self.transform is not None:
            hidden = self.transform(hidden)
        return F.linear(hidden, self.embedding_weight, self.bias)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor,
                max_elements: int = 2 ** 26) -> torch.Tensor:
        """[B, L, H], [B, L] -> [B, V] non-negative weights; padding never contributes.

        log(1 + ReLU(.)) is monotone, so it is applied after the max: same values and gradients,
        one [B, L, V] tensor fewer. Only real tokens are projected (the [tokens x V] product is
        most of the cost, and a padded position's logits would be masked away): consecutive
        rows are packed into chunks of at most ``max_elements`` logits (32 passages x 256 tokens
        x 30,522 terms would be 1 GB of float32 at once), and each row's max is taken over its
        own tokens.
        """
        keep = mask.bool()
        if torch.compiler.is_exporting():  # a graph keeps batch and length symbolic: no chunks
            return torch.log1p(torch.relu(self.logits(hidden).masked_fill(~keep.unsqueeze(-1),
                                                                          float("-inf"))
                                          .max(1).values))
        lengths = keep.sum(1).tolist()
        budget = max(1, max_elements // self.embedding_weight.shape[0])  # tokens a chunk
        out: list[torch.Tensor] = []
        start = 0
        while start < len(lengths):
            end, tokens = start + 1, lengths[start]
            while end < len(lengths) and tokens + lengths[end] <= budget:
                tokens += lengths[end]
                end += 1
            logits = self.logits(hidden[start:end][keep[start:end]])  # [real tokens, V]
            out += [row.max(0).values if len(row) else
                    logits.new_full(logits.shape[1:], float("-inf"))
                    for row in logits.split(lengths[start:end])]
            start = end
        return torch.log1p(torch.relu(torch.stack(out)))

    def load_pretrained(self, name_or_path: str | os.PathLike) -> bool:
        """Copy the checkpoint's MLM head (BERT ``cls.predictions``) if it has one.

        Returns whether it was found; otherwise the transform stays randomly initialised.
        """
        if self.transform is None:
            return False

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # a checkpoint without MLM head is expected, not a problem
        try:
            mlm, info = AutoModelForMaskedLM.from_pretrained(resolve_backbone(name_or_path),
                                                             output_loading_info=True,
                                                             trust_remote_code=False)
        except (OSError, ValueError):  # e.g. an architecture with no masked-LM class
            return False
        finally:
            hf_logging.set_verbosity(verbosity)
        predictions = getattr(getattr(mlm, "cls", None), "predictions", None)
        needed = {"cls.predictions.bias"} | {f"cls.predictions.transform.{k}"
                                             for k in self.transform.state_dict()}
        if predictions is None or needed & set(info["missing_keys"]):
            return False
        self.transform.load_state_dict(predictions.transform.state_dict())
        with torch.no_grad():
            self.bias.copy_(predictions.bias)
        return True


def keep_top_k(weights: torch.Tensor, k: int) -> torch.Tensor:
    """Zero all but the ``k`` largest entries of each row of [B, V] (0 = keep everything); the
    gradient reaches the kept entries only, so a model trained through it learns to rank with
    the terms its index will hold."""
    if k <= 0 or k >= weights.shape[-1]:
        return weights
    top = weights.topk(k, dim=-1)
    return torch.zeros_like(weights).scatter(-1, top.indices, top.values)


def splade_head(backbone: nn.Module, name_or_path: str | os.PathLike | None = None, *,
                transform: bool = True) -> tuple[SpladeHead, bool]:
    """Head tied to ``backbone``'s word embeddings, with ``name_or_path``'s MLM weights if any.

    Returns (head, whether pretrained MLM-head weights were found).
    """
    head = SpladeHead(backbone.config, backbone.get_input_embeddings(), transform=transform)
    found = head.load_pretrained(name_or_path) if name_or_path is not None else False
    if transform and name_or_path is not None and not found:
        # A random transform with a zero bias gives logits ~ N(0, 1): the max over a passage's
        # tokens is positive for nearly every vocabulary entry (~30,500 of 30,522 terms measured
        # on MiniLM), scores ~3e4, and training stalled. Starting the bias at -3 makes the initial
        # vectors sparse (~2,500 terms) and the ranking loss trainable.
        with torch.no_grad():
            head.bias.fill_(UNTRAINED_BIAS)
        log.warning("%s has no MLM head: the SPLADE head's transform starts random (decoder "
                    "tied to the word embeddings, bias %.1f)", name_or_path, UNTRAINED_BIAS)
    return head.to(head.embedding_weight.device), found


class ProjectionHead(nn.Module):
    """ColBERT's linear map of every token vector to ``dim`` (no bias), L2-normalised if asked."""

    def __init__(self, hidden_size: int, dim: int = 128, normalize: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, dim, bias=False)
        self.normalize = normalize

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, L, H] -> [B, L, dim]."""
        out = self.linear(hidden)
        return F.normalize(out, dim=-1) if self.normalize else out


def maxsim(q: torch.Tensor, q_mask: torch.Tensor, p: torch.Tensor, p_mask: torch.Tensor,
           max_elements: int = 2 ** 25) -> torch.Tensor:
    """Late interaction: sum over real query tokens of the max dot product over real passage tokens.

    q [Bq, Lq, D], p [Bp, Lp, D] -> [Bq, Bp]. The [Bq, chunk, Lq, Lp] similarity tensor is built
    for chunks of passages holding at most ``max_elements`` entries, bounding memory.
    """
    q_keep, p_keep = q_mask.bool(), p_mask.bool()
    chunk = max(1, max_elements // max(1, q.shape[0] * q.shape[1] * p.shape[1]))
    out = []
    for start in range(0, p.shape[0], chunk):
        sim = torch.einsum("aid,bjd->abij", q, p[start:start + chunk])
        sim = sim.masked_fill(~p_keep[None, start:start + chunk, None, :], float("-inf"))
        best = sim.max(-1).values.masked_fill(~q_keep[:, None, :], 0.0)
        out.append(best.sum(-1))
    return torch.cat(out, dim=1)


def flops(weights: torch.Tensor) -> torch.Tensor:
    """SPLADE's FLOPS regulariser, sum_j (mean_i w_ij)^2: favours sparse, balanced postings."""
    return weights.mean(0).pow(2).sum()
