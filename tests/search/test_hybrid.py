"""The hybrid matches Pyserini's HybridSearcher; the alpha search finds a constructed optimum."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from pyserini_moe.search.hybrid import hybrid_fusion, search_alpha

DENSE = {"q1": {"d1": 0.9, "d2": 0.7, "d3": 0.2}}
SPARSE = {"q1": {"d2": 12.0, "d4": 8.0, "d5": 5.0, "d1": 3.0}, "q2": {"d6": 4.0, "d7": 2.0}}


@pytest.fixture(scope="module")
def pyserini_hybrid():
    from pyserini_moe import _java

    _java.bootstrap()
    from pyserini.search.hybrid import HybridSearcher

    return HybridSearcher._hybrid_results


def hits(scores):
    """Stand-ins for Pyserini's hit objects."""
    return [SimpleNamespace(docid=docid, score=score) for docid, score in scores.items()]


def test_hand_computed():
    # Sparse min 3.0, dense min 0.2 fill the gaps. Default: .1 * sparse + dense.
    assert hybrid_fusion(DENSE, SPARSE, 0.1)["q1"] == pytest.approx(
        {"d1": 0.3 + 0.9, "d2": 1.2 + 0.7, "d3": 0.3 + 0.2, "d4": 0.8 + 0.2, "d5": 0.5 + 0.2})
    # weight_on_dense: sparse + .1 * dense.
    assert hybrid_fusion(DENSE, SPARSE, 0.1, weight_on_dense=True)["q1"] == pytest.approx(
        {"d1": 3.09, "d2": 12.07, "d3": 3.02, "d4": 8.02, "d5": 5.02})
    # Normalised (s - mid) / range. Dense mid .55, range .7: d1 .5, d2 3/14, d3/d4/d5 -.5.
    # Sparse mid 7.5, range 9: d2 .5, d4 1/18, d5 -5/18, d1/d3 -.5. alpha = 1: plain sum.
    assert hybrid_fusion(DENSE, SPARSE, 1.0, normalization=True)["q1"] == pytest.approx(
        {"d1": 0.0, "d2": 5 / 7, "d3": -1.0, "d4": -4 / 9, "d5": -7 / 9})


def test_top_k():
    assert hybrid_fusion(DENSE, SPARSE, 0.1, k=2)["q1"] == pytest.approx({"d2": 1.9, "d1": 1.2})


@pytest.mark.parametrize("alpha,normalization,weight_on_dense,k", list(itertools.product(
    [0.1, 0.5, 1.3], [False, True], [False, True], [3, 10])))
def test_matches_pyserini(pyserini_hybrid, alpha, normalization, weight_on_dense, k):
    ours = hybrid_fusion(DENSE, SPARSE, alpha, normalization, weight_on_dense, k)
    for qid in SPARSE:  # q2 has no dense hits: Pyserini's empty-list defaults apply
        theirs = pyserini_hybrid(hits(DENSE.get(qid, {})), hits(SPARSE[qid]), alpha, k,
                                 normalization, weight_on_dense)
        assert [(h.docid, h.score) for h in theirs] == list(ours[qid].items())


def test_single_score_list_normalises_to_zero():
    # Pyserini divides by zero here; a list with one distinct score normalises to 0 instead.
    fused = hybrid_fusion({"q": {"a": 2.0}}, {"q": {"a": 5.0, "b": 1.0}}, 1.0, normalization=True)
    assert fused["q"] == pytest.approx({"a": 0.0 + 0.5, "b": 0.0 - 0.5})


def test_search_alpha_finds_constructed_optimum():
    # Normalised, score = dense + alpha * sparse, each in [-.5, .5].
    # qa: relevant r (dense -.5, sparse .5) beats x (dense .5, sparse -.3) iff alpha > 1.25.
    # qb: relevant r2 (dense .5, sparse -.25) beats z (dense -.5, sparse .5) iff alpha < 4/3.
    # y and w (sparse -.5, dense filled with -.5) are last. Only alpha = 1.3 gets both first.
    dense = {"qa": {"x": 1.0, "r": 0.0}, "qb": {"r2": 1.0, "z": 0.0}}
    sparse = {"qa": {"r": 10.0, "x": 2.0, "y": 0.0}, "qb": {"z": 10.0, "r2": 2.5, "w": 0.0}}
    qrels = {"qa": {"r": 1}, "qb": {"r2": 1}}
    best, table = search_alpha(dense, sparse, qrels)
    assert best == 1.3
    assert list(table) == [round(0.5 + 0.1 * i, 6) for i in range(16)]
    assert table[1.3] == pytest.approx(1.0)
    # Elsewhere one query has its relevant doc 2nd: (1 + 1/log2(3)) / 2.
    one_miss = (1 + 1 / 1.584962500721156) / 2
    assert all(v == pytest.approx(one_miss) for a, v in table.items() if a != 1.3)
