"""Multi-vector (late-interaction) adapters: one vector per token, searched by our Faiss index."""

from __future__ import annotations

import numpy as np

from pyserini_moe.encode.common import ModelDocumentEncoder, ModelQueryEncoder
from pyserini_moe.modeling.base import Encoded, Representation


class _MultiVector:
    representation = Representation.MULTI

    def convert(self, out: Encoded) -> list[np.ndarray]:
        """[B, L, D] + mask -> one float32 [L_i, D] array per text (padding removed)."""
        vectors = out.multi.float().cpu().numpy()
        mask = out.mask.bool().cpu().numpy()
        return [v[m] for v, m in zip(vectors, mask)]


class MultiVectorDocumentEncoder(_MultiVector, ModelDocumentEncoder):
    """Passages -> list of [L_i, D] token matrices."""


class MultiVectorQueryEncoder(_MultiVector, ModelQueryEncoder):
    """Queries -> [L_q, D] token matrices."""
