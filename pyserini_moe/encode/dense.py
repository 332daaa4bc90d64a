"""Dense adapters: one vector per text, searched by Pyserini's ``FaissSearcher``."""

from __future__ import annotations

import numpy as np
from pyserini.encode import DocumentEncoder, QueryEncoder

from pyserini_moe.encode.common import EncoderMixin, join_titles
from pyserini_moe.modeling.base import RetrievalModel, Side


class DenseDocumentEncoder(EncoderMixin, DocumentEncoder):
    """Passages -> float32 [B, H] (the passage side of the model: passage experts, P-FFN, ...)."""

    representation = "dense"

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 256) -> None:
        self._init_model(model, device, max_length)

    def encode(self, texts: list[str], titles: list[str] | None = None,
               max_length: int | None = None, **kwargs) -> np.ndarray:
        out = self._encode(join_titles(texts, titles), Side.PASSAGE, max_length)
        return out.dense.float().cpu().numpy()


class DenseQueryEncoder(EncoderMixin, QueryEncoder):
    """Queries -> float32 vectors; ``encode_batch`` lets ``FaissSearcher.batch_search`` batch."""

    representation = "dense"

    def __init__(self, model: RetrievalModel | str, device: str | None = None,
                 max_length: int = 64) -> None:
        QueryEncoder.__init__(self)
        self._init_model(model, device, max_length)
        self.has_model = True

    def encode(self, query: str, **kwargs) -> np.ndarray:
        return self.encode_batch([query])[0]

    def encode_batch(self, queries: list[str]) -> np.ndarray:
        return self._encode(list(queries), Side.QUERY).dense.float().cpu().numpy()
