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
    with pytest.raises(UserError, match=r"looks like a BEIR qrels file \(query-id corpus-id "
                                        r"score\), not a run"):
        read_trec_run(qrels)


@pytest.mark.parametrize("method", ["combsum", "hybrid", "came_sum"])
def test_fuse_refuses_a_rank_only_run_for_a_method_that_adds_scores(tmp_path, method, error_line,
                                                                    capsys) -> None:
    """An MS MARCO run's 1/rank was added to another run's BM25 scores (H14-69)."""
    from pyserini_moe import fuse as fuse_cli

    (tmp_path / "a.tsv").write_text("q1\td1\t1\nq1\td2\t2\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.1 bm25\nq1 Q0 d1 2 2.0 bm25\n")
    argv = ["--runs", str(tmp_path / "a.tsv"), str(tmp_path / "b.trec"), "--output",
            str(tmp_path / "f.trec")]
    line = error_line(fuse_cli.main, [*argv, "--method", method], capsys)
    assert "is an MS MARCO run (qid docid rank: no scores)" in line
    assert not (tmp_path / "f.trec").exists()
    assert fuse_cli.main([*argv, "--method", "rrf"]) == 0  # ranks are all rrf reads


def test_fuse_refuses_an_empty_run_tag(tmp_path, error_line, capsys) -> None:
    """``fuse --run-tag ''`` was replaced by fuse-METHOD (H14-32)."""
    from pyserini_moe import fuse as fuse_cli

    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d1 1 3.0 {name}\n")
    line = error_line(fuse_cli.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                      "--output", str(tmp_path / "f.trec"), "--run-tag", ""],
                      capsys)
    assert "run tag ''" in line


def test_a_scale_that_leaves_no_file_is_refused(error_line, capsys) -> None:
    """``regress --scale paper`` on local files ran nothing and exited 0 in silence (H14-36)."""
    line = error_line(regress_cli.main, [str(ROOT / "regressions" / "came-protocol.yaml"),
                                         "--scale", "paper", "--dry-run"], capsys)
    assert "--scale paper leaves none of the files given (they are local-scale)" in line
