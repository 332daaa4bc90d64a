"""How many tokens of a text a model reads, by side: one rule that every route follows.

A query is cut at the length the model was trained at (the recipe's ``data.query_max_length``,
saved in the model folder), else at every position the model has; a passage at
:data:`PASSAGE_MAX_LENGTH` tokens (the ``index --max-length`` default), or fewer where the model
has fewer positions. The command line (``search``, ``encode-queries``, ``index``), the Python
API, :meth:`RetrievalModel.encode` without a length, Pyserini's searchers through our query
encoders and sentence-transformers' ``encode_query`` / ``encode_document`` all ask this module,
so one query gets one vector whatever the route.
"""

from __future__ import annotations

from typing import Any

import torch

from pyserini_moe.modeling.side import Side

DEFAULT_MAX_POSITIONS = 512  # a model whose position limit cannot be read (BERT's)
# Passages: what the index builder reads by default. Not the training length (128 in the MiniLM
# recipes): the measured rows index at 256, and a longer passage costs nothing in training.
PASSAGE_MAX_LENGTH = 256
# Architectures whose position ids start after the padding index (fairseq's convention).
_OFFSET_POSITIONS = frozenset({"roberta", "xlm-roberta", "camembert", "longformer"})


def position_limit(model: Any) -> int | None:
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


def default_length(model: Any) -> int:
    """Every position the model has (512 for BERT), so nothing is cut that it could read."""
    return position_limit(model) or DEFAULT_MAX_POSITIONS


def query_length(model: Any) -> int:
    """The query length of ``model``: the one it was trained at, else its positions (what an
    index records as ``query_max_length``)."""
    return getattr(model, "query_max_length", None) or default_length(model)


def passage_length(model: Any) -> int:
    """The passage length of ``model``: :data:`PASSAGE_MAX_LENGTH`, or its positions if fewer."""
    return min(PASSAGE_MAX_LENGTH, default_length(model))


def encode_length(model: Any, side: Side) -> int:
    """The tokens of a ``side`` text that ``model`` reads when no length is asked for."""
    return query_length(model) if Side(side) is Side.QUERY else passage_length(model)
