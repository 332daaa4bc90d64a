"""Retrieval with a trained model over a whole corpus, for mining hard negatives.

The same index builders and searchers users run, so mined negatives are what the model really
retrieves (TASER appendix B, CoT-MoTE and CAME: retrain on the first model's top results).
"""

from __future__ import annotations

from pathlib import Path

from pyserini_moe.errors import UserError
from pyserini_moe.runs import Run


def retrieve(encoder: str, corpus: str, topics: dict[str, str], kind: str, hits: int,
             workdir: Path, batch_size: int = 32, max_length: int = 256,
             device: str | None = None) -> Run:
    """Index ``corpus`` with ``encoder`` (``kind``: dense, impact or multivector) and search."""
    from pyserini_moe.index.encoded import BUILDERS  # noqa: PLC0415
    from pyserini_moe.search.encoded import SEARCHERS  # noqa: PLC0415

    if kind not in BUILDERS:
        raise UserError(f"unknown index kind {kind!r}; use one of {sorted(BUILDERS)}")
    index = Path(workdir) / f"mining-{kind}-index"
    BUILDERS[kind](corpus, encoder, index, batch_size=batch_size, max_length=max_length,
                   device=device, overwrite=True)
    return SEARCHERS[kind](index, encoder, device=device).search(topics, hits=hits)
