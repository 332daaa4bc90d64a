"""Multi-vector (late-interaction) representations: one vector per token, in our Faiss index."""

from __future__ import annotations

import numpy as np

from pyserini_moe.encode.common import PassageEncoder
from pyserini_moe.modeling.base import Encoded, Representation


class MultiVector:
    representation = Representation.MULTI

    def convert(self, out: Encoded) -> list[np.ndarray]:
        """[B, L, D] + mask -> one float32 [L_i, D] array per text (padding removed)."""
        vectors = out.multi.float().cpu().numpy()
        mask = out.mask.bool().cpu().numpy()
        return [v[m] for v, m in zip(vectors, mask)]


class MultiVectorPassageEncoder(MultiVector, PassageEncoder):
    """Passages -> list of [L_i, D] token matrices."""
