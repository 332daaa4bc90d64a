"""The ``convert`` command (:mod:`pyserini_moe.cli.convert`) refuses an output named for
another format than the one it writes."""

from __future__ import annotations

import pytest

from pyserini_moe.cli import convert as convert_cli

# --- convert, an output named for JSON ------------------------------------------------------------


@pytest.mark.parametrize("what, name, usual", [("--topics", "t.jsonl", "t.tsv"),
                                               ("--topics", "t.json.gz", "t.tsv.gz"),
                                               ("--qrels", "q.jsonl", "q.txt")])
def test_convert_refuses_an_output_named_for_json(two_runs, capsys, what, name, usual, error_line) -> None:
    (two_runs / "topics.tsv").write_text("q1\tcat\n")
    source = str(two_runs / ("topics.tsv" if what == "--topics" else "qrels.txt"))
    error = error_line(convert_cli.main, [what, source, "--output", str(two_runs / name)], capsys)
    assert error.startswith(f"error: --output {two_runs / name}: convert writes ")
    assert error.endswith(f", not JSON; name it {two_runs / usual}")
    assert not (two_runs / name).exists()


# --- outputs named for another format -------------------------------------------------------------


@pytest.mark.parametrize("what, name, meaning, usual", [
    ("--qrels", "q.tsv", "tab-separated values", "q.txt"),
    ("--qrels", "q.trec.gz", "a TREC run", "q.txt.gz"),
    ("--topics", "t.trec", "a TREC run", "t.tsv"),
    ("--topics", "t.csv", "comma-separated values", "t.tsv")])
def test_convert_refuses_an_output_named_for_another_format(run_files, capsys, what, name, meaning,
                                                            usual, error_line) -> None:
    (run_files / "topics.tsv").write_text("q1\tcat\n")
    source = str(run_files / ("topics.tsv" if what == "--topics" else "qrels.txt"))
    error = error_line(convert_cli.main, [what, source, "--output", str(run_files / name)], capsys)
    assert error.startswith(f"error: --output {run_files / name}: convert writes ")
    assert error.endswith(f", not {meaning}; name it {run_files / usual}")
    assert not (run_files / name).exists()
