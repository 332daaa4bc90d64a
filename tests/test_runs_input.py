"""Reading and writing runs (:mod:`pyserini_moe.runs`): BOMs, gzip, bytes that are not
UTF-8, comment lines, ranks given twice, BEIR qrels given as a run, run tags with
whitespace, and outputs that are not runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.runs import RunFormatError, read_trec_run, write_trec_run
from tests.helpers import RUN_HALF, only_error

RUN = "a Q0 d1 1 9.0 m\n"


def test_a_beir_qrels_file_given_as_a_run_says_so(tmp_path) -> None:
    """``eval --run qrels.tsv --qrels run.trec``: the header was blamed as a rank."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.runs import read_trec_run

    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(UserError, match=r"looks like a BEIR qrels file \(query-id corpus-id "
                                        r"score\), not a run"):
        read_trec_run(qrels)


# --- runs: a rank twice in an MS MARCO run --------------------------------------------------------


@pytest.mark.parametrize("text", ["q1\td1\t1\nq1\td2\t1\n", "q1 d1 1\nq1 d2 2\nq1 d3 02\n"],
                         ids=["headerless-qrels", "duplicate-rank"])
def test_a_rank_given_twice_for_a_query_is_refused(tmp_path, text) -> None:
    run = tmp_path / "run.tsv"
    run.write_text(text)
    with pytest.raises(RunFormatError, match=r"run.tsv:\d: rank 0?[12] is given twice for query "
                                             r"'q1': a run ranks each document once \(a qrels"):
        read_trec_run(run)


def test_gapped_ranks_and_one_rank_in_two_queries_are_read(tmp_path) -> None:
    """A run filtered after it was written keeps its gaps; each query has its own rank 1."""
    run = tmp_path / "run.tsv"
    run.write_text("q1\td1\t1\nq1\td2\t3\nq2\td1\t1\n")
    assert read_trec_run(run) == {"q1": {"d1": 1.0, "d2": 1 / 3}, "q2": {"d1": 1.0}}


def test_a_comment_line_first_in_a_run_is_named(tmp_path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("# bm25 run\nq1 Q0 d1 1 1.0 t\n")
    with pytest.raises(RunFormatError, match=r"run.trec:1: a comment line: a run holds none"):
        read_trec_run(run)


def test_a_comment_line_inside_a_run_is_named(tmp_path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n# the second query\nq2 Q0 d1 1 1.0 t\n")
    with pytest.raises(RunFormatError, match=r"run.trec:2: a comment line: a run holds none"):
        read_trec_run(run)


def _ndcg(run: Path, qrels: Path, out: Path) -> dict:
    """``eval``'s JSON results of ``run``."""
    assert run_main(eval_cli.main, ["--run", str(run), "--qrels", str(qrels), "--metrics",
                                    "ndcg@10", "--output", str(out)]) == 0
    return json.loads(out.read_text())["runs"]


def test_a_bom_at_the_start_of_a_run_is_not_part_of_the_first_query_id(bom_ws, capsys) -> None:
    assert read_trec_run(bom_ws / "bom.trec") == read_trec_run(bom_ws / "run.trec")
    runs = _ndcg(bom_ws / "bom.trec", bom_ws / "qrels.txt", bom_ws / "o.json")
    assert runs["bom.trec"]["metrics"]["ndcg@10"] == pytest.approx(0.5)


def test_a_run_with_a_byte_that_is_not_utf8_is_one_error_naming_the_line(bom_ws, capsys) -> None:
    (bom_ws / "latin1.trec").write_bytes(RUN_HALF.encode() + b"q1 Q0 d\xe99 4 0.5 t\n")
    assert run_main(eval_cli.main, ["--run", str(bom_ws / "latin1.trec"), "--qrels",
                                    str(bom_ws / "qrels.txt")]) == 2
    assert only_error(capsys).startswith(f"error: {bom_ws / 'latin1.trec'}:4: not valid UTF-8")
    assert run_main(fuse_cli.main, ["--runs", str(bom_ws / "latin1.trec"), str(bom_ws / "run.trec"),
                                    "--method", "rrf", "--output", str(bom_ws / "fused.trec")]) == 2
    assert only_error(capsys).startswith(f"error: {bom_ws / 'latin1.trec'}:4: not valid UTF-8")
    assert not (bom_ws / "fused.trec").exists()


def test_a_gzipped_run_is_read_like_its_plain_text(bom_ws, capsys) -> None:
    assert read_trec_run(bom_ws / "run.trec.gz") == read_trec_run(bom_ws / "run.trec")
    runs = _ndcg(bom_ws / "run.trec.gz", bom_ws / "qrels.txt", bom_ws / "o.json")
    assert runs["run.trec.gz"]["metrics"]["ndcg@10"] == pytest.approx(0.5)
    assert run_main(fuse_cli.main, ["--runs", str(bom_ws / "run.trec.gz"), str(bom_ws / "run.trec"),
                                    "--method", "rrf", "--output", str(bom_ws / "fused.trec")]) == 0
    assert read_trec_run(bom_ws / "fused.trec").keys() == {"q0", "q1"}


def test_a_two_column_run_is_told_both_forms_a_run_can_take(bom_ws, capsys) -> None:
    (bom_ws / "two.trec").write_text("q0 d3\n")
    assert run_main(eval_cli.main, ["--run", str(bom_ws / "two.trec"), "--qrels",
                                    str(bom_ws / "qrels.txt")]) == 2
    assert only_error(capsys) == (f"error: {bom_ws / 'two.trec'}:1: expected 6 columns (TREC: qid Q0 "
                                  "docid rank score tag) or 3 (MS MARCO: qid docid rank), got 2")


def test_a_run_tag_with_whitespace_is_refused_before_searching(bom_ws, capsys) -> None:
    with pytest.raises(UserError, match="run tag 'my tag'"):
        write_trec_run(read_trec_run(bom_ws / "run.trec"), bom_ws / "tagged.trec", tag="my tag")
    assert not (bom_ws / "tagged.trec").exists()
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", str(bom_ws / "no-index"),
                                      "--topics", str(bom_ws / "no-topics.tsv"), "--output",
                                      str(bom_ws / "tagged.trec"), "--run-tag", "my tag"]) == 2
    assert only_error(capsys) == ("error: run tag 'my tag': the last column of a TREC run is one "
                                  "word, without whitespace (e.g. my_tag)")


@pytest.mark.parametrize("name, text", [
    ("queries.jsonl", '{"_id": "q0", "text": "x"}\n'),
    ("test.tsv", "query-id\tcorpus-id\tscore\nq0\td0\t1\n"),
    ("qrels.txt", "q0 0 d0 1\n")])
def test_a_run_output_replaces_a_run_but_not_another_file(tmp_path, name, text):
    target = tmp_path / name
    target.write_text(text)
    with pytest.raises(UserError, match="is not a run"):
        write_trec_run({"q0": {"d0": 1.0}}, target)
    assert target.read_text() == text
    earlier = tmp_path / "run.trec"
    earlier.write_text(RUN)
    write_trec_run({"q0": {"d0": 1.0}}, earlier)
    assert read_trec_run(earlier) == {"q0": {"d0": 1.0}}


@pytest.mark.parametrize("run", [{}, {"q1": {}}])
def test_a_run_without_a_hit_is_not_written(run, tmp_path) -> None:
    """Every reader refuses an empty run ("the run is empty"), so the writer does too."""
    with pytest.raises(UserError, match="the run is empty"):
        write_trec_run(run, tmp_path / "r.trec")
    assert not (tmp_path / "r.trec").exists()
