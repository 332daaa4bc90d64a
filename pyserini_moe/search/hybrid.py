"""Dense (or impact / multi-vector) + BM25 hybrids with Pyserini's exact semantics, on Runs.

:func:`hybrid` is ``pyserini.search.hybrid.HybridSearcher._hybrid_results`` (Pyserini 1.6) applied
per query of two Runs, so hybrids of our experts match Pyserini's hybrid runs. :func:`search_alpha`
is TASER's tuning of the BM25 weight (taser.txt, appendix D).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import evaluate
from pyserini_moe.runs import Run
from pyserini_moe.search.fusion import Qrels, fused_top_k, top_k

# The BM25 weight when none is given: Pyserini's (``HybridSearcher.search`` and
# ``python -m pyserini.search.hybrid --alpha``), so a hybrid typed as in Pyserini fuses alike.
PYSERINI_ALPHA = 0.1


def _centre_scale(score: float, lo: float, hi: float) -> float:
    """Pyserini's normalisation ``(s - (min + max) / 2) / (max - min)``, into [-0.5, 0.5].

    Pyserini divides by zero when a list has one distinct score; that list maps to 0 here.
    """
    return (score - (lo + hi) / 2) / (hi - lo) if hi > lo else 0.0


def _hybrid_query(dense: dict[str, float], sparse: dict[str, float], alpha: float,
                  normalization: bool, weight_on_dense: bool) -> dict[str, float]:
    """One query of ``_hybrid_results``: a doc missing from one side gets that side's minimum."""
    min_dense, max_dense = (min(dense.values()), max(dense.values())) if dense else (0, 1)
    min_sparse, max_sparse = (min(sparse.values()), max(sparse.values())) if sparse else (0, 1)
    fused = {}
    for doc in dense.keys() | sparse.keys():
        sparse_score = sparse.get(doc, min_sparse)
        dense_score = dense.get(doc, min_dense)
        if normalization:
            sparse_score = _centre_scale(sparse_score, min_sparse, max_sparse)
            dense_score = _centre_scale(dense_score, min_dense, max_dense)
        fused[doc] = (sparse_score + alpha * dense_score if weight_on_dense
                      else alpha * sparse_score + dense_score)
    return fused


def hybrid_fusion(dense: Run, sparse: Run, alpha: float, normalization: bool = False,
           weight_on_dense: bool = False, k: int = 1000) -> Run:
    """Pyserini's hybrid of two runs per query, top ``k`` kept.

    As in Pyserini, ``alpha`` weighs the *sparse* side by default, ``dense + alpha * sparse``
    (TASER's eq. 6), and the dense side with ``weight_on_dense``: ``sparse + alpha * dense``.
    Each side should be its top-K' candidates (Pyserini's ``k0``); a query present on one side only
    is fused with an empty other side (Pyserini's defaults for it: minimum 0, maximum 1).
    """
    qids = list(dict.fromkeys([*dense, *sparse]))
    return fused_top_k({qid: _hybrid_query(dense.get(qid, {}), sparse.get(qid, {}), alpha,
                                           normalization, weight_on_dense) for qid in qids}, k)


def search_alpha(dense_dev: Run, sparse_dev: Run, qrels_dev: Qrels, metric: str = "ndcg@10",
                 grid: Iterable[float] = np.arange(0.5, 2.01, 0.1), normalization: bool = True,
                 k_prime: int = 100, k: int = 100) -> tuple[float, dict[float, float]]:
    """TASER's alpha search (appendix D): the best ``dense + alpha * BM25`` on a dev split.

    Following TASER, ``alpha`` runs over [0.5, 2.0] in steps of 0.1, scores are normalised as in
    Ma et al. (2021) (Pyserini's normalisation), and the top ``k_prime`` = K' = 100 candidates of
    each side are fused, keeping the top ``k``. Returns ``(best alpha, {alpha: metric})``; alphas
    are rounded to 6 decimals and the first best in grid order wins a tie. Metrics follow
    ``trec_eval -c`` (:mod:`pyserini_moe.eval.metrics`).
    """

    dense, sparse = top_k(dense_dev, k_prime), top_k(sparse_dev, k_prime)
    table = {}
    for value in grid:
        alpha = round(float(value), 6)
        run = hybrid_fusion(dense, sparse, alpha, normalization, weight_on_dense=False, k=k)
        table[alpha] = next(iter(evaluate(run, qrels_dev, [metric]).values()))
    if not table:
        raise UserError("empty alpha grid")
    return max(table, key=table.__getitem__), table
