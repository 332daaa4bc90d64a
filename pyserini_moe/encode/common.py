"""What the three adapter families share: model loading, the side each encodes, conversion of
model outputs, and the identity of an encoder."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side


class _ModelAdapter:
    """Holds the model; subclasses say which representation they take and how to convert it."""

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

    def convert(self, out: Encoded) -> Any:
        """Model output -> what Pyserini's indexers and searchers take."""
        raise NotImplementedError


class ModelDocumentEncoder(_ModelAdapter, DocumentEncoder):
    """Pyserini ``DocumentEncoder`` over the passage side of a model."""

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 256) -> None:
        self._init_model(model, device, max_length)

    def encode(self, texts: list[str], titles: list[str] | None = None,
               max_length: int | None = None, **kwargs: Any) -> Any:
        return self.convert(self.model.encode(join_titles(texts, titles), Side.PASSAGE,
                                              max_length or self.max_length,
                                              only=self.representation))


class ModelQueryEncoder(_ModelAdapter, QueryEncoder):
    """Pyserini ``QueryEncoder`` over the query side of a model; ``encode_batch`` lets Pyserini's
    searchers encode a batch of queries at once."""

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 64) -> None:
        QueryEncoder.__init__(self)
        self._init_model(model, device, max_length)
        self.has_model = True

    def encode(self, query: str, **kwargs: Any) -> Any:
        return self.encode_batch([query])[0]

    def encode_batch(self, queries: list[str]) -> Any:
        return self.convert(self.model.encode(list(queries), Side.QUERY, self.max_length,
                                              only=self.representation))


def join_titles(texts: list[str], titles: list[str] | None) -> list[str]:
    """Pyserini passes titles apart; our models are trained on contents = title + " " + text."""
    if titles is None:
        return list(texts)
    return [f"{t} {x}".strip() if t else x for t, x in zip(titles, texts)]


def fingerprint(model: RetrievalModel) -> str:
    """Short, stable identity of a model's architecture and weights.

    Stored with every index, compared when searching: an index built by one encoder and searched
    with another fails loudly instead of returning plausible-looking garbage. An ONNX export
    carries its own (its source model's, or a distinct one for int8 graphs).
    """
    recorded = getattr(model, "fingerprint", None)
    if isinstance(recorded, str):
        return recorded
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
            "model_type": model.model_type,
            "encoder_options": {k: model.args[k] for k in model.encode_options}}
