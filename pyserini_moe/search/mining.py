"""Retrieval with a trained model over a whole corpus, for mining hard negatives.

The same index builders and searchers users run, so mined negatives are what the model really
retrieves (TASER appendix B, CoT-MoTE and CAME: retrain on the first model's top results).
"""

from __future__ import annotations

from pathlib import Path

from pyserini_moe.errors import UserError
from pyserini_moe.index.encoded import BUILDERS
from pyserini_moe.runs import Run
from pyserini_moe.search.base import depth_for_remove_query
from pyserini_moe.search.base import remove_query as remove_query_hits
from pyserini_moe.search.encoded import SEARCHERS


def retrieve(encoder: str, corpus: str, topics: dict[str, str], kind: str, hits: int,
             workdir: Path, batch_size: int = 32, max_length: int = 256,
             device: str | None = None, remove_query: bool = False) -> Run:
    """Index ``corpus`` with ``encoder`` (``kind``: dense, impact or multivector) and search.

    ``remove_query``: a collection whose queries are corpus documents (ArguAna, Quora) would
    mine each query itself as its hardest "negative"; this drops it (``search.base.
    remove_query``), ``hits`` still kept.
    """

    if kind not in BUILDERS:
        raise UserError(f"unknown index kind {kind!r}; use one of {sorted(BUILDERS)}")
    index = Path(workdir) / f"mining-{kind}-index"
    BUILDERS[kind](corpus, encoder, index, batch_size=batch_size, max_length=max_length,
                   device=device, overwrite=True)
    searcher = SEARCHERS[kind](index, encoder, device=device)
    if not remove_query:
        return searcher.search(topics, hits=hits)
    return remove_query_hits(searcher.search(topics, hits=depth_for_remove_query(hits)), hits)
