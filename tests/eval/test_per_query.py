"""Kept per-query values: written once, read back in the qrels' order, refused when they would
give a mean of something else."""

from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.eval.per_query import is_per_query_file, read_per_query, write_per_query

QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}}
SCORES = {"ndcg@10": {"q3": 0.25, "q1": 1.0, "q2": 0.0},
          "recall@100": {"q3": 1.0, "q1": 1.0, "q2": 0.0}}


@pytest.mark.parametrize("name", ["kept.tsv", "kept.tsv.gz"])
def test_written_values_read_back_in_the_qrels_order(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_per_query(path, {"moe": SCORES}, ["ndcg@10", "recall@100"])
    assert is_per_query_file(path)
    values = read_per_query(path, QRELS, ["recall@100", "ndcg@10"])
    assert list(values["ndcg@10"]) == ["q1", "q2", "q3"]
    assert values == {m: {q: SCORES[m][q] for q in QRELS} for m in ("recall@100", "ndcg@10")}


def test_a_run_is_not_a_per_query_file(tmp_path: Path) -> None:
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    (tmp_path / "header-only.tsv").write_text("run\tqid\n")
    assert not is_per_query_file(tmp_path / "run.trec")
    assert not is_per_query_file(tmp_path / "header-only.tsv")
    assert not is_per_query_file(tmp_path / "missing.tsv")


@pytest.mark.parametrize("text, message", [
    ("run\tqid\tndcg@10\nm\tq1\t1\nm\tq2\t0\nm\tq3\t0.5\n", "not of recall@100"),
    ("run\tqid\tndcg@10\trecall@100\na\tq1\t1\t1\nb\tq2\t0\t0\na\tq3\t1\t1\n", "of 2 runs"),
    ("run\tqid\tndcg@10\trecall@100\nm\tq1\t1\t1\nm\tq2\t0\t0\n", "kept for other qrels"),
    ("run\tqid\tndcg@10\trecall@100\nm\tq1\t1\t1\nm\tq2\tnan\t0\nm\tq3\t1\t1\n",
     ":3: ndcg@10 'nan' is not a number"),
    ("run\tqid\tndcg@10\trecall@100\nm\tq1\t1\n", ":2: expected 4 tab-separated fields"),
])
def test_values_of_something_else_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "kept.tsv"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        read_per_query(path, QRELS, ["ndcg@10", "recall@100"])
