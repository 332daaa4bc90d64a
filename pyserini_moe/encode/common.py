"""What the three adapter families share: model resolution, text joining, identity of an encoder."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side


class EncoderMixin:
    """Holds the model and encodes batches of one side."""

    representation: str  # "dense", "sparse" or "multi": the field of Encoded this adapter uses

    def _init_model(self, model: RetrievalModel | str, device: str | None, max_length: int) -> None:
        from pyserini_moe.modeling.auto import load_encoder  # noqa: PLC0415

        self.model = load_encoder(model, device=device) if isinstance(model, str) else model
        if self.representation not in self.model.representations:
            raise ValueError(
                f"model type {self.model.model_type!r} produces {self.model.representations}, "
                f"not {self.representation!r} representations")
        self.model.eval()
        self.max_length = max_length

    def _encode(self, texts: list[str], side: Side, max_length: int | None = None) -> Encoded:
        return self.model.encode(texts, side, max_length or self.max_length)


def join_titles(texts: list[str], titles: list[str] | None) -> list[str]:
    """Pyserini passes titles apart; our models are trained on contents = title + " " + text."""
    if titles is None:
        return list(texts)
    return [f"{t} {x}".strip() if t else x for t, x in zip(titles, texts)]


def fingerprint(model: RetrievalModel) -> str:
    """Short, stable identity of a model's architecture and weights.

    Stored with every index, compared when searching: an index built by one encoder and searched
    with another fails loudly instead of returning plausible-looking garbage.
    """
    h = hashlib.sha256(json.dumps({"type": model.model_type, "args": model.args},
                                  sort_keys=True).encode())
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().flatten().double().cpu()
            h.update(name.encode())
            h.update(str(tuple(tensor.shape)).encode())
            h.update(f"{flat.sum().item():.6e}|{flat.abs().sum().item():.6e}".encode())
            h.update(flat[:16].numpy().round(6).tobytes())
    return h.hexdigest()[:16]


def describe(model: RetrievalModel, name: str) -> dict[str, Any]:
    """The encoder fields every index records (see :mod:`pyserini_moe.index.meta`)."""
    return {"encoder": name, "encoder_fingerprint": fingerprint(model),
            "model_type": model.model_type}
