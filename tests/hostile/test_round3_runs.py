"""Hostile pass 3 (work/hostile3/report.md), runs and evaluation: run files read as carefully as
every other input (BOM, gzip, bytes that are not UTF-8), trec_eval handed what ranx reads, outputs
and run tags that would lose or break what is written, regression steps read as a shell would."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.lab.regress import expand, run_step
from pyserini_moe.runs import read_trec_run, write_trec_run

BOM = "\ufeff".encode()
# q0's judged document is at rank 1, q1's is missed: nDCG@10 0.5.
RUN = "q0 Q0 d3 1 3.0 t\nq0 Q0 d21 2 2.0 t\nq1 Q0 d26 1 1.0 t\n"
QRELS = "q0 0 d3 1\nq1 0 d1 1\n"


@pytest.fixture
def f(tmp_path: Path) -> Path:
    """A clean run and qrels, and the same run with a BOM and gzipped."""
    (tmp_path / "run.trec").write_text(RUN)
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "bom.trec").write_bytes(BOM + RUN.encode())
    (tmp_path / "run.trec.gz").write_bytes(gzip.compress(RUN.encode()))
    return tmp_path


def _ndcg(run: Path, qrels: Path, out: Path) -> dict:
    """``eval``'s JSON results of ``run``."""
    assert run_main(eval_cli.main, ["--run", str(run), "--qrels", str(qrels), "--metrics",
                                    "ndcg@10", "--output", str(out)]) == 0
    return json.loads(out.read_text())["runs"]


def _error(capsys: pytest.CaptureFixture) -> str:
    """The one line a refused command prints."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _trec_eval_agrees(capsys: pytest.CaptureFixture, runs: list[Path], qrels: Path,
                      out: Path) -> None:
    """``eval --trec-eval`` of ``runs``: ranx and trec_eval both score 0.5, no "differs"."""
    assert run_main(eval_cli.main, ["--run", *map(str, runs), "--qrels", str(qrels), "--metrics",
                                    "ndcg@10", "--trec-eval", "--output", str(out)]) == 0
    assert "differs" not in capsys.readouterr().err
    for result in json.loads(out.read_text())["runs"].values():
        assert result["metrics"]["ndcg@10"] == pytest.approx(0.5)
        assert result["trec_eval"]["ndcg@10"] == pytest.approx(0.5)


def test_trec_eval_reads_a_bom_qrels_file_as_ranx_does(f, capsys) -> None:  # H05
    (f / "qrels-bom.txt").write_bytes(BOM + QRELS.encode())
    _trec_eval_agrees(capsys, [f / "run.trec"], f / "qrels-bom.txt", f / "o.json")


def test_trec_eval_reads_bom_and_gzipped_runs_as_ranx_does(f, capsys) -> None:  # H06, H08
    _trec_eval_agrees(capsys, [f / "bom.trec", f / "run.trec.gz"], f / "qrels.txt", f / "o.json")


def test_a_bom_at_the_start_of_a_run_is_not_part_of_the_first_query_id(f, capsys) -> None:  # H06
    assert read_trec_run(f / "bom.trec") == read_trec_run(f / "run.trec")
    runs = _ndcg(f / "bom.trec", f / "qrels.txt", f / "o.json")
    assert runs["bom.trec"]["metrics"]["ndcg@10"] == pytest.approx(0.5)


def test_a_run_with_a_byte_that_is_not_utf8_is_one_error_naming_the_line(f, capsys) -> None:  # H07
    (f / "latin1.trec").write_bytes(RUN.encode() + b"q1 Q0 d\xe99 4 0.5 t\n")
    assert run_main(eval_cli.main, ["--run", str(f / "latin1.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 2
    assert _error(capsys).startswith(f"error: {f / 'latin1.trec'}:4: not valid UTF-8")
    assert run_main(fuse_cli.main, ["--runs", str(f / "latin1.trec"), str(f / "run.trec"),
                                    "--method", "rrf", "--output", str(f / "fused.trec")]) == 2
    assert _error(capsys).startswith(f"error: {f / 'latin1.trec'}:4: not valid UTF-8")
    assert not (f / "fused.trec").exists()


def test_a_gzipped_run_is_read_like_its_plain_text(f, capsys) -> None:  # H08
    assert read_trec_run(f / "run.trec.gz") == read_trec_run(f / "run.trec")
    runs = _ndcg(f / "run.trec.gz", f / "qrels.txt", f / "o.json")
    assert runs["run.trec.gz"]["metrics"]["ndcg@10"] == pytest.approx(0.5)
    assert run_main(fuse_cli.main, ["--runs", str(f / "run.trec.gz"), str(f / "run.trec"),
                                    "--method", "rrf", "--output", str(f / "fused.trec")]) == 0
    assert read_trec_run(f / "fused.trec").keys() == {"q0", "q1"}


def test_a_two_column_run_is_told_both_forms_a_run_can_take(f, capsys) -> None:  # H39
    (f / "two.trec").write_text("q0 d3\n")
    assert run_main(eval_cli.main, ["--run", str(f / "two.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 2
    assert _error(capsys) == (f"error: {f / 'two.trec'}:1: expected 6 columns (TREC: qid Q0 "
                              "docid rank score tag) or 3 (MS MARCO: qid docid rank), got 2")


@pytest.mark.parametrize("spelling", ["out.txt", "sub/../out.txt"])
def test_eval_outputs_naming_one_file_are_refused(f, capsys, monkeypatch, spelling) -> None:  # H43
    monkeypatch.chdir(f)
    (f / "sub").mkdir()
    assert run_main(eval_cli.main, ["--run", "run.trec", "--qrels", "qrels.txt", "--output",
                                    "out.txt", "--table", spelling, "--per-query", "out.txt"]) == 2
    assert "give each output its own path" in _error(capsys)
    assert not (f / "out.txt").exists()


def test_a_run_tag_with_whitespace_is_refused_before_searching(f, capsys) -> None:  # H73
    with pytest.raises(UserError, match="run tag 'my tag'"):
        write_trec_run(read_trec_run(f / "run.trec"), f / "tagged.trec", tag="my tag")
    assert not (f / "tagged.trec").exists()
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", str(f / "no-index"),
                                      "--topics", str(f / "no-topics.tsv"), "--output",
                                      str(f / "tagged.trec"), "--run-tag", "my tag"]) == 2
    assert _error(capsys) == ("error: run tag 'my tag': the last column of a TREC run is one "
                              "word, without whitespace (e.g. my_tag)")


def test_a_step_leaves_single_quoted_variables_to_its_program(tmp_path, monkeypatch) -> None:
    """H94: a shell expands ``$HOME`` bare and in double quotes, not in single quotes."""
    monkeypatch.setenv("HOME", "/home/x")
    monkeypatch.setenv("USER", "alice")
    step = """echo 'cost: $HOME and ${USER}x' "$HOME" $USER \\$HOME"""
    assert expand(step, tmp_path, quote=True) == \
        """echo 'cost: $HOME and ${USER}x' "/home/x" alice \\$HOME"""
    assert expand("$HOME/it's.trec", tmp_path) == "/home/x/it's.trec"  # a path: no shell quoting


def test_a_step_written_for_a_shell_says_steps_run_without_one(tmp_path) -> None:  # H93
    with pytest.raises(UserError, match=r"step program 'D=/root;' not found; steps run without a "
                                        r"shell \(no pipes, ';', '>' or VAR=value assignments\)"):
        run_step("D=/root; echo hi > {work}/x.txt", tmp_path, dry_run=False)


def test_trec_eval_metric_names_are_read_as_the_tools_own(f, capsys) -> None:  # H48
    out = f / "o.json"
    names = ["ndcg_cut.10", "P.10", "recall.100", "map", "recip_rank"]
    own = ["ndcg@10", "precision@10", "recall@100", "map", "mrr"]
    values = []
    for metrics in (names, own):
        assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                        str(f / "qrels.txt"), "--metrics", *metrics,
                                        "--output", str(out)]) == 0
        values.append(list(json.loads(out.read_text())["runs"]["run.trec"]["metrics"].values()))
    assert values[0] == values[1] and values[0][0] == pytest.approx(0.5)
