"""One search, whatever the retriever: the library form of ``python -m pyserini_moe.search``.

:func:`search_topics` opens the searcher a :class:`SearchSettings` names (BM25, a model's dense /
impact / multi-vector index, or several indexes of one model fused) and, with ``bm25_index``,
fuses the model's run with BM25's (Pyserini's hybrid). The command line and the benchmark both
call it.
"""

from __future__ import annotations

import dataclasses

from pyserini_moe.errors import UserError
from pyserini_moe.runs import Run


@dataclasses.dataclass
class SearchSettings:
    """What ``python -m pyserini_moe.search`` takes, flag for flag (see its ``--help``)."""

    retriever: str
    index: str | list[str]  # a list for ``fused`` only
    encoder: str | None = None
    device: str | None = None
    query_max_length: int | None = None
    query_max_terms: int | None = 1024
    faiss_params: str | None = None
    hits: int = 1000
    candidates: int = 1000
    threads: int = 1
    batch_size: int = 64
    exhaustive: bool = False
    fusion: str = "came_sum"
    fusion_weights: list[float] | None = None
    bm25_index: str | None = None
    alpha: float = 1.0
    hybrid_normalize: bool = False
    k1: float = 0.9
    b: float = 0.4
    quiet: bool = False


def search_topics(s: SearchSettings, topics: dict[str, str]) -> tuple[Run, dict[str, Run]]:
    """The run of ``topics`` (``hits`` per query), and for ``fused`` each index's own run
    (``candidates`` deep; empty otherwise)."""
    depth = s.candidates if s.bm25_index else s.hits
    expert_runs: dict[str, Run] = {}
    if s.retriever == "fused":
        model_run, expert_runs = _fused(s, topics, depth)
    else:
        searcher = open_any(s)
        if s.exhaustive:
            return searcher.search(topics, hits=s.hits, batch_size=s.batch_size,
                                   progress=not s.quiet, exhaustive=True), {}
        model_run = searcher.search(topics, hits=depth, threads=s.threads,
                                    batch_size=s.batch_size, progress=not s.quiet)
    if not s.bm25_index:
        return model_run, expert_runs
    from pyserini_moe.search.bm25 import Bm25Searcher  # noqa: PLC0415
    from pyserini_moe.search.hybrid import hybrid  # noqa: PLC0415

    bm25_run = Bm25Searcher(s.bm25_index, k1=s.k1, b=s.b).search(
        topics, hits=s.candidates, threads=s.threads, batch_size=s.batch_size,
        progress=not s.quiet)
    return hybrid(model_run, bm25_run, s.alpha, s.hybrid_normalize, k=s.hits), expert_runs


def open_any(s: SearchSettings):  # noqa: ANN201 - a Bm25Searcher or one of search.encoded's
    """The searcher of one index (any retriever but ``fused``)."""
    if s.retriever == "bm25":
        from pyserini_moe.search.bm25 import Bm25Searcher  # noqa: PLC0415

        return Bm25Searcher(s.index, k1=s.k1, b=s.b)
    from pyserini_moe.search.encoded import open_searcher  # noqa: PLC0415

    return open_searcher(s.retriever, s.index, s.encoder, s.device, s.query_max_length,
                         s.query_max_terms, s.faiss_params)


def _fused(s: SearchSettings, topics: dict[str, str], hits: int) -> tuple[Run, dict[str, Run]]:
    """Each index's own run -> their fusion, ``hits`` per query."""
    from pyserini_moe.search.experts import ExpertFusionSearcher  # noqa: PLC0415

    searcher = ExpertFusionSearcher(s.index, s.encoder, device=s.device,
                                    query_max_length=s.query_max_length,
                                    query_max_terms=s.query_max_terms,
                                    faiss_params=s.faiss_params)
    params = {"weights": s.fusion_weights} if s.fusion_weights else None
    if s.fusion in ("linear", "wsum") and (not s.fusion_weights
                                           or len(s.fusion_weights) != len(s.index)):
        raise UserError(f"--fusion {s.fusion} needs --fusion-weights, one per index "
                        f"({len(s.index)}); tune them on a dev split with "
                        "`python -m pyserini_moe.fuse --dev-runs ...`")
    return searcher.search(topics, hits=hits, candidates=s.candidates, method=s.fusion,
                           params=params, threads=s.threads, batch_size=s.batch_size,
                           progress=not s.quiet)
