"""Expert feed-forward sub-layers inside Transformer blocks, and the routers that pick one.

TASER (specialised blocks) and CoT-MoTE (every block) keep a block's self-attention shared and
replace its FFN sub-layer by I expert FFNs, each a copy of the pretrained FFN. This module does
that surgery on BERT-style layers (``layer.intermediate`` + ``layer.output``) and holds the routers:

* ``det``: deterministic by input type, questions -> expert 0, passages -> expert 1 (TASER Det-R;
  CoT-MoTE's Q-FFN / P-FFN);
* ``seq`` / ``tok``: a learned routing function GumbelSoftmax(A u + c) (TASER eq. 3) over the FFN
  input at [CLS] (one choice per sequence) or at every token; straight-through one-hot while
  training, argmax at inference;
* ``shared``: one expert, a no-op router (TASER-shared);
* ``mean``: no routing at all: every input goes through every expert and the outputs are
  averaged. The capacity control of the paper-protocol comparisons: the experts' parameters
  without the routing (two FFN copies with their own dropout and their own updates).

How it plugs into a HF layer: ``layer.intermediate`` becomes the identity, so the layer calls
``layer.output(h, h)`` with ``h`` the attention output, and :class:`ExpertFeedForward` (the new
``layer.output``) computes ``expert(h) = output_e(intermediate_e(h), h)`` for the routed expert.
The pretrained FFN weights therefore keep their exact computation (dense, GELU, dense, dropout,
residual, LayerNorm).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.base import Side

ROUTERS = ("det", "seq", "tok", "shared", "mean")
LEARNED_ROUTERS = ("seq", "tok")


class _Expert(nn.Module):
    """One FFN sub-layer: a copy of the pretrained ``intermediate`` and ``output`` modules."""

    def __init__(self, intermediate: nn.Module, output: nn.Module) -> None:
        super().__init__()
        self.intermediate = intermediate
        self.output = output

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(hidden), hidden)


class ExpertFeedForward(nn.Module):
    """I expert FFNs and a router; replaces ``layer.output`` of a BERT-style layer.

    The model sets :attr:`side` and :attr:`mask` before each forward (the router of Det-R needs
    the input type; the learned routers' statistics ignore padding). After a forward,
    :attr:`probs` holds the learned router's softmax over experts for each routed unit
    (sequences for ``seq``, real tokens for ``tok``; None for ``det``/``shared``) and
    :attr:`choice` the expert each unit went to.
    """

    def __init__(self, intermediate: nn.Module, output: nn.Module, num_experts: int,
                 router: str, hidden_size: int, gumbel_tau: float = 1.0) -> None:
        super().__init__()
        if router not in ROUTERS:
            raise UserError(f"unknown router {router!r}; choose from {ROUTERS}")
        expected = {"det": 2, "shared": 1}.get(router)
        if expected is not None and num_experts != expected:
            raise UserError(f"the {router} router needs {expected} expert(s), got {num_experts}")
        if router in (*LEARNED_ROUTERS, "mean") and num_experts < 2:
            raise UserError(f"the {router} router needs >= 2 experts, got {num_experts}")
        self.router = router
        self.gumbel_tau = gumbel_tau
        self.experts = nn.ModuleList(_Expert(copy.deepcopy(intermediate), copy.deepcopy(output))
                                     for _ in range(num_experts))
        # A (d x I) and c (I) of eq. 3; only learned routers have them.
        self.route = nn.Linear(hidden_size, num_experts) if router in LEARNED_ROUTERS else None
        self.side: Side | None = None
        self.mask: torch.Tensor | None = None
        self.probs: torch.Tensor | None = None
        self.choice: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        # ``hidden`` is ``input_tensor`` (layer.intermediate is the identity): the FFN input.
        if self.router == "mean":
            self.probs = self.choice = None
            return torch.stack([expert(hidden) for expert in self.experts]).mean(0)
        if self.route is None:
            index = 0 if self.router == "shared" else self._side_index()
            self.probs = None
            self.choice = torch.full(hidden.shape[:-1], index, device=hidden.device)
            return self.experts[index](hidden)
        return self._learned(hidden)

    def _side_index(self) -> int:
        if self.side is None:
            raise RuntimeError("Det-R routing needs the input side: encode through the model, "
                               "which sets it")
        return 0 if self.side == Side.QUERY else 1

    def _learned(self, hidden: torch.Tensor) -> torch.Tensor:
        """Route each unit (sequence or token) to one expert, weighted by a one-hot gate whose
        value is 1 in the forward pass and carries the Gumbel-softmax gradient in the backward
        pass (the discrete reparameterisation trick the paper trains the router with)."""
        units = hidden[:, :1] if self.router == "seq" else hidden  # [B, 1 or L, H]
        logits = self.route(units)
        if self.training:
            gates = F.gumbel_softmax(logits, tau=self.gumbel_tau, hard=True)
        else:
            gates = F.one_hot(logits.argmax(-1), logits.shape[-1]).to(hidden.dtype)
        if torch.compiler.is_exporting():
            # A graph (ONNX) cannot hold the data-dependent row selection below: every expert
            # runs on every unit and the one-hot gate keeps the chosen one (same values).
            gates = gates.expand(*hidden.shape[:-1], -1)
            return sum(gates[..., e:e + 1] * expert(hidden) for e, expert in enumerate(self.experts))
        probs = logits.softmax(-1)
        keep = self._unit_mask(units)
        self.probs = probs[keep]
        gates = gates.expand(*hidden.shape[:-1], -1)  # a sequence's choice holds for its tokens
        choice = gates.argmax(-1)
        self.choice = choice[:, 0] if self.router == "seq" else choice
        flat, gate, chosen = hidden.reshape(-1, hidden.shape[-1]), gates.reshape(-1, gates.shape[-1]), \
            choice.reshape(-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows = torch.nonzero(chosen == e).flatten()
            if rows.numel():
                out = out.index_copy(0, rows, expert(flat[rows]) * gate[rows, e:e + 1])
        return out.view_as(hidden)

    def _unit_mask(self, units: torch.Tensor) -> torch.Tensor:
        """Which routed units are real: every sequence; for tokens, the non-padding ones."""
        if self.router == "seq" or self.mask is None:
            return torch.ones(units.shape[:-1], dtype=torch.bool, device=units.device)
        return self.mask.bool()


def transformer_layers(backbone: nn.Module) -> nn.ModuleList:
    """The stack of Transformer blocks of a BERT-style encoder (BERT, RoBERTa, ELECTRA, MiniLM)."""
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or not all(
            hasattr(layer, "intermediate") and hasattr(layer, "output") for layer in layers):
        raise UserError(f"{type(backbone).__name__} is not a BERT-style encoder (no "
                        "encoder.layer[i].intermediate/.output): expert FFNs cannot be inserted")
    return layers


def insert_experts(backbone: nn.Module, layer_indices: list[int], num_experts: int, router: str,
                   gumbel_tau: float = 1.0) -> list[ExpertFeedForward]:
    """Replace the FFN of each listed layer by ``num_experts`` copies of it (in place).

    Every expert starts as the pretrained FFN (TASER section 3, CoT-MoTE eq. 7-9); returns the
    new modules in layer order.
    """
    layers = transformer_layers(backbone)
    moe = []
    for i in layer_indices:
        if not 0 <= i < len(layers):
            raise UserError(f"layer {i} does not exist: the backbone has {len(layers)} layers")
        layer = layers[i]
        block = ExpertFeedForward(layer.intermediate, layer.output, num_experts, router,
                                  backbone.config.hidden_size, gumbel_tau)
        layer.intermediate = nn.Identity()
        layer.output = block
        moe.append(block)
    return moe


def set_route(blocks: Sequence[ExpertFeedForward], side: Side, mask: torch.Tensor) -> None:
    """Tell every expert block what the next forward encodes."""
    for block in blocks:
        block.side, block.mask = side, mask


def balance_loss(*sides: list[torch.Tensor]) -> torch.Tensor:
    """Entropic routing regulariser: log I - H(mean routing distribution), averaged over layers.

    TASER eq. 4 writes L_ent = -sum_i P(i) log P(i) with P the router's softmax. Taken per input
    and minimised, it only makes each decision confident: a router that sends every input to
    expert 0 with certainty scores a perfect 0, so it cannot do what the paper says it is for
    ("to avoid routing all inputs to the same expert"). We therefore apply the entropy to P-bar,
    the routing distribution averaged over the batch, and MAXIMISE it (adding log I - H(P-bar),
    which is >= 0 and 0 exactly when the experts are used equally). P-bar is the mean of each
    side's own average (queries, passages), so sending all questions to one expert and all
    passages to the other - the Det-R solution the learned routers should be free to find - costs
    nothing, while collapse onto one expert costs the most (log I).

    ``sides``: per side, a list (one entry per expert layer) of [units, I] probabilities.
    """
    layers = [torch.stack([probs[i].mean(0) for probs in sides]).mean(0)
              for i in range(len(sides[0]))]
    losses = [math.log(p_bar.numel()) + (p_bar * p_bar.clamp_min(1e-9).log()).sum()
              for p_bar in layers]
    return torch.stack(losses).mean()


def routing_probs(blocks: Sequence[ExpertFeedForward]) -> list[torch.Tensor] | None:
    """The learned routers' probabilities of the last forward, one [units, I] per block."""
    probs: list[Any] = [block.probs for block in blocks]
    return None if not probs or any(p is None for p in probs) else probs
