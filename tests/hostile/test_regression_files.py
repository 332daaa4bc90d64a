"""Hostile input to the regression runner: values that print the same must pass, and what a user
writes in YAML the way YAML 1.1 reads it must not be refused."""

from __future__ import annotations

from pathlib import Path

import yaml

from pyserini_moe.lab.regress import DEFAULT_TOLERANCE, load_regression, run_regression

QRELS = "q1 0 d1 1\nq2 0 d2 1\n"
RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"  # MRR@10 0.75


def _file(tmp_path: Path, expected: float, **tolerance: float) -> Path:
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.trec").write_text(RUN)
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump({"name": "r", "conditions": [{
        "name": "c", "run": str(tmp_path / "run.trec"), "qrels": str(tmp_path / "qrels.txt"),
        "metrics": {"mrr@10": expected}, "source": "hand", **tolerance}]}))
    return path


def test_a_metric_without_tolerance_passes_when_it_prints_the_same(tmp_path: Path) -> None:
    """0.75 measured against 0.74996 written: both print 0.7500; before, tolerance 0 failed it."""
    reg = load_regression(_file(tmp_path, 0.74996))
    rows, _ = run_regression(reg, tmp_path / "work")
    assert [r.status for r in rows] == ["OK"] and rows[0].tolerance == DEFAULT_TOLERANCE
    reg = load_regression(_file(tmp_path, 0.7499))  # prints differently: still a failure
    assert [r.status for r in run_regression(reg, tmp_path / "work")[0]] == ["FAIL"]


def test_an_explicit_zero_tolerance_is_kept(tmp_path: Path) -> None:
    reg = load_regression(_file(tmp_path, 0.74996, tolerance=0.0))
    assert [r.status for r in run_regression(reg, tmp_path / "work")[0]] == ["FAIL"]


def test_a_step_s_own_braces_are_kept(tmp_path: Path, capsys) -> None:
    """awk's ``{print $1}`` crashed the runner with KeyError (str.format), dry run included; only
    the known placeholders ({work} here) are filled."""
    path = _file(tmp_path, 0.75)
    doc = yaml.safe_load(path.read_text())
    ids = tmp_path / "work" / "ids.txt"
    doc["conditions"][0]["steps"] = [
        f"""awk '{{print $1 > "{{work}}/ids.txt"}}' {tmp_path / 'run.trec'}"""]
    path.write_text(yaml.safe_dump(doc))
    reg = load_regression(path)
    run_regression(reg, tmp_path / "work", dry_run=True)
    assert f"""$ awk '{{print $1 > "{tmp_path / 'work'}/ids.txt"}}' """ in capsys.readouterr().out
    assert not ids.exists()
    rows, _ = run_regression(reg, tmp_path / "work")
    assert [r.status for r in rows] == ["OK"]
    assert ids.read_text() == "q1\nq1\nq2\nq2\n"
