"""Hostile input to ``python -m pyserini_moe.fuse``: an empty run is one error line, exit 2, and
no output file, whatever the method."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main


@pytest.mark.parametrize("method", ["rrf", "came_sum", "norm_max", "hybrid", "combsum"])
def test_an_empty_run_is_refused(tmp_path: Path, capsys, method: str) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    (tmp_path / "empty.trec").write_text("\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "empty.trec"),
                                "--method", method, "--output", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == (f"error: {tmp_path / 'empty.trec'}: the run is empty: "
                                       "nothing to fuse (did its search fail?)\n")


def test_output_directory_through_the_real_command(tmp_path: Path) -> None:
    """The user's report: --output naming a folder deleted it. Now argparse refuses it."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "keep.trec").write_text("precious")
    proc = subprocess.run([sys.executable, "-m", "pyserini_moe.fuse", "--runs",
                           str(tmp_path / "a.trec"), str(tmp_path / "a.trec"), "--method", "rrf",
                           "--output", str(runs)], capture_output=True, text=True)
    assert proc.returncode == 2 and "is a directory" in proc.stderr.splitlines()[-1]
    assert (runs / "keep.trec").read_text() == "precious"


def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\n")
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(tmp_path / "a.trec")])
    assert code == 2 and "is also an input of this command" in capsys.readouterr().err
    assert (tmp_path / "a.trec").read_text() == "q1 Q0 d1 1 3.0 t\n"


def test_runs_over_different_queries_are_fused_with_one_warning(tmp_path: Path, capsys) -> None:
    """Issue 39: runs of different query sets (another split, a failed search) fused silently."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\nq3 Q0 d1 1 2.0 t\nq4 Q0 d1 1 2.0 t\n")
    out = tmp_path / "fused.trec"
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"warning: the runs hold different queries ({tmp_path / 'a.trec'}: 2, "
                        f"{tmp_path / 'b.trec'}: 3; 4 in all); a query missing from a run is "
                        "fused from the others"]
    assert {line.split()[0] for line in out.read_text().splitlines()} == {"q1", "q2", "q3", "q4"}
    (tmp_path / "c.trec").write_text("q1 Q0 d3 1 1.0 t\nq2 Q0 d3 1 1.0 t\n")
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "c.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err  # the same queries: nothing to say


@pytest.mark.parametrize("method, extra, flags", [
    ("rrf", ["--weights", "1", "2"], "--weights"),                       # F06
    ("combsum", ["--rrf-k", "10"], "--rrf-k"),                           # F07
    ("came_sum", ["--alpha", "0.5", "--weight-on-dense"], "--alpha, --weight-on-dense"),
    ("hybrid", ["--norm", "min-max"], "--norm"),
    ("wsum", ["--hybrid-normalize", "--weights", "1", "1"], "--hybrid-normalize"),
])
def test_a_setting_the_method_ignores_is_refused(tmp_path: Path, capsys, method, extra,
                                                 flags) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "a.trec"),
                                "--method", method, "--output", str(out), *extra])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == f"error: --method {method} does not use {flags}\n"


@pytest.mark.parametrize("weights, message", [
    (["1", "-1"], "--weights must be >= 0 and not all 0, got [1.0, -1.0]"),  # F08
    (["0", "0"], "--weights must be >= 0 and not all 0, got [0.0, 0.0]"),    # F09
])
def test_negative_or_all_zero_weights_are_refused(tmp_path: Path, capsys, weights,
                                                  message) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "a.trec"),
                                "--method", "wsum", "--weights", *weights, "--output", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == f"error: {message}\n"


def test_weights_and_their_tuning_are_not_both_taken(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    a = str(tmp_path / "a.trec")
    code = run_main(fuse.main, ["--runs", a, a, "--method", "wsum", "--weights", "1", "1",
                                "--dev-runs", a, a, "--dev-qrels", str(tmp_path / "qrels.txt"),
                                "--output", str(tmp_path / "f.trec")])
    assert code == 2
    assert "--weights or --dev-runs (which tunes the weights), not both" in capsys.readouterr().err


def test_the_defaults_still_apply(tmp_path: Path) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\nq1 Q0 d1 2 2.0 t\n")
    out = tmp_path / "f.trec"
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    scores = [float(line.split()[4]) for line in out.read_text().splitlines()]
    assert scores == pytest.approx([1 / 61 + 1 / 62] * 2, rel=1e-4)  # k = 60
