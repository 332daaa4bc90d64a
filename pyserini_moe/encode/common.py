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
from pyserini_moe.modeling.base import (
    Encoded,
    Representation,
    Side,
    TextEncoder,
    fingerprint,
)

DEFAULT_MAX_POSITIONS = 512  # a model whose position limit cannot be read (BERT's)


class ModelAdapter:
    """Holds the model; subclasses say which representation they take and how to convert it."""

    representation: Representation  # the field of Encoded this adapter uses
    length_flag = "--query-max-length"  # the flag a too-long max length is blamed on

    def _init_model(self, model: TextEncoder | str, device: str | None,
                    max_length: int | None) -> None:
        """``max_length`` None: every position the model has (512 for BERT), so nothing is cut
        that the model could read."""

        self.model = load_encoder(model, device=device) if isinstance(model, str) else model
        if self.representation not in self.model.representations:
            kinds = ", ".join(Representation(r).index_kind for r in self.model.representations)
            raise UserError(
                f"model type {self.model.model_type!r} has no {self.representation.index_kind} "
                f"representation (its --retriever kinds: {kinds})")
        self.model.eval()
        limit = position_limit(self.model)
        if max_length is None:
            max_length = default_length(self.model)
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

    def __init__(self, model: TextEncoder | str, device: str | None = None,
                 max_length: int = 256) -> None:
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


def position_limit(model: TextEncoder) -> int | None:
    """The most tokens a text can have for ``model``: its backbone's position embeddings (less
    RoBERTa's offset of padding_idx + 1), or an ONNX export's tokenizer limit; None if unknown."""
    if isinstance(model, torch.nn.Module):
        for module in model.modules():
            config = getattr(module, "config", None)
            positions = getattr(config, "max_position_embeddings", None)
            if isinstance(positions, int):
                offset = config.pad_token_id + 1 if config.model_type in _OFFSET_POSITIONS else 0
                return positions - offset
    limit = getattr(getattr(model, "tokenizer", None), "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 1_000_000 else None


def default_length(model: TextEncoder) -> int:
    """The length a text is cut at when none is given: every position the model has (512 for
    BERT), so nothing is cut that the model could read."""
    return position_limit(model) or DEFAULT_MAX_POSITIONS


def query_length(model: TextEncoder) -> int:
    """The query length an index of ``model`` records (see ``IndexMeta.query_max_length``): the
    one it was trained at, else its positions."""
    return model.query_max_length or default_length(model)


# Architectures whose position ids start after the padding index (fairseq's convention).
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert", "longformer"})


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
