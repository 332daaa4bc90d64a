"""Dense representations: one vector per text, in a Faiss index (Pyserini's ``FaissSearcher``)."""

from __future__ import annotations

import numpy as np

from pyserini_moe.encode.common import PassageEncoder
from pyserini_moe.modeling.base import Encoded, Representation


class Dense:
    representation = Representation.DENSE

    def convert(self, out: Encoded) -> np.ndarray:
        """[B, H] float32, the dtype Faiss takes."""
        return out.dense.float().cpu().numpy()


class DensePassageEncoder(Dense, PassageEncoder):
    """Passages -> float32 [B, H] (the passage side of the model: passage experts, P-FFN, ...)."""
