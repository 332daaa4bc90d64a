"""Multi-vector (late-interaction) adapters: one vector per token, searched by our Faiss index."""

from __future__ import annotations

import numpy as np
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_moe.encode.common import EncoderMixin, join_titles
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side


def _split(out: Encoded) -> list[np.ndarray]:
    """[B, L, D] + mask -> one float32 [L_i, D] array per text (padding removed)."""
    vectors = out.multi.float().cpu().numpy()
    mask = out.mask.bool().cpu().numpy()
    return [v[m] for v, m in zip(vectors, mask)]


class MultiVectorDocumentEncoder(EncoderMixin, DocumentEncoder):
    """Passages -> list of [L_i, D] token matrices."""

    representation = "multi"

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 256) -> None:
        self._init_model(model, device, max_length)

    def encode(self, texts: list[str], titles: list[str] | None = None,
               max_length: int | None = None, **kwargs) -> list[np.ndarray]:
        return _split(self._encode(join_titles(texts, titles), Side.PASSAGE, max_length))


class MultiVectorQueryEncoder(EncoderMixin, QueryEncoder):
    """Queries -> [L_q, D] token matrices."""

    representation = "multi"

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 64) -> None:
        QueryEncoder.__init__(self)
        self._init_model(model, device, max_length)
        self.has_model = True

    def encode(self, query: str, **kwargs) -> np.ndarray:
        return self.encode_batch([query])[0]

    def encode_batch(self, queries: list[str]) -> list[np.ndarray]:
        return _split(self._encode(list(queries), Side.QUERY))
