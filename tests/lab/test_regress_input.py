"""The regression runner (:mod:`pyserini_moe.lab.regress`) as a user meets it: conditions
that need another's output, tolerances, one-seed rows, misspelt keys and placeholders, and
steps read as a shell would read them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from pyserini_moe.errors import UserError
from pyserini_moe.lab.regress import (
    DEFAULT_TOLERANCE,
    REPO_ROOT,
    RegressionSpecError,
    expand,
    load_regression,
    run_regression,
    run_step,
)
from tests.helpers import regression_file

QRELS = "q1 0 d1 1\nq2 0 d2 1\n"
FULL_RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"  # MRR@10 0.75


def test_condition_that_skips_its_training_is_refused_naming_it(two_conditions: Path) -> None:
    reg = load_regression(two_conditions)
    work = two_conditions.parent / "work"
    with pytest.raises(UserError, match=r"--condition search reads .*model\.trec, which train "
                                        r"writes: add --condition train"):
        run_regression(reg, work, only=["search"])
    assert not (work / "run.trec").exists()  # refused before any step ran
    rows, _ = run_regression(reg, work, only=["train", "search"])
    assert [r.status for r in rows] == ["OK", "OK"]
    # once the model is there, the condition runs on its own
    assert [r.status for r in run_regression(reg, work, only=["search"])[0]] == ["OK"]


def test_a_real_file_names_the_training_a_zero_shot_row_needs(tmp_path: Path) -> None:
    reg = load_regression(REPO_ROOT / "regressions" / "taser-protocol.yaml")
    with pytest.raises(UserError, match="add --condition taser-detr-last.scifact.test"):
        run_regression(reg, tmp_path / "work", dry_run=True,
                       only=["taser-detr-last-zeroshot.arguana.test"])


def test_the_second_index_of_a_fused_search_is_a_dependency_too(tmp_path: Path) -> None:
    """``--index A B``: B is read as well (only the path right after the flag was)."""
    reg = load_regression(REPO_ROOT / "regressions" / "cotmote-protocol.yaml")
    with pytest.raises(UserError, match=r"mote-s42-sparse-index, which mote-dense-seeds.scifact."
                                        r"test writes"):
        run_regression(reg, tmp_path / "work", dry_run=True,
                       only=["mote-sparse-seeds.scifact.test"])


def test_each_step_says_which_condition_seed_and_step_it_is(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    reg = load_regression(two_conditions)
    run_regression(reg, two_conditions.parent / "work", only=["train"])
    assert f"[1/1 train, step 1/1] $ {sys.executable}" in capsys.readouterr().out.replace("'", "")


def _one_condition_file(tmp_path: Path, expected: float, **tolerance: float) -> Path:
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.trec").write_text(FULL_RUN)
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump({"name": "r", "conditions": [{
        "name": "c", "run": str(tmp_path / "run.trec"), "qrels": str(tmp_path / "qrels.txt"),
        "metrics": {"mrr@10": expected}, "source": "hand", **tolerance}]}))
    return path


def test_a_metric_without_tolerance_passes_when_it_prints_the_same(tmp_path: Path) -> None:
    """0.75 measured against 0.74996 written: both print 0.7500; before, tolerance 0 failed it."""
    reg = load_regression(_one_condition_file(tmp_path, 0.74996))
    rows, _ = run_regression(reg, tmp_path / "work")
    assert [r.status for r in rows] == ["OK"] and rows[0].tolerance == DEFAULT_TOLERANCE
    reg = load_regression(_one_condition_file(tmp_path, 0.7499))  # prints differently: still a failure
    assert [r.status for r in run_regression(reg, tmp_path / "work")[0]] == ["FAIL"]


def test_an_explicit_zero_tolerance_is_kept(tmp_path: Path) -> None:
    reg = load_regression(_one_condition_file(tmp_path, 0.74996, tolerance=0.0))
    assert [r.status for r in run_regression(reg, tmp_path / "work")[0]] == ["FAIL"]


def test_a_step_s_own_braces_are_kept(tmp_path: Path, capsys) -> None:
    """awk's ``{print $1}`` crashed the runner with KeyError (str.format), dry run included; only
    the known placeholders ({work} here) are filled."""
    path = _one_condition_file(tmp_path, 0.75)
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


# --- a one-seed row recording an sd ---------------------------------------------------------------


def test_a_one_seed_row_with_an_sd_is_told_one_seed_has_none(tmp_path) -> None:
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    doc = {"name": "r", "conditions": [{
        "name": "one", "seeds": [1], "run": str(tmp_path / "s-{seed}.trec"),
        "qrels": str(tmp_path / "qrels.txt"), "source": "hand-computed",
        "metrics": {"ndcg@10": {"expected": 0.6, "sd": 0.0, "seeds": [0.6]}}}]}
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(RegressionSpecError) as refused:
        load_regression(path)
    assert str(refused.value) == (
        f"{path}: condition 'one': ndcg@10.sd: a condition of one seed has no sd (a spread needs "
        "at least 2 seeds): leave 'sd' out")
    del doc["conditions"][0]["metrics"]["ndcg@10"]["sd"]
    path.write_text(yaml.safe_dump(doc))
    assert load_regression(path).conditions[0].checks[0].expected == 0.6


# --- a one-seed regression row --------------------------------------------------------------------


def test_a_one_seed_row_shows_no_sd_and_no_spread_footnote() -> None:
    from pyserini_moe.lab.regress import Outcome, format_table

    one = Outcome("one", "ndcg@10", 0.1077, 0.25, 0.001, "FAIL", "hand-computed", {1: 0.25})
    table = format_table([one], {})
    assert table.splitlines()[-1].endswith("FAIL  (seed 1: 0.2500)")
    assert "sd" not in table.splitlines()[-1] and "spread" not in table
    two = Outcome("two", "ndcg@10", 0.5, 0.5, 0.1, "OK", "hand-computed", {1: 0.4, 2: 0.6})
    table = format_table([one, two], {})
    assert "(mean of 2 seeds, sd 0.1414: 1: 0.4000, 2: 0.6000)" in table
    assert table.splitlines()[-1].startswith("tolerance 'spread' of a multi-seed row")


def test_a_step_leaves_single_quoted_variables_to_its_program(tmp_path, monkeypatch) -> None:
    """A shell expands ``$HOME`` bare and in double quotes, not in single quotes."""
    monkeypatch.setenv("HOME", "/home/x")
    monkeypatch.setenv("USER", "alice")
    step = """echo 'cost: $HOME and ${USER}x' "$HOME" $USER \\$HOME"""
    assert expand(step, tmp_path, quote=True) == \
        """echo 'cost: $HOME and ${USER}x' "/home/x" alice \\$HOME"""
    assert expand("$HOME/it's.trec", tmp_path) == "/home/x/it's.trec"  # a path: no shell quoting


def test_a_step_written_for_a_shell_says_steps_run_without_one(tmp_path) -> None:
    with pytest.raises(UserError, match=r"step program 'D=/root;' not found; steps run without a "
                                        r"shell \(no pipes, ';', '>' or VAR=value assignments\)"):
        run_step("D=/root; echo hi > {work}/x.txt", tmp_path, dry_run=False)


def test_a_misspelt_metric_key_is_refused_not_unset(tmp_path: Path) -> None:
    path = regression_file(tmp_path, metrics={"mrr@10": {"expcted": 0.9999, "tolerance": 0.001}})
    with pytest.raises(RegressionSpecError, match="unknown key.*expcted"):
        load_regression(path)


def test_a_misspelt_file_or_condition_key_is_refused_not_ignored(tmp_path: Path) -> None:
    """``tolerence: 0.05`` left the tolerance at its default without a word."""
    path = regression_file(tmp_path, tolerence=0.05)
    with pytest.raises(RegressionSpecError, match="condition 'c': unknown key 'tolerence' "
                                                  r"\(it may have: name, seeds"):
        load_regression(path)
    path = regression_file(tmp_path)
    path.write_text(path.read_text() + "bogus_key: 1\n")
    with pytest.raises(RegressionSpecError, match="unknown key 'bogus_key'"):
        load_regression(path)


def test_a_misspelt_path_placeholder_is_refused_and_awk_braces_are_kept(tmp_path: Path) -> None:
    path = regression_file(tmp_path, run="{wrok}/copy.trec")
    with pytest.raises(RegressionSpecError, match=r"'\{wrok\}' in .* is no placeholder"):
        load_regression(path)
    awk = regression_file(tmp_path, name="awk", steps=["awk '{print $1}' {work}/copy.trec"])
    assert load_regression(awk).conditions[0].steps == ["awk '{print $1}' {work}/copy.trec"]
