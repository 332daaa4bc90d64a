"""Cached-gradient passes (GradCache: Gao, Zhang, Han and Callan, 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup"): the loss of a whole batch, every
in-batch negative included, at the activation memory of one chunk of texts.

1. Each chunk of the batch's queries and passages is encoded without autograd (no activations
   kept), after saving the random-number state (dropout, a gate's noise).
2. The loss is computed on those representations made leaves, and back-propagated to them only.
3. Each chunk is encoded again with autograd under its saved random state, so it computes
   exactly what step 1 did, and its cached gradient is back-propagated through it.

The parameters' gradient equals the one-pass gradient up to float rounding; the encoder runs
forward twice (about a third more compute). A loss that is a function of the representations
alone is what makes this exact, and the trainer's is: every term (the model's
``compute_loss``, FLOPS, ``regularization``) reads only :class:`Encoded` fields.
One approximation: a per-pass ``aux_loss`` (a router's balance term) is averaged over the
chunks, weighted by their sizes, as gradient accumulation would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side

Inputs = dict[str, torch.Tensor]


def chunks(inputs: Inputs, size: int) -> list[Inputs]:
    """The rows of a tokenized batch in chunks of ``size``, each cut to its own longest text."""
    rows = inputs["attention_mask"].shape[0]
    out = []
    for start in range(0, rows, size):
        part = {key: value[start:start + size] for key, value in inputs.items()}
        length = int(part["attention_mask"].sum(1).max())
        out.append({key: value[:, :length] for key, value in part.items()})
    return out


def concat(parts: list[Encoded]) -> Encoded:
    """One :class:`Encoded` of the chunks' rows, in order: token vectors padded to the longest
    chunk (mask 0 there), routing probabilities stacked per layer, ``aux_loss`` the chunks' mean
    weighted by their rows. Differentiable: gradients reach every chunk's tensors."""
    first = parts[0]
    rows = [_rows(p) for p in parts]

    def cat(name: str) -> torch.Tensor | None:
        values = [getattr(p, name) for p in parts]
        return None if values[0] is None else torch.cat(values)

    multi = mask = None
    if first.multi is not None:
        length = max(p.multi.shape[1] for p in parts)
        multi = torch.cat([F.pad(p.multi, (0, 0, 0, length - p.multi.shape[1])) for p in parts])
        mask = torch.cat([F.pad(p.mask, (0, length - p.mask.shape[1])) for p in parts])
    aux = None
    if first.aux_loss is not None:
        aux = sum(p.aux_loss.reshape(()) * n for p, n in zip(parts, rows)) / sum(rows)
    routing = None
    if first.routing is not None:
        routing = [torch.cat(layer) for layer in zip(*(p.routing for p in parts))]
    return Encoded(dense=cat("dense"), sparse=cat("sparse"), multi=multi, mask=mask,
                   aux_loss=aux, routing=routing)


def _rows(encoded: Encoded) -> int:
    for value in (encoded.dense, encoded.sparse, encoded.multi):
        if value is not None:
            return value.shape[0]
    raise ValueError("an Encoded with no representation")


def _tensors(encoded: Encoded) -> list[torch.Tensor]:
    """The fields a gradient can flow through, in a fixed order (the mask carries none)."""
    fields = [encoded.dense, encoded.sparse, encoded.multi, encoded.aux_loss,
              *(encoded.routing or [])]
    return [t for t in fields if t is not None]


def _as_leaves(encoded: Encoded) -> Encoded:
    """A copy whose float tensors are detached leaves that collect their gradient."""
    def leaf(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().requires_grad_(t.is_floating_point())

    return Encoded(dense=leaf(encoded.dense), sparse=leaf(encoded.sparse),
                   multi=leaf(encoded.multi),
                   mask=None if encoded.mask is None else encoded.mask.detach(),
                   aux_loss=leaf(encoded.aux_loss),
                   routing=None if encoded.routing is None else [leaf(t) for t in encoded.routing])


class RandomState:
    """The CPU generator's state, and the CUDA device's when the model is there."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = torch.cuda.get_rng_state(device) if self.cuda else None
        self.device = device

    @contextmanager
    def replay(self) -> Iterator[None]:
        """Run the block from the saved state, then give the generators back the state they
        had (the re-encoding draws again what the first encoding drew)."""
        with torch.random.fork_rng(devices=[self.device] if self.cuda else []):
            torch.set_rng_state(self.cpu_state)
            if self.cuda:
                torch.cuda.set_rng_state(self.cuda_state, self.device)
            yield


def encode_chunked(model: RetrievalModel, inputs: Inputs, side: Side, size: int) -> Encoded:
    """The batch's representations, encoded chunk by chunk under the current autograd mode."""
    return concat([model(**part, side=side) for part in chunks(inputs, size)])


def cached_pass(model: RetrievalModel, queries: Inputs, passages: Inputs, size: int,
                loss_of: Callable[[Encoded, Encoded], tuple[torch.Tensor, dict[str, float]]],
                scale: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Back-propagate ``scale`` x the batch's loss (``loss_of(q, p)``) through ``model`` in
    chunks of ``size`` texts; returns the loss (detached: the gradient is already in the
    parameters) and its logged parts."""
    encoded: dict[Side, list[tuple[Inputs, RandomState, Encoded]]] = {}
    with torch.no_grad():
        for inputs, side in ((queries, Side.QUERY), (passages, Side.PASSAGE)):
            encoded[side] = []
            for part in chunks(inputs, size):
                state = RandomState(part["input_ids"].device)
                out = model(**part, side=side)  # moves the generators on, as one pass would
                encoded[side].append((part, state, _as_leaves(out)))
    loss, parts = loss_of(*(concat([leaves for *_, leaves in encoded[side]])
                            for side in (Side.QUERY, Side.PASSAGE)))
    (loss * scale).backward()  # as far as the representations
    for side, cached in encoded.items():
        for part, state, leaves in cached:
            grads = [leaf.grad for leaf in _tensors(leaves)]
            if all(g is None for g in grads):
                continue  # nothing of this chunk reached the loss
            with state.replay():
                again = _tensors(model(**part, side=side))
            used = [(t, g) for t, g in zip(again, grads) if g is not None]
            torch.autograd.backward([t for t, _ in used], [g for _, g in used])
    return loss.detach(), parts
