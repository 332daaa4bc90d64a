"""Every fusion method against numbers worked out by hand on tiny runs."""

from __future__ import annotations

import pytest

from pyserini_moe.search.fusion import (
    CAME_METHODS,
    _simplex_grid,
    came_sum,
    fuse,
    linear,
    max_rr,
    norm_max,
    norm_sum,
    optimize_weights,
    sum_rr,
)

# Ranks in q1 -- A: d1 d2 d3 (K-th score 1.0); B: d2 d4 d1 (K-th 0.1); C: d3 d1 (K-th 5.0).
# Min-max in q1 -- A: d1 1, d2 .5, d3 0; B: d2 1, d4 .5, d1 0; C: d3 1, d1 0.
# q2 is in A only.
A = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d5": 1.0}}
B = {"q1": {"d2": 0.9, "d4": 0.5, "d1": 0.1}}
C = {"q1": {"d3": 10.0, "d1": 5.0}}


def approx(run):
    return {qid: pytest.approx(hits) for qid, hits in run.items()}


# --- ranx methods ---------------------------------------------------------------------------------

def test_rrf():
    # 1/(60 + rank): d1 = 1/61 + 1/63, d2 = 1/62 + 1/61, d3 = 1/63, d4 = 1/62; q2's d5 = 1/61.
    expected = {"q1": {"d1": 1 / 61 + 1 / 63, "d2": 1 / 62 + 1 / 61, "d3": 1 / 63, "d4": 1 / 62},
                "q2": {"d5": 1 / 61}}
    assert fuse([A, B], "rrf") == approx(expected)
    assert fuse([A, B], "rrf", params={"k": 60}) == approx(expected)


def test_combsum_min_max():
    # d1 = 1 + 0, d2 = .5 + 1, d3 = 0, d4 = .5
    assert fuse([A, B], "combsum", norm="min-max")["q1"] == pytest.approx(
        {"d1": 1.0, "d2": 1.5, "d3": 0.0, "d4": 0.5})


def test_combsum_max_norm():
    # s / max: A d1 1, d2 2/3, d3 1/3; B d2 1, d4 5/9, d1 1/9.
    assert fuse([A, B], "combsum", norm="max")["q1"] == pytest.approx(
        {"d1": 10 / 9, "d2": 5 / 3, "d3": 1 / 3, "d4": 5 / 9})


def test_combsum_raw_scores_missing_is_zero():
    # norm=None: raw sum, a doc missing from a run adds 0: d1 3 + .1, d2 2 + .9, d3 1, d4 .5.
    assert fuse([A, B], "combsum")["q1"] == pytest.approx(
        {"d1": 3.1, "d2": 2.9, "d3": 1.0, "d4": 0.5})


def test_combmnz_min_max():
    # sum of min-max scores x number of runs returning the doc: d1 1*2, d2 1.5*2, d3 0*1, d4 .5*1.
    assert fuse([A, B], "combmnz", norm="min-max")["q1"] == pytest.approx(
        {"d1": 2.0, "d2": 3.0, "d3": 0.0, "d4": 0.5})


def test_wsum():
    # .3 * A + .7 * B after min-max: d1 .3, d2 .15 + .7, d3 0, d4 .35.
    fused = fuse([A, B], "wsum", norm="min-max", params={"weights": [0.3, 0.7]})
    assert fused["q1"] == pytest.approx({"d1": 0.3, "d2": 0.85, "d3": 0.0, "d4": 0.35})


def test_optimize_wsum_weights():
    # With weights (w, 1 - w) after min-max: d1 = w, d2 = 1 - w/2, d4 = (1 - w)/2, d3 = 0.
    # d4 (the relevant doc) is 2nd iff w < 1/3, else 3rd, so the best grid weights have w <= 0.3.
    params = optimize_weights([A, B], {"q1": {"d4": 1}}, "wsum", "ndcg@10", norm="min-max")
    w_a, w_b = params["weights"]
    assert w_a <= 0.3 + 1e-9
    assert w_a + w_b == pytest.approx(1.0)
    assert all(isinstance(w, float) for w in params["weights"])


# --- CAME fusions ---------------------------------------------------------------------------------

def test_came_sum_fills_with_kth_score():
    # Eq. 12: d3 (missing from B) gets B's K-th score .1, d4 (missing from A) gets A's 1.0:
    # d1 3 + .1, d2 2 + .9, d3 1 + .1, d4 1 + .5; q2: B has no list, so d5 = 1 + 0.
    assert came_sum([A, B]) == approx({"q1": {"d1": 3.1, "d2": 2.9, "d3": 1.1, "d4": 1.5},
                                       "q2": {"d5": 1.0}})
    # The fill reverses d3/d4 compared with filling missing docs with 0 (raw CombSUM: 1.0 vs .5).
    fused = came_sum([A, B])["q1"]
    assert fused["d4"] > fused["d3"]


def test_came_sum_three_experts():
    # C's K-th score is 5: d1 3 + .1 + 5, d2 2 + .9 + 5, d3 1 + .1 + 10, d4 1 + .5 + 5.
    assert came_sum([A, B, C])["q1"] == pytest.approx(
        {"d1": 8.1, "d2": 7.9, "d3": 11.1, "d4": 6.5})


def test_norm_sum():
    # Min-max, missing 0: d1 1 + 0, d2 .5 + 1, d3 0, d4 .5; q2's single hit normalises to 0.
    assert norm_sum([A, B]) == approx({"q1": {"d1": 1.0, "d2": 1.5, "d3": 0.0, "d4": 0.5},
                                       "q2": {"d5": 0.0}})


def test_norm_max():
    # max of min-max: d1 max(1, 0, 0), d2 max(.5, 1), d3 max(0, 1), d4 .5.
    assert norm_max([A, B, C])["q1"] == pytest.approx({"d1": 1.0, "d2": 1.0, "d3": 1.0, "d4": 0.5})


def test_sum_rr():
    # 1/rank: d1 1 + 1/3 + 1/2, d2 1/2 + 1, d3 1/3 + 1, d4 1/2.
    assert sum_rr([A, B, C])["q1"] == pytest.approx(
        {"d1": 11 / 6, "d2": 3 / 2, "d3": 4 / 3, "d4": 1 / 2})


def test_max_rr():
    # d1 max(1, 1/3), d2 max(1/2, 1), d3 1/3, d4 1/2.
    assert max_rr([A, B])["q1"] == pytest.approx({"d1": 1.0, "d2": 1.0, "d3": 1 / 3, "d4": 1 / 2})


def test_linear():
    # .5 * A + 2 * B, K-th fill: d1 1.5 + .2, d2 1 + 1.8, d3 .5 + 2 * .1, d4 .5 * 1 + 1.
    assert linear([A, B], [0.5, 2.0])["q1"] == pytest.approx(
        {"d1": 1.7, "d2": 2.8, "d3": 0.7, "d4": 1.5})


def test_optimize_linear_weights():
    # (w, 1 - w) with K-th fill: d1 .1 + 2.9w, d2 .9 + 1.1w, d3 .1 + .9w, d4 .5 + .5w. The relevant
    # d4 is 2nd (behind d2) iff w < 1/6, i.e. w in {0, .1}; the first best in grid order is w = 0.
    params = optimize_weights([A, B], {"q1": {"d4": 1}}, "linear", "ndcg@10")
    assert params == {"weights": [0.0, 1.0]}


def test_simplex_grid_keeps_every_combination():
    # 66 = C(12, 2) weightings of 3 runs on a 0.1 grid. ranx's float test sum(w) == 1.0 keeps 62:
    # .2 + .7 + .1 == 1.0000000000000002, so it never tries (.2, .7, .1).
    grid = _simplex_grid(3, 0.1)
    assert len(grid) == 66
    assert (0.2, 0.7, 0.1) in grid


@pytest.mark.parametrize("method", CAME_METHODS)
def test_fuse_dispatches_came_methods(method):
    params = {"weights": [1.0, 1.0]} if method == "linear" else None
    fused = fuse([A, B], method, params=params)
    assert fused["q1"].keys() == {"d1", "d2", "d3", "d4"}
    if method in ("came_sum", "linear"):
        assert fused == came_sum([A, B])
    with pytest.raises(ValueError, match="norm=None"):
        fuse([A, B], method, norm="min-max", params=params)


def test_top_k_truncation():
    assert fuse([A, B], "rrf", k=2)["q1"].keys() == {"d2", "d1"}
    assert fuse([A, B], "combsum", norm="min-max", k=1)["q1"] == pytest.approx({"d2": 1.5})
    assert came_sum([A, B, C], k=2)["q1"] == pytest.approx({"d3": 11.1, "d1": 8.1})
    assert fuse([A, B], "sum_rr", k=3)["q1"].keys() == {"d1", "d2", "d4"}
