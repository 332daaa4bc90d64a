"""The regression runner as a user meets it: --condition that skips what it needs, results pages
of a run elsewhere, dry runs that show what is expected, progress of long steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli.regress import main
from pyserini_moe.errors import UserError
from pyserini_moe.lab.regress import REPO_ROOT, load_regression, run_regression

RUN = "q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"
# Writes the run it is given after --output; reads (and checks) what --encoder names.
WRITER = ('{python} -c "import sys, shutil; shutil.copy(sys.argv[3], sys.argv[2])" '
          "--output {work}/model.trec %s")
READER = ('{python} -c "import sys, shutil; shutil.copy(sys.argv[2], sys.argv[4])" '
          "--encoder {work}/model.trec --output {work}/run.trec")


@pytest.fixture
def two_conditions(tmp_path: Path) -> Path:
    """Condition ``train`` writes {work}/model.trec; condition ``search`` reads it."""
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "given.trec").write_text(RUN)
    common = {"qrels": str(tmp_path / "qrels.txt"), "tolerance": 0.01, "source": "by hand"}
    doc = {"name": "deps", "conditions": [
        {"name": "train", "steps": [WRITER % (tmp_path / "given.trec")],
         "run": "{work}/model.trec", "metrics": {"mrr@10": 0.75}, **common},
        {"name": "search", "steps": [READER], "run": "{work}/run.trec",
         "metrics": {"mrr@10": 0.75}, **common},
        {"name": "page", "steps": ['{python} -c "import sys, os; os.makedirs(sys.argv[2], '
                                   'exist_ok=True)" --output {results}'],
         "run": "{work}/run.trec", "metrics": {"mrr@10": 0.75}, **common}]}
    path = tmp_path / "deps.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


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


def test_results_pages_of_a_run_elsewhere_stay_out_of_the_repository(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    work = two_conditions.parent / "elsewhere"
    assert main([str(two_conditions), "--work-dir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--output {work / 'results'}" in out
    assert str(REPO_ROOT / "docs" / "results") not in out


def test_dry_run_shows_expected_values_and_runs_nothing(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    work = two_conditions.parent / "w"
    assert main([str(two_conditions), "--work-dir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(("train ", "search "))]
    assert len(table) == 2 and all("0.7500" in line and "PLAN" in line for line in table)
    assert not (work / "deps" / "model.trec").exists()


def test_each_step_says_which_condition_seed_and_step_it_is(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    reg = load_regression(two_conditions)
    run_regression(reg, two_conditions.parent / "work", only=["train"])
    assert f"[1/1 train, step 1/1] $ {sys.executable}" in capsys.readouterr().out.replace("'", "")
