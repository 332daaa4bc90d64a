"""Hostile input to evaluation and hybrid weights: nothing silently partial, nothing nonsensical
accepted, messages that say what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.eval import __main__ as eval_cli

RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n"


def _files(tmp_path: Path) -> Path:
    (tmp_path / "run.trec").write_text(RUN)
    (tmp_path / "empty.trec").write_text("")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "headerless.tsv").write_text("q1\td1\t1\n")
    return tmp_path


def _last(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_empty_run_is_not_scored_zero(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "empty.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 2
    assert _last(capsys) == (f"error: {f / 'empty.trec'}: the run is empty: nothing to evaluate "
                             "(did its search fail?)")


def test_judged_queries_missing_from_the_run_are_said(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 0
    err = capsys.readouterr().err
    assert "warning: run.trec: 1 of 2 judged queries have no results (e.g. q2); they count as 0" in err


def test_a_headerless_beir_qrels_file_is_named_for_what_it_is(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "headerless.tsv")]) == 2
    assert "a BEIR qrels TSV starts with its header line" in _last(capsys)


@pytest.mark.parametrize("alpha", ["-1", "-0.5"])
def test_a_negative_hybrid_weight_is_refused(tmp_path, capsys, alpha) -> None:
    f = _files(tmp_path)
    code = run_main(fuse.main, ["--runs", str(f / "run.trec"), str(f / "run.trec"), "--method",
                                "hybrid", "--alpha", alpha, "--output", str(f / "h.trec")])
    assert code == 2 and "--alpha must be >= 0" in _last(capsys)
    assert not (f / "h.trec").exists()


def test_an_eval_output_naming_its_run_is_refused(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    code = run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels", str(f / "qrels.txt"),
                                    "--table", str(f / "run.trec")])
    assert code == 2 and "is also an input of this command" in _last(capsys)
    assert (f / "run.trec").read_text() == RUN


def test_a_data_variable_naming_a_file_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    """Issue 39: PYSERINI_MOE_DATA naming a file was ignored without a word (a collection name
    then resolved elsewhere, or was downloaded)."""
    f = _files(tmp_path)
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(f / "qrels.txt"))
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    "scifact:test"]) == 2
    assert capsys.readouterr().err == (f"error: PYSERINI_MOE_DATA={f / 'qrels.txt'} is a file, "
                                       "not a folder: point it at the folder that holds the "
                                       "collections\n")
