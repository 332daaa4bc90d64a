"""SB-MoE (Sokli et al., "Mixture of Experts Approaches in Dense Retrieval Tasks"): one MoE block
of adapter experts after the last layer of a shared (Siamese) bi-encoder.

pooled x [B, h] -> n experts f_i(x) = x + a_i(x), a_i = Linear(h, h/2) -> ReLU -> Linear(h/2, h)
(Houlsby adapters with their skip connection, section IV-B) -> a gate chooses / weighs them:

* TOP-1 (eq. 1-2): y = f_m(x), m = argmax_i g_i(x);
* ALL (eq. 3): y = sum_i g_i(x) f_i(x) with g = softmax of the gate's logits.

Because the weights sum to 1 in both, y = x + sum_i w_i a_i(x): the model applies the weights to
the adapters' residual branches and adds x once. That form matters for training (see
:meth:`SbMoeEncoder.mixture_weights`): the gate's value must survive the final L2 normalisation.

``mixture="published"`` is instead the form of the authors' public code, which produced the paper's
tables: y = normalize(sum_i g_i E_i(x)) + x with plain experts E_i (no skip connection, PyTorch's
default initialisation), x L2-normalised first when the model normalises, a noise projection that
never trains, and g the (noisy, in training) softmax masked to its top-1 entry, or the whole
softmax for ALL. The unit-length mixture cancels g's value, so its gate learns next to nothing;
it is kept so that a reproduction of the paper can run the model the paper ran.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.base import Encoded, Side, SingleBackboneModel
from pyserini_moe.modeling.pooling import POOLINGS, pool
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import (
    MAX_EXPERTS,
    MAX_WIDTH,
    check,
    fail,
    non_negative,
    one_of,
    size_up_to,
)

INFERENCE_MODES = ("top1", "all")
GATES = ("learned", "random", "none")
MIXTURES = ("residual", "published")
# Floor of the noise's standard deviation, as in Shazeer et al.'s reference implementation: keeps
# the load estimator's division (and exploration) alive when softplus(W_noise x) goes to 0.
NOISE_EPS = 1e-2
ADAPTER_INIT_STD = 1e-2  # Houlsby et al.'s near-identity initialisation


@dataclasses.dataclass(frozen=True)
class SbMoeArgs(ModelArgs):
    """``n_experts`` adapters of bottleneck ``expert_width`` (None: h/2, the paper's) after the
    ``pooling`` of a Siamese backbone, chosen by the ``gate`` (learned, random, or none: one
    adapter always applied), balanced in training by ``balance_weight``; ``inference`` (TOP-1 or
    ALL, the one encode-time option) and ``mixture`` as in :class:`SbMoeEncoder`."""

    n_experts: int = dataclasses.field(default=6, metadata=check(size_up_to(MAX_EXPERTS)))
    pooling: str = dataclasses.field(default="mean", metadata=check(one_of(POOLINGS)))
    normalize: bool = True
    inference: str = dataclasses.field(default="top1", metadata=check(one_of(INFERENCE_MODES)))
    gate: str = dataclasses.field(default="learned", metadata=check(one_of(GATES)))
    balance_weight: float = dataclasses.field(default=0.01, metadata=check(non_negative))
    mixture: str = dataclasses.field(default="residual", metadata=check(one_of(MIXTURES)))
    expert_width: int | None = dataclasses.field(default=None,
                                              metadata=check(size_up_to(MAX_WIDTH)))

    def check(self) -> None:
        if (self.n_experts == 1) != (self.gate == "none"):
            fail("", "n_experts", f"must be >= 2 (one expert leaves nothing to route) or 1 with "
                                  f"gate 'none' (one adapter: the capacity control), got "
                                  f"{self.n_experts} with gate {self.gate!r}")


class Adapter(nn.Module):
    """The residual branch a(x) of one expert, Linear(h, h/2) -> ReLU -> Linear(h/2, h).

    Near-identity start (Houlsby et al., whose adapter the paper uses): f(x) = x + a(x) ~ x, so an
    untrained SB-MoE encodes like its backbone instead of distorting a good embedding space.
    """

    def __init__(self, hidden: int, near_identity: bool = True, width: int | None = None) -> None:
        super().__init__()
        width = width or hidden // 2
        self.down = nn.Linear(hidden, width)
        self.up = nn.Linear(width, hidden)
        for layer in (self.down, self.up) if near_identity else ():  # else PyTorch's default
            nn.init.trunc_normal_(layer.weight, std=ADAPTER_INIT_STD, a=-2 * ADAPTER_INIT_STD,
                                  b=2 * ADAPTER_INIT_STD)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(F.relu(self.down(x)))


class NoisyGate(nn.Module):
    """Gating net Linear(h, h/2) -> ReLU -> Linear(h/2, n) plus Shazeer et al.'s trained noise
    projection W_noise (Linear(h, n)); noisy logits = net(x) + N(0, 1) * softplus(W_noise x).

    W_noise starts at zero (as Shazeer et al.): every expert gets the same noise, std
    softplus(0) ~ 0.69, until the losses shape it. ``published``: as the authors' public code,
    W_noise keeps PyTorch's random initialisation and never trains (it was not given to the
    optimiser there), and the noise std has no floor.
    """

    def __init__(self, hidden: int, n_experts: int, published: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.ReLU(),
                                 nn.Linear(hidden // 2, n_experts))
        self.noise = nn.Linear(hidden, n_experts)
        self.noise_eps = 0.0 if published else NOISE_EPS
        if published:
            self.noise.requires_grad_(False)
        else:
            nn.init.zeros_(self.noise.weight)
            nn.init.zeros_(self.noise.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Clean logits [B, n] (inference)."""
        return self.net(x)

    def noisy(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(clean logits, noisy logits, noise std), each [B, n] (training)."""
        clean = self.net(x)
        std = F.softplus(self.noise(x)) + self.noise_eps
        return clean, clean + torch.randn_like(clean) * std, std


@dataclasses.dataclass
class Gating:
    """What the gate decided for a batch: ``weights`` [B, n] multiply the experts' residual
    branches (y = x + sum_i w_i a_i(x)); ``probs`` [B, n] are the gate's probabilities."""

    weights: torch.Tensor
    probs: torch.Tensor
    aux_loss: torch.Tensor | None = None


@dataclasses.dataclass
class Routing:
    """Per text: the expert the gate ranks first (``expert`` [B], what the paper's table III counts
    as "activated") and the gate's probabilities over all experts (``probs`` [B, n])."""

    expert: torch.Tensor
    probs: torch.Tensor


def _cv_squared(values: torch.Tensor) -> torch.Tensor:
    """Squared coefficient of variation over experts: 0 when perfectly balanced."""
    return values.var(unbiased=False) / (values.mean() ** 2 + 1e-10)


def _seeded_random_weights(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           n_experts: int) -> torch.Tensor:
    """U(0, 1) weights per text, drawn from a generator seeded by the text's token ids [B, n]."""
    rows = []
    for ids, mask in zip(input_ids.cpu(), attention_mask.cpu()):
        tokens = ids[mask.bool()].numpy().astype(np.int64).tobytes()
        seed = int.from_bytes(hashlib.blake2b(tokens, digest_size=8).digest(), "little") >> 1
        rows.append(torch.rand(n_experts, generator=torch.Generator().manual_seed(seed)))
    return torch.stack(rows).to(input_ids.device)


@register
class SbMoeEncoder(SingleBackboneModel):
    """SB-MoE: a Siamese bi-encoder whose pooled vector is refined by a single MoE block.

    Training routes every text with noisy top-1 gating (Shazeer et al. 2017); inference uses
    ``inference`` = "top1" (eq. 1-2) or "all" (eq. 3). It is a saved argument, so an index records
    it through the model's args and fingerprint; :meth:`with_inference` switches it.

    ``gate="random"`` is the paper's random-gate baseline (section IV-A: "random weights are
    assigned to the experts instead of relying on the learned gating function"): no gate
    parameters; each text gets U(0, 1) weights over the experts, used like the learned gate's
    (training and "top1": the highest-weighted expert; "all": the weights normalised to sum to 1).
    In training they are drawn afresh at every forward pass (``torch.rand``, as the public code),
    so every expert sees every kind of text and none can specialise. Encoding (eval mode) must be
    deterministic, or no index is reproducible and a query would meet its passages through other
    experts than at indexing: there the weights come from a generator seeded by the text's token
    ids, still unrelated to content. (The public code draws afresh at encoding time too.)

    ``mixture`` is "residual" (ours, above) or "published" (the public code's form, see the
    module docstring): a reproduction of the paper's tables needs the latter.

    ``gate="none"`` with ``n_experts=1`` is the capacity control: one adapter, always applied, no
    routing; with ``expert_width`` = n x h/2 it adds the parameters of n experts (the gate's own
    excepted), so a gain of SB-MoE over it is the routing's, not the size's. ``expert_width``
    (default h/2, the paper's) is each adapter's bottleneck.

    ``balance_weight`` scales Shazeer et al.'s importance + load losses (``Encoded.aux_loss``,
    training only; 0 = the paper's plain noisy top-1). Top-1 routing trains only the chosen
    expert, which then wins the gate more often: without balancing, routing tends to collapse onto
    one expert and the MoE degenerates into a single adapter, while the paper's table III finds
    several experts activated per corpus.
    """

    model_type = "sbmoe"
    paper = "Mixture of Experts Approaches in Dense Retrieval Tasks"
    representations = ("dense",)
    encode_options = ("inference",)

    Args = SbMoeArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any, **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        n_experts, gate = a.n_experts, a.gate
        hidden = backbone.config.hidden_size
        self.backbone = backbone
        self.published = a.mixture == "published"
        self.experts = nn.ModuleList(Adapter(hidden, not self.published, a.expert_width)
                                     for _ in range(n_experts))
        self.gate = NoisyGate(hidden, n_experts, self.published) if gate == "learned" else None
        self.n_experts = n_experts
        self.pooling = a.pooling
        self.normalize = a.normalize
        self.inference = a.inference
        self.balance_weight = a.balance_weight

    def set_option(self, name: str, value: Any) -> None:
        """``inference`` is the one encode-time option: TOP-1 or ALL over the trained experts."""
        self.with_inference(value)

    def with_inference(self, mode: str) -> SbMoeEncoder:
        """Switch the inference mode in place (saved args included) and return the model, like
        ``nn.Module.eval``: ``load_model(path).with_inference("all")``."""
        self.inference = self.parse_args({**self.args, "inference": mode}).inference
        self.args["inference"] = mode
        return self

    # -- the MoE block -----------------------------------------------------------------------
    def gate_probs(self, x: torch.Tensor, input_ids: torch.Tensor,
                   attention_mask: torch.Tensor) -> torch.Tensor:
        """The gate's probabilities over experts [B, n] without noise: softmax of the learned
        logits (eq. 3's g), or the random gate's weights normalised to sum to 1 (fresh in
        training, seeded by the text when encoding)."""
        if self.gate is None:
            weights = (torch.rand(len(x), self.n_experts, device=x.device) if self.training else
                       _seeded_random_weights(input_ids, attention_mask, self.n_experts))
            weights = weights.to(x.dtype)
            return weights / weights.sum(-1, keepdim=True)
        return self.gate(x).softmax(-1)

    def mixture_weights(self, x: torch.Tensor, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor) -> Gating:
        """The weights of the experts' residual branches for pooled vectors ``x`` [B, h].

        Training with the learned gate, noisy top-1: m = argmax of the noisy logits,
        p = softmax(noisy logits), and expert m gets the straight-through weight p_m / sg(p_m)
        (sg = stop-gradient): its value is 1, so the forward pass is exactly eq. 2's
        y = f_m(x) = x + a_m(x), the same function top-1 inference computes; its gradient is
        dL/dp_m = <dL/dy, a_m(x)> / p_m, so the gate (and W_noise, through the noisy logits)
        learns from the ranking loss to raise p_m when expert m's correction helps and lower it
        when it hurts. The public code instead L2-normalised p_m * a_m(x), which cancels p_m: the
        gate got no gradient. Scaling the whole f_m(x) would fail the same way under our final
        L2 normalisation; scaling only the residual branch changes y's direction, so it cannot.

        Otherwise: one-hot of the gate's argmax (training with the random gate, "top1"), or the
        gate's probabilities ("all", eq. 3).

        The published mixture keeps the public code's weights instead (see
        :meth:`_published_weights`).
        """
        if self.published:
            return self._published_weights(x, input_ids, attention_mask)
        if self.training and self.gate is not None:
            clean, noisy, std = self.gate.noisy(x)
            probs = noisy.softmax(-1)
            chosen = F.one_hot(noisy.argmax(-1), self.n_experts).to(x.dtype)
            weights = chosen * probs / probs.detach()
            aux = self._balance_loss(clean, noisy, std, probs, chosen)
            return Gating(weights, probs, aux)
        probs = self.gate_probs(x, input_ids, attention_mask)
        if self.training or self.inference == "top1":
            return Gating(F.one_hot(probs.argmax(-1), self.n_experts).to(x.dtype), probs)
        return Gating(probs, probs)

    def _published_weights(self, x: torch.Tensor, input_ids: torch.Tensor,
                           attention_mask: torch.Tensor) -> Gating:
        """The public code's gate: softmax of the (noisy, in training) logits masked to its top-1
        entry, which keeps its value p_m; ALL at inference: the whole softmax. Its random gate
        masks the U(0, 1) draw to its top-1 entry in every mode. No balancing loss (the code has
        none)."""
        if self.gate is None:
            weights = self.gate_probs(x, input_ids, attention_mask)
            return Gating(weights * F.one_hot(weights.argmax(-1), self.n_experts), weights)
        probs = (self.gate.noisy(x)[1] if self.training else self.gate(x)).softmax(-1)
        if self.training or self.inference == "top1":
            return Gating(probs * F.one_hot(probs.argmax(-1), self.n_experts), probs)
        return Gating(probs, probs)

    def _balance_loss(self, clean: torch.Tensor, noisy: torch.Tensor, std: torch.Tensor,
                      probs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor | None:
        """Shazeer et al.'s balancing losses (their eq. 6-10) for k = 1, weighted by
        ``balance_weight``: CV^2 of each expert's importance (sum of its gate probabilities over
        the batch) + CV^2 of its load, the smooth estimate sum_x P(x, i) with
        P(x, i) = Phi((clean_i - max_{j != i} noisy_j) / std_i), the chance that expert i wins
        when only its own noise is redrawn (load is differentiable where the argmax is not)."""
        if self.balance_weight == 0:
            return None
        top2 = noisy.topk(2, dim=-1).values
        threshold = torch.where(chosen.bool(), top2[:, 1:], top2[:, :1])
        load = 0.5 * (1 + torch.erf((clean - threshold) / (std * math.sqrt(2)))).sum(0)
        return self.balance_weight * (_cv_squared(probs.sum(0)) + _cv_squared(load))

    # -- encoding ----------------------------------------------------------------------------
    def _pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """x as the experts and gate take it: the backbone's pooled vector, raw (ours), or of unit
        length when the published mixture normalises (its public code normalises it first)."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        x = pool(hidden, attention_mask, self.pooling)
        return F.normalize(x, dim=-1) if self.published and self.normalize else x

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        x = self._pooled(input_ids, attention_mask)
        gating = self.mixture_weights(x, input_ids, attention_mask)
        residuals = torch.stack([expert(x) for expert in self.experts], dim=1)  # [B, n, h]
        mixed = torch.einsum("bn,bnh->bh", gating.weights, residuals)
        if self.published:  # unit length whatever the gate's value (eps as the public code)
            mixed = F.normalize(mixed, dim=-1, eps=1e-6)
        y = x + mixed
        return Encoded(dense=F.normalize(y, dim=-1) if self.normalize else y,
                       aux_loss=gating.aux_loss)

    @torch.inference_mode()
    def route(self, texts: list[str], side: Side, max_length: int = 256) -> Routing:
        """Routing statistics of one batch of texts of one side, as inference sees them (no
        noise): the expert the gate ranks first per text and the gate's probabilities."""
        batch = self.tokenize(texts, side, max_length)
        probs = self.gate_probs(self._pooled(**batch), **batch)
        return Routing(expert=probs.argmax(-1), probs=probs)
