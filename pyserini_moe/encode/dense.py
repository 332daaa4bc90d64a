"""Dense adapters: one vector per text, searched by Pyserini's ``FaissSearcher``."""

from __future__ import annotations

import numpy as np

from pyserini_moe.encode.common import ModelDocumentEncoder, ModelQueryEncoder
from pyserini_moe.modeling.base import Encoded, Representation


class _Dense:
    representation = Representation.DENSE

    def convert(self, out: Encoded) -> np.ndarray:
        """[B, H] float32, the dtype Faiss takes."""
        return out.dense.float().cpu().numpy()


class DenseDocumentEncoder(_Dense, ModelDocumentEncoder):
    """Passages -> float32 [B, H] (the passage side of the model: passage experts, P-FFN, ...)."""


class DenseQueryEncoder(_Dense, ModelQueryEncoder):
    """Queries -> float32 vectors for ``FaissSearcher``."""
