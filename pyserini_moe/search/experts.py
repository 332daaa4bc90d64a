"""One model, several indexes: each representation ("expert") retrieves its own top-K, then the
lists are fused. CoT-MoTE searches a Faiss and a Lucene impact index built from one checkpoint
(hybrid = s_den + s_spr); CAME searches an impact, a multi-vector and a Faiss index (its lexical,
local and global experts) and sums their scores (eq. 12).

Scores are first put in the model's own units (impact scores are divided by the squared
quantisation factor), so that a raw sum is the model's score. Fusions:

* the CAME fusions of :mod:`pyserini_moe.search.fusion` (``came_sum``: eq. 12's sum with a missing
  document scored at the expert's K-th score; ``norm_sum``, ``norm_max``, ``sum_rr``, ``max_rr``,
  ``linear``) and ranx's (``rrf``, ``combsum``, ...);
* ``exact``: every document any expert returned is re-scored exactly by every expert (Faiss
  vectors, stored impact vectors, MaxSim) and the scores are summed: the model's score on the
  union of the candidate lists, with no fill-in rule.
"""

from __future__ import annotations

import os
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import IndexMismatchError, read_meta
from pyserini_moe.runs import Run
from pyserini_moe.search.encoded import SEARCHERS, open_searcher
from pyserini_moe.search.fusion import RANX_METHODS, fuse, fused_top_k, top_k

EXACT = "exact"


class ExpertFusionSearcher:
    """Searchers over ``indexes`` (dense, impact, multivector; kind read from each index)."""

    def __init__(self, indexes: list[str | os.PathLike], encoder: str | None = None,
                 device: str | None = None, query_max_length: int | None = None,
                 query_max_terms: int | None = None, faiss_params: str | None = None,
                 precision: str = "fp32") -> None:

        if len(indexes) < 2:
            raise UserError("expert fusion needs at least two indexes (one per representation)")
        kinds = _one_models_kinds(indexes)  # checked before any model is loaded
        self.searchers = [open_searcher(kind, index, encoder, device, query_max_length,
                                        query_max_terms, faiss_params, precision=precision)
                          for kind, index in zip(kinds, indexes)]

    @property
    def kinds(self) -> list[str]:
        return [s.kind for s in self.searchers]

    def expert_runs(self, topics: dict[str, str], candidates: int = 1000, threads: int = 1,
                    batch_size: int = 64, progress: bool = True) -> dict[str, Run]:
        """Each expert's own top-``candidates``, in model units, by kind."""
        return {s.kind: _scaled(s.search(topics, hits=candidates, threads=threads,
                                         batch_size=batch_size, progress=progress),
                                getattr(s, "scale", 1.0))
                for s in self.searchers}

    def fuse(self, topics: dict[str, str], runs: dict[str, Run], method: str = "came_sum",
             params: dict[str, Any] | None = None, norm: str | None = None,
             hits: int = 1000) -> Run:
        """Fuse the expert runs (in the order of the indexes) with ``method``."""
        if method == EXACT:
            return fused_top_k(self.exact(topics, runs), hits)
        lists = [runs[kind] for kind in self.kinds]
        if method in RANX_METHODS:
            lists, params = _with_hits(lists, params)
            if len(lists) < 2:  # ranx fuses two runs or more; one expert's ranking is its own
                return top_k(lists[0], hits) if lists else {qid: {} for qid in topics}
        return fuse(lists, method, norm=norm, params=params, k=hits)

    def exact(self, topics: dict[str, str], runs: dict[str, Run]) -> Run:
        """Sum of every expert's exact score over the union of the experts' candidates."""
        union = {qid: sorted({d for run in runs.values() for d in run.get(qid, {})})
                 for qid in topics}
        total: Run = {qid: dict.fromkeys(docs, 0.0) for qid, docs in union.items()}
        for searcher in self.searchers:
            scale = getattr(searcher, "scale", 1.0)
            for qid, scores in searcher.rescore(topics, union).items():
                for docid, score in scores.items():
                    total[qid][docid] += score * scale
        return total

    def search(self, topics: dict[str, str], hits: int = 1000, candidates: int = 1000,
               method: str = "came_sum", params: dict[str, Any] | None = None,
               norm: str | None = None, threads: int = 1, batch_size: int = 64,
               progress: bool = True) -> tuple[Run, dict[str, Run]]:
        """(fused run, the expert runs it was fused from)."""
        runs = self.expert_runs(topics, candidates, threads, batch_size, progress)
        return self.fuse(topics, runs, method, params, norm, hits), runs


def _with_hits(runs: list[Run], params: dict[str, Any] | None
               ) -> tuple[list[Run], dict[str, Any] | None]:
    """The expert runs that hold a hit, and ``wsum``'s weights for them. ranx cannot build a
    run without any hit (a traceback: "max() arg is an empty sequence"), and an expert that
    retrieved nothing for every query (an impact query cut to terms no document has) adds
    nothing to any document's rrf, combsum, combmnz or wsum score, so leaving it out fuses the
    same ranking; the search says which expert was left out (``dispatch.silent_experts``).
    Refusing the search instead would throw away the other experts' good run."""
    kept = [i for i, run in enumerate(runs) if any(run.values())]
    if params and "weights" in params:
        params = {**params, "weights": [params["weights"][i] for i in kept]}
    return [runs[i] for i in kept], params


def _scaled(run: Run, scale: float) -> Run:
    if scale == 1.0:
        return run
    return {qid: {d: s * scale for d, s in hits.items()} for qid, hits in run.items()}


def _one_models_kinds(indexes: list[str | os.PathLike]) -> list[str]:
    """Each index's kind, once the indexes are known to be one model's experts: pyserini-moe
    indexes of distinct kinds whose metadata records one model (fused scores are summed in that
    model's units; runs of different models are ``python -m pyserini_moe.fuse``'s work)."""
    kinds, models = [], {}
    for index in indexes:
        meta = read_meta(index)
        kind = meta.kind if meta else None
        if kind not in SEARCHERS:
            raise IndexMismatchError(f"{index}: expert fusion takes dense, impact or "
                                     f"multivector indexes built by pyserini-moe, not "
                                     f"{kind or 'an index without pyserini_moe_index.json'}")
        if meta.encoder_fingerprint:
            models.setdefault(meta.encoder_fingerprint, str(index))
        kinds.append(kind)
    if len(models) > 1:  # first: two models' indexes of one kind are a fuse's work too
        raise IndexMismatchError(
            f"{' and '.join(models.values())} were built by different models; --retriever fused "
            "fuses the experts of one model (their scores share its units): fuse runs of "
            "different models with `python -m pyserini_moe.fuse`")
    if len(set(kinds)) < len(kinds):
        raise UserError(f"two indexes of the same kind ({kinds}): give one per expert")
    return kinds
