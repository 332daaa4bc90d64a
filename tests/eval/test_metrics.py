"""Metrics: hand-computed values, agreement with trec_eval -c (ties too), tests, DPR accuracy."""

import gzip
import json
import random
from math import log2
from pathlib import Path

import pytest

from pyserini_moe.eval.metrics import (
    DEFAULT_METRICS,
    compare,
    evaluate,
    format_comparison,
    format_table,
    parse_metric,
    per_query,
    topk_accuracy,
    trec_eval,
)
from pyserini_moe.paths import shared_data_root
from pyserini_moe.runs import read_trec_run, write_trec_run

# q1: graded, one judgment-0 row (d3, retrieved first) and a relevant doc never retrieved (d9).
# q3: relevant but missing from the run -> 0. q4: judged only non-relevant -> 0, still counted.
# q5: in the run but not in the qrels -> ignored. So every mean is over 4 queries.
QRELS = {
    "q1": {"d1": 2, "d2": 1, "d3": 0, "d9": 1},
    "q2": {"d4": 1},
    "q3": {"d5": 1},
    "q4": {"d6": 0},
}
RUN = {
    "q1": {"d3": 3.0, "d2": 2.0, "d1": 1.0, "d7": 0.5},
    "q2": {"d8": 1.0, "d4": 0.5},
    "q4": {"d6": 1.0},
    "q5": {"d4": 1.0},
}
# q1 ranks d3 (gain 0), d2 (gain 1), d1 (gain 2); ideal order d1, d2, d9 (gains 2, 1, 1).
Q1_NDCG = (1 / log2(3) + 2 / log2(4)) / (2 + 1 / log2(3) + 1 / log2(4))
EXPECTED = {  # per query q1, q2, q3, q4
    "ndcg@10": [Q1_NDCG, 1 / log2(3), 0, 0],
    "recall@100": [2 / 3, 1, 0, 0],
    "recall@2": [1 / 3, 1, 0, 0],
    "mrr@10": [1 / 2, 1 / 2, 0, 0],
    "mrr@1": [0, 0, 0, 0],
    "map": [(1 / 2 + 2 / 3) / 3, 1 / 2, 0, 0],
    "map@2": [(1 / 2) / 3, 1 / 2, 0, 0],
    "precision@5": [2 / 5, 1 / 5, 0, 0],
}

SCIFACT_QRELS = Path("topics-and-qrels/qrels.beir-v1.0.0-scifact.test.txt")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, rel = line.split()
        qrels.setdefault(qid, {})[docid] = int(rel)
    return qrels


@pytest.fixture(scope="module")
def hand_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("hand")
    qrels = folder / "qrels.txt"
    qrels.write_text("".join(f"{q} 0 {d} {r}\n"
                             for q, docs in QRELS.items() for d, r in docs.items()))
    return write_trec_run(RUN, folder / "run.trec"), qrels


@pytest.mark.parametrize("metric", list(EXPECTED))
def test_hand_computed_per_query(metric):
    values = per_query(RUN, QRELS, metric)
    assert list(values) == ["q1", "q2", "q3", "q4"]
    assert list(values.values()) == pytest.approx(EXPECTED[metric])


def test_means_count_every_qrels_query():
    means = evaluate(RUN, QRELS, list(EXPECTED))
    assert means == pytest.approx({m: sum(v) / 4 for m, v in EXPECTED.items()})
    assert means["ndcg@10"] == pytest.approx((Q1_NDCG + 1 / log2(3)) / 4)


def test_results_keyed_by_given_spelling():
    assert set(evaluate(RUN, QRELS, ["nDCG@10", "MAP"])) == {"nDCG@10", "MAP"}


def test_empty_run_scores_zero():
    assert evaluate({}, QRELS, DEFAULT_METRICS) == {m: 0.0 for m in DEFAULT_METRICS}


def test_ties_are_ranked_by_docid_descending_like_trec_eval():
    tied = {"q": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}}
    assert evaluate(tied, {"q": {"a": 1}}, ["mrr@10"])["mrr@10"] == pytest.approx(1 / 4)
    assert evaluate(tied, {"q": {"d": 1}}, ["mrr@10"])["mrr@10"] == pytest.approx(1.0)


def test_metric_names_map_to_trec_eval():
    assert parse_metric("ndcg@10").trec_measure == "ndcg_cut.10"
    assert parse_metric("ndcg@10").trec_output == "ndcg_cut_10"
    assert parse_metric("recall@1000").trec_measure == "recall.1000"
    assert parse_metric("precision@5").trec_measure == "P.5"
    assert parse_metric("map@100").trec_measure == "map_cut.100"
    assert parse_metric("map").trec_measure == "map"
    mrr = parse_metric("MRR@10")
    assert (mrr.ranx, mrr.trec_measure, mrr.trec_depth) == ("mrr@10", "recip_rank", 10)


@pytest.mark.parametrize("bad", ["ndcg", "ndcg@0", "ndcg@x", "bleu@4", "recall@-1"])
def test_unknown_metric_lists_valid_ones(bad):
    with pytest.raises(ValueError, match=r"unknown metric.*ndcg@k.*recall@k"):
        parse_metric(bad)


def test_trec_eval_agrees_on_hand_example(hand_files):
    run_path, qrels_path = hand_files
    reference = trec_eval(run_path, qrels_path, list(EXPECTED))
    assert reference == pytest.approx(evaluate(RUN, QRELS, list(EXPECTED)), abs=1e-4)


def test_trec_eval_missing_run_file(tmp_path, hand_files):
    with pytest.raises(FileNotFoundError, match="nope.trec"):
        trec_eval(tmp_path / "nope.trec", hand_files[1], ["map"])


def test_tied_run_file_is_scored_in_trec_eval_order(tmp_path):
    """trec_eval orders ties by docid descending whatever the rank column says; write_trec_run
    lists them as they came (as Pyserini writes a searcher's hits), and evaluate() agrees with
    trec_eval."""
    path = write_trec_run({"q": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}}, tmp_path / "tied.trec")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q 0 a 1\n")
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["a", "b", "c", "d"]
    assert trec_eval(path, qrels, ["mrr@10"])["mrr@10"] == pytest.approx(0.25)
    ours = evaluate(read_trec_run(path), {"q": {"a": 1}}, ["mrr@10"])
    assert ours["mrr@10"] == pytest.approx(0.25)


@pytest.fixture(scope="module")
def scifact(tmp_path_factory) -> dict:
    """A deterministic SciFact test run: 1000 random corpus docs per query, relevant docs at seeded
    random ranks (some beyond 1000, so not retrieved), every 20th query left out; and the same
    rankings with scores in blocks of 25 ties."""
    root = shared_data_root()
    if root is None or not (root / SCIFACT_QRELS).is_file():
        pytest.skip("shared SciFact data not available")
    qrels = read_qrels(root / SCIFACT_QRELS)
    with gzip.open(root / "scifact/corpus.jsonl.gz", "rt") as f:
        corpus = sorted({json.loads(line)["_id"] for line in f}
                        | {d for docs in qrels.values() for d in docs})
    rng = random.Random(20240611)
    distinct, tied = {}, {}
    for n, qid in enumerate(sorted(qrels)):
        if n % 20 == 0:
            continue
        relevant = set(qrels[qid])
        ranking = rng.sample([d for d in corpus if d not in relevant], 1000)
        for docid in sorted(relevant):  # mostly near the top, sometimes anywhere (or beyond 1000)
            rank = rng.randrange(1100) if rng.random() < 0.2 else int(rng.expovariate(1 / 15))
            ranking.insert(rank, docid)
        ranking = ranking[:1000]
        distinct[qid] = {d: 100.0 - 0.01 * i for i, d in enumerate(ranking)}
        tied[qid] = {d: float(40 - i // 25) for i, d in enumerate(ranking)}
    distinct["not-a-query"] = {"d": 1.0}
    folder = tmp_path_factory.mktemp("scifact")
    return {"qrels": qrels, "qrels_path": root / SCIFACT_QRELS,
            "distinct": write_trec_run(distinct, folder / "distinct.trec"),
            "tied": write_trec_run(tied, folder / "tied.trec")}


@pytest.mark.parametrize("kind", ["distinct", "tied"])
def test_ranx_matches_trec_eval_on_scifact(scifact, kind):
    metrics = [*DEFAULT_METRICS, "precision@10", "map@100"]
    ours = evaluate(read_trec_run(scifact[kind]), scifact["qrels"], metrics)
    reference = trec_eval(scifact[kind], scifact["qrels_path"], metrics)
    assert ours == pytest.approx(reference, abs=1e-4)
    assert 0.05 < ours["ndcg@10"] < 0.95 and 0 < ours["recall@100"] < ours["recall@1000"] < 1


def synthetic_runs(n: int = 40) -> tuple[dict, dict, dict]:
    """One relevant doc per query: ``good`` ranks it first, ``bad`` 6th to 15th."""
    qrels = {f"q{i}": {"rel": 1} for i in range(n)}
    others = {f"o{j}": 1.0 - j / 100 for j in range(20)}
    good = {q: {"rel": 2.0, **others} for q in qrels}
    bad = {q: {**others, "rel": 1.0 - (4 + i % 10) / 100 - 0.001} for i, q in enumerate(qrels)}
    return qrels, good, bad


def test_compare_clearly_better_run_is_significant():
    qrels, good, bad = synthetic_runs()
    result = compare({"bad": bad, "good": good}, qrels, ["ndcg@10", "mrr@10"])
    assert result.baseline == "bad"
    assert result.means["good"]["mrr@10"] == pytest.approx(1.0)
    assert result.p_values["good"]["ndcg@10"] < 1e-6
    assert result.significant("good", "ndcg@10") and result.marker("good", "mrr@10") == "▲"
    assert result.to_dict()["markers"]["good"]["ndcg@10"] == "▲"
    worse = compare({"good": good, "bad": bad}, qrels, ["ndcg@10"], stat_test="fisher")
    assert worse.marker("bad", "ndcg@10") == "▼"
    table = format_comparison(result)
    assert "bad (baseline)" in table and "▲" in table and "p<0.001" in table


@pytest.mark.parametrize("stat_test", ["student", "fisher"])
def test_compare_identical_runs_p_is_one(stat_test):
    qrels, good, _ = synthetic_runs()
    result = compare({"a": good, "b": dict(good)}, qrels, ["ndcg@10"], stat_test=stat_test)
    assert result.p_values["b"]["ndcg@10"] == 1.0
    assert not result.significant("b", "ndcg@10") and result.marker("b", "ndcg@10") == ""


def test_compare_rejects_bad_arguments():
    qrels, good, bad = synthetic_runs(5)
    with pytest.raises(ValueError, match="baseline 'c'"):
        compare({"a": good, "b": bad}, qrels, ["map"], baseline="c")
    with pytest.raises(ValueError, match="statistical test"):
        compare({"a": good, "b": bad}, qrels, ["map"], stat_test="wilcoxon")
    with pytest.raises(ValueError, match="two runs"):
        compare({"a": good}, qrels, ["map"])


def test_format_table_styles():
    rows = [["bm25", "0.6789"], ["moe", "0.7012"]]
    assert format_table(["run", "ndcg@10"], rows).splitlines() == [
        "| run  | ndcg@10 |", "|:-----|--------:|", "| bm25 |  0.6789 |", "| moe  |  0.7012 |"]
    assert format_table(["run", "ndcg@10"], rows, "plain").splitlines()[2] == "bm25   0.6789"


PASSAGES = {
    "p1": "The capital of France is Paris.",
    "p2": "Berlin is the capital of Germany.",
    "p3": "Nothing useful here.",
}


def test_topk_accuracy_dpr_style():
    run = {"q1": {"p3": 3.0, "p1": 2.0}, "q2": {"p2": 1.0, "p1": 0.5}, "q9": {"p1": 1.0}}
    answers = {"q1": ["paris"], "q2": ["GERMANY"], "q3": ["Rome"]}  # q3 has no results
    assert topk_accuracy(run, answers, PASSAGES, ks=(1, 2)) == pytest.approx(
        {"top1": 1 / 3, "top2": 2 / 3})
    # Token match, not substring: "Pari" is not a token of p1.
    assert topk_accuracy(run, {"q1": ["Pari"]}, PASSAGES.get, ks=(2,)) == {"top2": 0.0}
    assert topk_accuracy(run, {"q1": ["Par.s"]}, PASSAGES, ks=(2,), regex=True) == {"top2": 1.0}
