"""Fusion through the library (:mod:`pyserini_moe.search.fusion`): tuning with nothing to
tune or trec_eval's metric names, normalisation for rrf, and weights that overflow."""

from __future__ import annotations

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.search.fusion import optimize_weights


@pytest.mark.parametrize("qrels", [{"q9": {"d1": 1}}, {}, {"q1": {"d1": 0}},
                                   {"q1": {"d9": 1}}])
def test_wsum_tuning_never_reaches_ranx_with_nothing_to_tune(qrels) -> None:
    """Through the library too: no judged query in the runs, no qrels, nothing judged relevant,
    nothing relevant retrieved: one UserError, not ranx's ValueError."""
    runs = [{"q1": {"d1": 1.0, "d2": 0.5}}, {"q1": {"d2": 1.0, "d1": 0.2}}]
    for method in ("wsum", "linear"):
        with pytest.raises(UserError):
            optimize_weights(runs, qrels, method)


# --- tuning with trec_eval's metric names ---------------------------------------------------------


def test_optimize_weights_reads_a_trec_eval_name_as_its_measure(runs) -> None:
    from pyserini_moe.data.topics import load_qrels
    from pyserini_moe.runs import read_trec_run

    dev = [read_trec_run(runs / "dev-d.trec"), read_trec_run(runs / "dev-b.trec")]
    qrels = load_qrels(str(runs / "qrels.txt"))
    assert (optimize_weights(dev, qrels, "wsum", "ndcg_cut.10")
            == optimize_weights(dev, qrels, "wsum", "ndcg@10"))


def test_the_library_fusion_refuses_a_normalisation_for_rrf() -> None:
    """Through the library too: ranx's borda before rrf scrambled the ranking."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.fusion import fuse

    runs = [{"q": {"a": 3.0, "b": 2.0}}, {"q": {"a": 1.0, "c": 0.5}}]
    assert next(iter(fuse(runs, "rrf")["q"])) == "a"
    with pytest.raises(UserError, match="^rrf fuses ranks, not scores: pass norm=None, not "
                                        "'borda'$"):
        fuse(runs, "rrf", norm="borda")


@pytest.mark.parametrize("method", ["wsum", "linear"])
def test_weights_that_overflow_the_fused_scores_are_refused(method) -> None:
    """Weights of 1e308 gave every document the score inf, ranked by docid."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.fusion import fuse

    runs = [{"q": {"a": 3.0, "b": 2.0}}, {"q": {"a": 1.0, "c": 0.5}}]
    assert fuse(runs, method, params={"weights": [1.0, 2.0]})["q"]
    with pytest.raises(UserError, match=f"^{method}: the fused scores of query 'q' are not "
                                        "finite"):
        fuse(runs, method, params={"weights": [1e308, 1e308]})
