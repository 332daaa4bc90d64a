"""What the three representation families share: model loading, the side each encodes,
conversion of model outputs, and the identity of an encoder. Nothing here imports Pyserini: the
passage side of a dense or multi-vector index is encoded without a JVM (:mod:`.adapters` holds
the Pyserini classes)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.auto import ZERO_SHOT_SETTINGS, is_backbone, load_encoder
from pyserini_moe.modeling.base import Encoded, Representation, Side, TextEncoder
from pyserini_moe.modeling.folder import fingerprint
from pyserini_moe.modeling.lengths import (  # noqa: F401 - re-exported: the retrieval layer's lengths
    default_length,
    encode_length,
    position_limit,
    query_length,
)


class ModelAdapter:
    """Holds the model; subclasses say which representation they take and how to convert it."""

    representation: Representation  # the field of Encoded this adapter uses
    length_flag = "--query-max-length"  # the flag a too-long max length is blamed on

    side: Side  # the side it encodes

    def _init_model(self, model: TextEncoder | str, device: str | None,
                    max_length: int | None) -> None:
        """``max_length`` None: the model's own length for this side (queries: as trained, else
        every position; passages: 256), as every other route of the model reads it."""

        self.model = load_encoder(model, device=device) if isinstance(model, str) else model
        if self.representation not in self.model.representations:
            kinds = ", ".join(Representation(r).index_kind for r in self.model.representations)
            raise UserError(
                f"model type {self.model.model_type!r} has no {self.representation.index_kind} "
                f"representation (its --retriever kinds: {kinds})")
        self.model.eval()
        limit = position_limit(self.model)
        if max_length is None:
            max_length = encode_length(self.model, self.side)
        if limit is not None and max_length > limit:  # else it fails at the first long text
            raise UserError(f"max length {max_length} is above the {limit} token positions "
                            f"this model has: use {self.length_flag} {limit} or less")
        self.max_length = max_length

    def convert(self, out: Encoded) -> Any:
        """Model output -> what Pyserini's indexers and searchers take."""
        raise NotImplementedError


class PassageEncoder(ModelAdapter):
    """The passage side of a model, as Pyserini's ``DocumentEncoder`` has it (``encode(texts,
    titles)``), without Pyserini: what an index of vectors needs."""

    length_flag = "--max-length"
    side = Side.PASSAGE

    def __init__(self, model: TextEncoder | str, device: str | None = None,
                 max_length: int | None = None) -> None:
        self._init_model(model, device, max_length)

    def encode(self, texts: list[str], titles: list[str] | None = None,
               max_length: int | None = None, **kwargs: Any) -> Any:
        return self.convert(self.model.encode(join_titles(texts, titles), Side.PASSAGE,
                                              max_length or self.max_length,
                                              only=self.representation))


def first_non_finite(out: Encoded, representations: Iterable[str]) -> int | None:
    """The batch row of the first text whose ``representations`` hold NaN or infinite values
    (None if none does): a model with broken weights (a diverged training) encodes NaN, which
    Faiss ranks anywhere and the impact quantiser silently drops, so the indexer and the query
    encoders refuse it. Padding token vectors are never scored, so they are not checked."""
    bad = None
    for representation in representations:
        finite = torch.isfinite(getattr(out, representation))
        if representation == Representation.MULTI:
            finite = finite.all(dim=-1) | ~out.mask.bool()
        rows = ~finite.flatten(1).all(dim=1).cpu()
        bad = rows if bad is None else bad | rows
    return int(bad.nonzero()[0]) if bad is not None and bad.any() else None


def join_titles(texts: list[str], titles: list[str] | None) -> list[str]:
    """Pyserini passes titles apart; our models are trained on contents = title + " " + text."""
    if titles is None:
        return list(texts)
    return [f"{t} {x}".strip() if t else x for t, x in zip(titles, texts)]


def describe(model: TextEncoder, name: str) -> dict[str, Any]:
    """The encoder fields every index records (see :mod:`pyserini_moe.index.meta`); a local model
    folder by its absolute path, so the index finds it from any working directory."""

    if Path(name).exists():
        name = str(Path(name).resolve())
    described = {"encoder": name, "encoder_fingerprint": fingerprint(model),
                 "model_type": model.model_type,
                 "encoder_options": {k: model.args[k] for k in model.encode_options},
                 "precision": model.precision, "query_max_length": query_length(model)}
    if is_backbone(name):  # how it was used zero-shot, so queries are encoded alike
        described["zero_shot"] = {k: model.args[k] for k in ZERO_SHOT_SETTINGS
                                  if k in model.args}
    return described
