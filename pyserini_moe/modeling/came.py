"""CAME: competitively learned mixture of lexical, local and global experts (Cai et al., came.txt).

A Siamese encoder (queries and passages share every parameter, section 3.2). The bottom
``shared_layers`` Transformer layers of one backbone are shared by all experts (eq. 2); on top sit
three private stacks, each a copy of the remaining pretrained layers (section 3.2.2):

* lexical: MLM head -> max_i log(1 + ReLU(.)) over the vocabulary (SPLADE, eq. 3-4), dot product;
* local: a linear map of every token vector, [CLS] included, to ``dim``; MaxSim (ColBERT, eq. 5);
* global: the [CLS] vector, dot product (DPR, eq. 6); ``pooling="mean"`` averages the tokens
  instead, for backbones trained as mean-pooled sentence embedders (the packaged MiniLM).

Training is the two-stage competitive learning of section 3.3 through the trainer's hooks: a
standardized stage (the plain sum of the experts' contrastive losses, eq. 9) for the first
``standardized_ratio`` of the steps, then a specialized stage where each training instance weights
each expert's loss by how well that expert ranked the positive (eq. 10-11). Inference sums the
raw expert scores (eq. 12, the "Sum" fusion of table 4).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.base import Encoded, Side, SingleBackboneModel, check_device
from pyserini_moe.modeling.experts import transformer_layers
from pyserini_moe.modeling.folder import is_saved_model, load_model
from pyserini_moe.modeling.heads import ProjectionHead, SpladeHead, maxsim, splade_head
from pyserini_moe.modeling.pooling import POOLINGS, pool, pretrained_encoder
from pyserini_moe.modeling.registry import register
from pyserini_moe.representation import CAME_EXPERTS
from pyserini_moe.validate import (
    MAX_WIDTH,
    ConfigError,
    check,
    closed_fraction,
    fail,
    non_negative,
    one_of,
    positive,
    size_up_to,
)

EXPERTS = tuple(CAME_EXPERTS)  # lexical, local, global; each fills one Encoded field
STAGES = ("competitive", "standardized", "specialized")
STANDARDIZED, SPECIALIZED = "standardized", "specialized"
PRIVATE_LAYERS = 2  # the paper keeps 2 of BERT-base's 12 layers private to each expert
COMPETITION = ("tau", "standardized_ratio", "stages")  # how the experts train, not what they are


@dataclasses.dataclass(frozen=True)
class CameArgs(ModelArgs):
    """The architecture (``shared_layers``: None = all but the top ``PRIVATE_LAYERS``; ``experts``;
    ``dim`` of the local expert's token vectors; ``normalize_local``; the global expert's
    ``pooling``) and the competition (``tau`` of eq. 11, ``standardized_ratio``, ``stages``), which
    a saved model may change when it is trained further."""

    shared_layers: int | None = dataclasses.field(default=None, metadata=check(non_negative))
    experts: tuple[str, ...] = EXPERTS
    dim: int = dataclasses.field(default=128, metadata=check(size_up_to(MAX_WIDTH)))
    tau: float = dataclasses.field(default=0.5, metadata=check(positive))
    standardized_ratio: float = dataclasses.field(default=0.2, metadata=check(closed_fraction))
    stages: str = dataclasses.field(default="competitive", metadata=check(one_of(STAGES)))
    normalize_local: bool = True
    pooling: str = dataclasses.field(default="cls", metadata=check(one_of(POOLINGS)))

    def check(self) -> None:
        """Experts: a non-empty subset of lexical / local / global, kept in that order."""
        unknown = sorted(set(self.experts) - set(EXPERTS))
        if unknown:
            fail("", "experts", f"unknown expert(s) {unknown}; choose from {', '.join(EXPERTS)}")
        if len(set(self.experts)) != len(self.experts):
            fail("", "experts", f"an expert is listed twice in {list(self.experts)}")
        if not self.experts:
            fail("", "experts", f"at least one is needed; choose from {', '.join(EXPERTS)}")
        self.resolve("experts", tuple(e for e in EXPERTS if e in self.experts))

    def for_layers(self, num_layers: int) -> CameArgs:
        """These arguments over a backbone of ``num_layers`` layers: the default split filled
        in, a split the backbone cannot make refused."""
        if self.shared_layers is None:
            return dataclasses.replace(self, shared_layers=max(0, num_layers - PRIVATE_LAYERS))
        if self.shared_layers > num_layers:
            raise ConfigError(f"came model argument shared_layers: must be in [0, {num_layers}] "
                              f"(the backbone's layers), got {self.shared_layers}", "shared_layers")
        return self

    def architecture(self) -> dict[str, Any]:
        """What the weights depend on (a saved model trained further must match it)."""
        return {k: v for k, v in self.saved().items() if k not in COMPETITION}


def positive_rank(scores: torch.Tensor, positive_index: torch.Tensor) -> torch.Tensor:
    """Rank (1 = best) of each query's positive among {d+} ∪ D-, its OWN hard negatives.

    Eq. 11 ranks d+ within the training instance (q, d+, D-), the D- sampled for q (eq. 7-8), not
    among the in-batch passages that the loss also uses as negatives. ``scores`` [B, P] follow the
    collator's layout: B positives, then n = (P - B) / B negatives per query, query by query.
    Ties count against the positive: an expert that cannot separate d+ from a negative has not
    ranked it first. Without hard negatives every rank is 1 and the weights are uniform.
    """
    b, p = scores.shape
    if (p - b) % b:
        raise ValueError(f"{p} passages for {b} queries: expected B positives followed by the same "
                         "number of hard negatives for every query")
    rows = torch.arange(b, device=scores.device)
    positive = scores[rows, positive_index].unsqueeze(1)
    own_negatives = scores[:, b:].reshape(b, b, (p - b) // b)[rows, rows]  # [B, n]
    return 1 + (own_negatives >= positive).sum(1)


def competitive_weights(ranks: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 11: w_e = softmax over experts of (1 / rank_e(d+)) / tau; ranks [B, E] -> [B, E]."""
    return torch.softmax(ranks.reciprocal() / tau, dim=-1)


@register
class CameEncoder(SingleBackboneModel):
    """CAME over any BERT-style backbone (BERT, RoBERTa, ELECTRA, MiniLM).

    ``shared_layers`` defaults to all but the top two layers, as in the paper (10 of BERT-base's
    12): 4 of the 6-layer MiniLM, so each expert still owns 2 private layers. 0 gives every expert
    a full private copy (table 3's "w/o shared layers"). ``experts`` is any non-empty subset of
    lexical / local / global (table 3's "w/o" rows); an expert left out is not built and its
    ``Encoded`` field stays None. ``stages``: competitive (standardized, then specialized),
    standardized only or specialized only (table 2's "w/o specialized" / "w/o standardized").

    The backbone keeps its embeddings and only the shared layers (so each parameter is saved once);
    ``self.stacks[stack_key(expert)]`` holds the private layers. The lexical head's decoder is tied to the
    word embeddings, which all experts share.
    """

    model_type = "came"
    paper = "CAME: Competitively Learning a Mixture-of-Experts Model for First-stage Retrieval"
    representations = ("dense", "sparse", "multi")
    dense_alone = ("its dense vector is the global expert alone; CAME ranks by fusing the "
                   "lexical, local and global experts' runs (python -m pyserini_moe.search "
                   "--retriever fused, or pyserini_moe.open_searcher on its three indexes)")

    Args = CameArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any, lexical_head: SpladeHead | None = None,
                 **args: Any) -> None:
        layers = transformer_layers(backbone)
        a = self.parse_args(args).for_layers(len(layers))
        super().__init__(tokenizer, a)
        shared_layers, experts = a.shared_layers, a.experts
        self.pooling = a.pooling
        self.set_competition(a)
        self.backbone = backbone  # registered first: the tied word embeddings are named here
        self.stacks = nn.ModuleDict({stack_key(e): nn.ModuleList(copy.deepcopy(layer)
                                                                 for layer in layers[shared_layers:])
                                     for e in experts})
        backbone.encoder.layer = nn.ModuleList(layers[:shared_layers])
        heads: dict[str, nn.Module] = {}
        if "lexical" in experts:
            heads["lexical"] = lexical_head if lexical_head is not None else splade_head(backbone)[0]
        if "local" in experts:
            heads["local"] = ProjectionHead(backbone.config.hidden_size, a.dim, a.normalize_local)
        self.heads = nn.ModuleDict(heads)
        self.experts = experts
        # What this instance produces (the encode adapters check it); subsets produce fewer.
        self.representations = tuple(CAME_EXPERTS[e] for e in experts)
        self.pretrained_head = False  # set by from_backbone: did the checkpoint have an MLM head?
        # Mean eq. 11 weight of each expert over the last loss computed (1.0 each when standardized).
        self.last_weights: dict[str, float] = {}
        self.last_losses: dict[str, float] = {}  # each expert's mean loss, same moment

    @classmethod
    def from_backbone(cls, name: str | os.PathLike | None = None,
                      device: str | torch.device | None = None, **args: Any) -> CameEncoder:
        """Pretrained backbone (default: the packaged MiniLM), every stack a copy of its top
        layers, the checkpoint's MLM head for the lexical expert when it has one (else a random
        transform on the tied embeddings, as SPLADE), a random local projection; on ``device``
        (default: CUDA when present).

        ``name`` may also be a saved CAME model with the same architecture: the paper's second
        round trains the BM25-negative model further on hard negatives (section 3.3), typically
        with ``stages="specialized"``.
        """
        name = DEFAULT_BACKBONE if name is None else name
        a = cls.parse_args(args)
        if is_saved_model(name):
            model = load_model(name, check_device(device))
            if not isinstance(model, cls):
                raise UserError(f"{name} holds a {model.model_type} model, not a came one")
            wanted = a.for_layers(model.backbone.config.num_hidden_layers).architecture()
            differ = {k: f"{model.args[k]} != {v}" for k, v in wanted.items() if model.args[k] != v}
            if differ:
                raise UserError(f"{name} was saved with another architecture (saved != asked: "
                                f"{differ})")
            model.set_competition(a)
            return model
        backbone = pretrained_encoder(name)
        head, found = splade_head(backbone, name) if "lexical" in a.experts else (None, False)
        model = cls(backbone, load_tokenizer(name), lexical_head=head, **args)
        model.pretrained_head = found
        return model.to(check_device(device))

    # -- encoding --------------------------------------------------------------------------
    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      experts: tuple[str, ...] | list[str] | None = None) -> dict[str, torch.Tensor]:
        """Last token vectors [B, L, H] of each expert's stack (default: every active expert).

        The shared bottom runs once; this replays what ``BertModel.forward`` does (embeddings,
        the attention mask in the form the configured attention implementation wants, the layers).
        """

        hidden = self.backbone.embeddings(input_ids=input_ids)
        mask = create_bidirectional_mask(config=self.backbone.config, inputs_embeds=hidden,
                                         attention_mask=attention_mask)
        for layer in self.backbone.encoder.layer:
            hidden = layer(hidden, mask)
        out = {}
        for name in experts or self.experts:
            expert_hidden = hidden
            for layer in self.stacks[stack_key(name)]:
                expert_hidden = layer(expert_hidden, mask)
            out[name] = expert_hidden
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: Side,
                only: str | None = None) -> Encoded:
        """Every active expert's representation, or ``only`` one (sparse, multi or dense): an
        index needs one kind, and skipping the other stacks saves their cost."""
        experts = self.experts
        if only is not None:
            wanted = [e for e in self.experts if CAME_EXPERTS[e] == only]
            if not wanted:
                raise UserError(f"this CAME model produces {', '.join(self.representations)}, not '{only}'")
            experts = wanted
        hidden = self.hidden_states(input_ids, attention_mask, experts)
        out = Encoded()
        if "lexical" in hidden:
            out.sparse = self.heads["lexical"](hidden["lexical"], attention_mask)
        if "local" in hidden:
            out.multi, out.mask = self.heads["local"](hidden["local"]), attention_mask
        if "global" in hidden:
            out.dense = pool(hidden["global"], attention_mask, self.pooling)
        return out

    # -- scoring ---------------------------------------------------------------------------
    def expert_scores(self, q: Encoded, p: Encoded) -> dict[str, torch.Tensor]:
        """One [Bq, Bp] similarity matrix per active expert: lexical dot product (eq. 4), local
        MaxSim over real tokens, [CLS] included (eq. 5), global [CLS] (or pooled) dot product (eq. 6)."""
        scorers = {"lexical": lambda: q.sparse @ p.sparse.T,
                   "local": lambda: maxsim(q.multi, q.mask, p.multi, p.mask),
                   "global": lambda: q.dense @ p.dense.T}
        return {e: scorers[e]() for e in self.experts}

    def similarity(self, q: Encoded, p: Encoded) -> torch.Tensor:
        """Sum of the raw expert scores (eq. 12, the paper's "Sum" fusion)."""
        return torch.stack(list(self.expert_scores(q, p).values())).sum(0)

    # -- competitive learning (trainer hooks) ---------------------------------------------
    def set_competition(self, args: CameArgs) -> None:
        """Set (and record in ``self.args``) how the experts are trained: it does not change
        what the model computes, so a saved model can be trained further under another
        schedule."""
        self.args.update({k: getattr(args, k) for k in COMPETITION})
        self.tau = args.tau
        self.standardized_ratio = args.standardized_ratio
        self.stages = args.stages
        self.stage = SPECIALIZED if args.stages == SPECIALIZED else STANDARDIZED

    def on_train_step(self, step: int, total: int) -> None:
        """Standardized for the first ceil(standardized_ratio * total) steps, then specialized
        (section 4.4: 1 of 5 epochs on MS MARCO, 3 of 15 on NQ); the ablations keep one stage."""
        if self.stages == "competitive":
            switch = math.ceil(self.standardized_ratio * total)
            self.stage = STANDARDIZED if step < switch else SPECIALIZED

    def compute_loss(self, q: Encoded, p: Encoded, positive_index: torch.Tensor,
                     temperature: float) -> torch.Tensor:
        """Batch mean of sum_e w_e L_e, L_e the contrastive loss of expert e (eq. 7-8, in-batch +
        hard negatives, scores / ``temperature``); w_e = 1 in the standardized stage (eq. 9),
        the detached competitive weights of eq. 11 in the specialized stage (eq. 10). The
        validation loss (eval mode) uses whichever stage training has reached."""
        scores = self.expert_scores(q, p)
        losses = torch.stack([F.cross_entropy(s / temperature, positive_index,
                                              reduction="none") for s in scores.values()], dim=1)
        if self.stage == SPECIALIZED:
            with torch.no_grad():  # the weights reward an expert; they are not trained (eq. 11)
                ranks = torch.stack([positive_rank(s, positive_index) for s in scores.values()],
                                    dim=1)
                weights = competitive_weights(ranks.to(losses.dtype), self.tau)
        else:
            weights = torch.ones_like(losses)
        self.last_weights = dict(zip(scores, weights.mean(0).tolist()))
        self.last_losses = dict(zip(scores, losses.detach().mean(0).tolist()))
        return (weights * losses).sum(1).mean()

    def flops_multiplier(self) -> float:
        """What the trainer multiplies the FLOPS regulariser by: the lexical expert's batch-mean
        weight of the last ``compute_loss``. FLOPS belongs to the lexical expert's loss, and
        eq. 10 weights that whole loss by w_lex, so sparsity pressure follows the expert's share
        of the competition instead of jumping (from 1/3 of the ranking signal to all of it) at
        the stage switch. 1 in the standardized stage (eq. 9)."""
        return self.last_weights.get("lexical", 1.0)

    def loss_parts(self) -> dict[str, float]:
        """Each expert's mean loss and weight in the last ``compute_loss``, for the training log:
        the competition made visible."""
        return {**{f"loss_{e}": v for e, v in self.last_losses.items()},
                **{f"weight_{e}": v for e, v in self.last_weights.items()}}


def stack_key(expert: str) -> str:
    """The private stack's name in ``stacks``: ``global`` is a Python keyword, which graph
    tracers (torch.fx, hence ONNX export) cannot use as an attribute name."""
    return f"{expert}_layers"
