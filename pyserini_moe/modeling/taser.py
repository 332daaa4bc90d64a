"""TASER: task-aware specialisation for dense retrieval (Cheng et al., taser.txt).

One encoder for questions and passages. Shared Transformer blocks are interleaved with
specialised ones: after every T shared blocks, starting with shared ones at the bottom, comes a
block whose self-attention is shared and whose FFN sub-layer is replaced by I expert FFNs, each
initialised from the pretrained FFN (section 3, figure 1). With T = 2 that is layers 3, 6, 9, 12
of BERT-base and 3, 6 of a 6-layer MiniLM. A router picks one expert per input: Det-R (questions
-> expert 0, passages -> expert 1; the paper's default), Seq-R / Tok-R (learned, eq. 3, trained
with an entropic regulariser, eq. 4-5, see :func:`~pyserini_moe.modeling.experts.balance_loss`)
or none (TASER-shared, I = 1; ``mean``: every expert on every input, averaged, the capacity
control of the paper-protocol comparison). Score: dot product of pooled vectors (eq. 1), trained
with the contrastive NLL of eq. 2 (the trainer's default loss).

The regulariser of the learned routers comes in two forms (argument ``entropy``, see
:meth:`TaserEncoder.regularization`): ``batch`` (ours, the default) on the batch-averaged routing
distribution, and ``per_input``, the form of the authors' released code (microsoft/taser,
``src/taser/models/moe_models.py``, ``ExpertGating``), on each input's own distribution.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.base import Encoded, Side, SingleBackboneModel
from pyserini_moe.modeling.experts import (
    ROUTERS,
    balance_loss,
    insert_experts,
    routing_probs,
    set_route,
    transformer_layers,
)
from pyserini_moe.modeling.pooling import POOLINGS, pool
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import MAX_EXPERTS, check, non_negative, one_of, positive, size_up_to

ENTROPY_WEIGHT = 0.01  # beta of eq. 5, fixed in the paper
ENTROPY_FORMS = ("batch", "per_input")  # where eq. 4's entropy is taken; see regularization()


@dataclasses.dataclass(frozen=True)
class TaserArgs(ModelArgs):
    """``router`` and ``num_experts`` (I; None: what the router needs, 1 for ``shared``, else 2),
    a specialised block after every ``every`` shared ones (T), the pooled vector's ``pooling`` and
    ``normalize``; ``entropy_weight`` (beta of eq. 5), ``gumbel_tau`` and ``entropy`` train the
    learned routers."""

    router: str = dataclasses.field(default="det", metadata=check(one_of(ROUTERS)))
    num_experts: int | None = dataclasses.field(default=None,
                                             metadata=check(size_up_to(MAX_EXPERTS)))
    every: int = dataclasses.field(default=2, metadata=check(non_negative))
    pooling: str = dataclasses.field(default="cls", metadata=check(one_of(POOLINGS)))
    normalize: bool = False
    entropy_weight: float = dataclasses.field(default=ENTROPY_WEIGHT, metadata=check(non_negative))
    gumbel_tau: float = dataclasses.field(default=1.0, metadata=check(positive))
    entropy: str = dataclasses.field(default="batch", metadata=check(one_of(ENTROPY_FORMS)))

    def check(self) -> None:
        if self.num_experts is None:
            self.resolve("num_experts", 1 if self.router == "shared" else 2)


def specialised_layers(num_layers: int, every: int) -> list[int]:
    """0-based indices of the specialised blocks: one after every ``every`` shared blocks."""
    if every < 0:
        raise UserError(f"every must be >= 0, got {every}")
    layers = [i for i in range(num_layers) if (i + 1) % (every + 1) == 0]
    if not layers:
        raise UserError(f"every={every} leaves no specialised block in {num_layers} layers")
    return layers


@register
class TaserEncoder(SingleBackboneModel):
    """TASER over any BERT-style backbone.

    ``router``: det | seq | tok | shared | mean; ``num_experts`` (I) defaults to what the router
    needs (2, or 1 for shared); ``every`` (T) shared blocks precede each specialised one. [CLS]
    pooling and an unnormalised dot product by default, as in the paper (BERT-base); recipes starting
    from a sentence-transformer use its own pooling (mean, L2-normalised). ``entropy_weight``
    (beta of eq. 5) and ``entropy`` (batch | per_input) set the learned routers' regulariser.
    """

    model_type = "taser"
    paper = ("Task-Aware Specialization for Efficient and Robust Dense Retrieval for Open-Domain "
             "Question Answering")
    representations = ("dense",)

    Args = TaserArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any, **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        self.backbone = backbone
        layers = specialised_layers(len(transformer_layers(backbone)), a.every)
        # A tuple, not a ModuleList: the blocks already live inside the backbone, and registering
        # them twice would save every expert twice.
        self.expert_layers = tuple(insert_experts(backbone, layers, a.num_experts, a.router,
                                                  a.gumbel_tau))
        self.specialised = layers
        self.pooling = a.pooling
        self.normalize = a.normalize
        self.entropy_weight = a.entropy_weight
        self.entropy = a.entropy

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        set_route(self.expert_layers, side, attention_mask)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        vec = pool(hidden, attention_mask, self.pooling)
        return Encoded(dense=F.normalize(vec, dim=-1) if self.normalize else vec,
                       routing=routing_probs(self.expert_layers))

    def regularization(self, q: Encoded, p: Encoded) -> torch.Tensor | None:
        """beta * R, the entropic routing regulariser of eq. 4-5 (L_joint = L_sim + beta * L_ent,
        beta = ``entropy_weight``) over both sides of the batch; None for the routers that learn
        nothing (Det-R, shared). With P_n = Softmax(A h_n + c) the router's distribution over the
        I experts for routed unit n (a sequence for Seq-R, a real token for Tok-R) of side s
        (questions, passages), H(P) = -sum_i P(i) log P(i) (eq. 4), and each form averaged over
        the specialised blocks:

        * ``entropy: batch`` (default; :func:`~pyserini_moe.modeling.experts.balance_loss`):
          R = log I - H(P-bar), P-bar = 1/2 sum_s (1/N_s) sum_n P_n: eq. 4 on the batch-averaged
          distribution, maximised (0 when the experts are used equally, log I on collapse).
        * ``entropy: per_input`` (the authors' released code): R = 1/2 sum_s (1/N_s) sum_n
          sum_i P_n(i) log P_n(i) = -mean_n H(P_n): eq. 4 per input, averaged over the inputs of
          each side, then over the two sides. The released code adds beta * sum_i P log P (the
          negative of eq. 4's L_ent), so it too maximises the entropy, of each input's own
          distribution (-log I when every input is undecided, 0 when every one is certain).
        """
        if q.routing is None or p.routing is None or self.entropy_weight == 0:
            return None
        if self.entropy == "per_input":
            return self.entropy_weight * per_input_entropy_loss(q.routing, p.routing)
        return self.entropy_weight * balance_loss(q.routing, p.routing)

    @torch.inference_mode()
    def route(self, texts: list[str], side: Side, max_length: int = 256) -> list[torch.Tensor]:
        """Expert chosen in each specialised block: one [B] (Det-R, Seq-R, shared) or [B, L]
        (Tok-R, padding = -1) tensor per block, for routing analyses."""
        if self.args["router"] == "mean":
            raise UserError("the mean router routes nothing: every input goes through every "
                            "expert")
        batch = self.tokenize(texts, side, max_length)
        self(**batch, side=side)
        mask = batch["attention_mask"].bool()
        out = []
        for block in self.expert_layers:
            choice = block.choice
            if choice.dim() == 2 and block.router != "tok":
                choice = choice[:, 0]
            out.append(choice.masked_fill(~mask, -1) if choice.dim() == 2 else choice)
        return out


def per_input_entropy_loss(*sides: list[torch.Tensor]) -> torch.Tensor:
    """The released code's regulariser: mean over sides and specialised blocks of
    (1/N) sum_n sum_i P_n(i) log P_n(i), i.e. minus the mean per-input entropy (eq. 4 per input).

    ``sides``: per side, a list (one entry per expert layer) of [units, I] probabilities. Unlike
    the released code, Tok-R's padding tokens are left out (the model keeps only real tokens).
    """
    layers = [torch.stack([(probs[i] * probs[i].clamp_min(1e-9).log()).sum(-1).mean()
                           for probs in sides]).mean()
              for i in range(len(sides[0]))]
    return torch.stack(layers).mean()
