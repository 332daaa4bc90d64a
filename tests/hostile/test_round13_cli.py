"""Hostile pass 13: the command-line cases of the package's own entry points (H13-59, H13-81,
H13-103)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.cli import regress as regress_cli
from pyserini_moe.cli import search as search_cli

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_command_names_the_nearest_one() -> None:
    """``python -m pyserini_moe encode_queries``: the command is spelt encode-queries (H13-103)."""
    done = subprocess.run([sys.executable, "-m", "pyserini_moe", "encode_queries"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown command 'encode_queries' (did you mean 'encode-queries'?)" in done.stderr


def test_a_dry_run_that_would_evaluate_is_refused(error_line, capsys) -> None:
    """``--dry-run --evaluate-only``: the second flag was silently ignored (H13-59)."""
    line = error_line(regress_cli.main, [str(ROOT / "regressions" / "came-protocol.yaml"),
                                         "--dry-run", "--evaluate-only"], capsys)
    assert "--dry-run prints the plan and evaluates nothing" in line


def test_an_empty_run_tag_is_refused_not_replaced(model_index_run, tmp_path, capsys) -> None:
    """``--run-tag ""`` wrote the default tag without a word (H13-81)."""
    from pyserini_moe.cli import run_main

    ws = model_index_run(tmp_path)
    assert run_main(search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]),
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(tmp_path / "r.trec"), "--run-tag", "",
                                      "--device", "cpu", "--quiet"]) == 2
    assert "error: run tag ''" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "r.trec").exists()


@pytest.mark.parametrize("tag", ["mine"])
def test_a_given_run_tag_is_written(model_index_run, tmp_path, tag) -> None:
    ws = model_index_run(tmp_path)
    out = tmp_path / "r.trec"
    assert search_cli.main(["--retriever", "dense", "--index", str(ws["index"]), "--topics",
                            f"{ws['corpus']}:test", "--output", str(out), "--run-tag", tag,
                            "--device", "cpu", "--quiet"]) == 0
    assert {line.split()[-1] for line in out.read_text().splitlines()} == {tag}


def test_a_beir_qrels_file_given_as_a_run_says_so(tmp_path) -> None:
    """``eval --run qrels.tsv --qrels run.trec``: the header was blamed as a rank (H13-101)."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.runs import read_trec_run

    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    with pytest.raises(UserError, match=r"looks like a BEIR qrels file, not a run \(--run and "
                                        r"--qrels swapped\?\)"):
        read_trec_run(qrels)
