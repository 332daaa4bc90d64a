"""``python -m pyserini_moe.eval``: tables, comparison, trec_eval column, outputs, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.eval.__main__ import main

QRELS = "q1 0 d1 2\nq1 0 d2 1\nq1 0 d3 0\nq2 0 d4 1\nq3 0 d5 1\n"
# q1: d2 at rank 2, d1 at rank 3; q2: d4 at rank 1; q3 missing. MRR@10 = (1/2 + 1) / 3 = 0.5.
RUN = ("q1 Q0 d3 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq1 Q0 d1 3 1.0 t\n"
       "q2 Q0 d4 1 1.0 t\nq2 Q0 d8 2 0.5 t\n")
WORSE = "q1 Q0 d9 1 1.0 t\nq2 Q0 d8 1 1.0 t\n"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "good.trec").write_text(RUN)
    (tmp_path / "worse.trec").write_text(WORSE)
    return tmp_path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyserini_moe.eval", *args],
                          capture_output=True, text=True, timeout=120)


def test_help_explains_every_flag():
    proc = cli("--help")
    assert proc.returncode == 0
    for flag in ("--run", "--qrels", "--metrics", "--baseline", "--stat-test", "--max-p",
                 "--trec-eval", "--per-query", "--output", "--format"):
        assert flag in proc.stdout
    assert "ndcg@k" in proc.stdout and "fisher" in proc.stdout


def test_missing_run_file_exits_2_naming_it(files):
    proc = cli("--run", str(files / "nope.trec"), "--qrels", str(files / "qrels.txt"))
    assert proc.returncode == 2
    assert "nope.trec" in proc.stderr and "Traceback" not in proc.stderr


def test_single_run_prints_metric_table(files, capsys):
    assert main(["--run", str(files / "good.trec"), "--qrels", str(files / "qrels.txt"),
                 "--metrics", "mrr@10", "recall@100"]) == 0
    out = capsys.readouterr().out
    assert "3 queries" in out
    assert "| metric     | good.trec |" in out
    assert "| mrr@10     |    0.5000 |" in out
    assert "| recall@100 |    0.6667 |" in out  # (1 + 1 + 0) / 3: d3, judged 0, is not relevant


def test_outputs_written(files, capsys):
    args = ["--run", str(files / "good.trec"), str(files / "worse.trec"),
            "--qrels", str(files / "qrels.txt"), "--metrics", "mrr@10", "map",
            "--output", str(files / "out" / "res.json"), "--per-query", str(files / "pq.tsv")]
    assert main(args) == 0
    result = json.loads((files / "out" / "res.json").read_text())
    assert result["runs"]["good.trec"]["metrics"]["mrr@10"] == pytest.approx(0.5)
    assert result["comparison"]["baseline"] == "good.trec"
    assert set(result["comparison"]["p_values"]) == {"worse.trec"}
    lines = (files / "pq.tsv").read_text().splitlines()
    assert lines[0] == "run\tqid\tmrr@10\tmap"
    assert "good.trec\tq3\t0.000000\t0.000000" in lines and len(lines) == 1 + 2 * 3
    assert not list(files.glob(".*.tmp-*")) and not list((files / "out").glob(".*.tmp-*"))


def test_several_runs_compare_against_chosen_baseline(files, capsys):
    assert main(["--run", str(files / "good.trec"), str(files / "worse.trec"),
                 "--qrels", str(files / "qrels.txt"), "--baseline", "worse.trec",
                 "--stat-test", "fisher", "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert "worse.trec (baseline)" in out and "Fisher's randomization test" in out
    assert "(p=" in out and "ndcg@10" in out and "recall@1000" in out


def test_trec_eval_column(files, capsys):
    assert main(["--run", str(files / "good.trec"), "--qrels", str(files / "qrels.txt"),
                 "--metrics", "ndcg@10", "mrr@10", "--trec-eval"]) == 0
    out = capsys.readouterr().out
    assert "trec_eval" in out and "abs diff" in out
    assert "| mrr@10  | 0.5000 |    0.5000 |   0.0000 |" in out


@pytest.mark.parametrize("args, message", [
    (["--metrics", "ndcg@ten"], "unknown metric 'ndcg@ten'"),
    (["--baseline", "other.trec"], "--baseline 'other.trec'"),
    (["--max-p", "1.5"], "--max-p"),
])
def test_bad_arguments_exit_2(files, capsys, args, message):
    base = ["--run", str(files / "good.trec"), "--qrels", str(files / "qrels.txt")]
    assert main([*base, *args]) == 2
    assert message in capsys.readouterr().err


def test_malformed_run_exits_2(files, capsys):
    (files / "bad.trec").write_text("q1 Q0 d1 1 high t\n")
    assert main(["--run", str(files / "bad.trec"), "--qrels", str(files / "qrels.txt")]) == 2
    assert "bad.trec:1" in capsys.readouterr().err
