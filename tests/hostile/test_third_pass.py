"""Cases of the third hostile pass (Session 20): a recipe inside the training's output folder, a
seed numpy refuses, and the regression runner's work folder, keys and selections."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli import run_main
from pyserini_moe.cli.regress import main as regress_main
from pyserini_moe.cli.train import main as train_main
from pyserini_moe.errors import UserError
from pyserini_moe.lab.regress import RegressionSpecError, load_regression

ROOT = Path(__file__).resolve().parents[2]
RUN = "q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"  # MRR@10 0.75


def _refused(main, argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err


def test_a_recipe_inside_the_output_folder_is_not_replaced(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    recipe = folder / "recipe.yaml"
    shutil.copy(ROOT / "encoders" / "siamese-minilm.yaml", recipe)
    before = recipe.read_bytes()
    _refused(train_main, ["--config", str(recipe), "--output-dir", str(folder)],
             "holds the input", capsys)
    assert recipe.read_bytes() == before


# train --seed -1 is argparse's refusal of the flag (test_round5.py)
@pytest.mark.parametrize("argv, message", [
    (["--set", "training.seed=4294967296"], "must be in [0, 2**32)"),
    (["--set", "data.seed=-3"], "--set data.seed=-3: must be in [0, 2**32)"),
])
def test_a_seed_numpy_cannot_take_is_one_error_line(argv, message, tmp_path, capsys) -> None:
    _refused(train_main, ["--config", str(ROOT / "encoders" / "siamese-minilm.yaml"),
                          "--output-dir", str(tmp_path / "o"), *argv], message, capsys)


def _file(folder: Path, name: str = "tiny", **condition) -> Path:
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (folder / "given.trec").write_text(RUN)
    doc = {"name": name, "conditions": [{
        "name": "c", "qrels": str(folder / "qrels.txt"), "tolerance": 0.01, "source": "by hand",
        "steps": ['{python} -c "import sys, shutil; shutil.copy(sys.argv[3], sys.argv[2])" '
                  f"--output {{work}}/copy.trec {folder / 'given.trec'}"],
        "run": "{work}/copy.trec", "metrics": {"mrr@10": 0.75}, **condition}]}
    path = folder / f"{name}-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_work_folder_with_a_space_is_one_argument(tmp_path: Path) -> None:
    work = tmp_path / "my work"
    assert regress_main([str(_file(tmp_path)), "--work-dir", str(work)]) == 0
    assert (work / "tiny" / "copy.trec").is_file() and not (tmp_path / "my").exists()


def test_a_relative_work_folder_is_where_the_runner_looks(tmp_path: Path, monkeypatch) -> None:
    path = _file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert regress_main([str(path), "--work-dir", "rel"]) == 0
    assert (tmp_path / "rel" / "tiny" / "copy.trec").is_file()  # steps run from the repository
    assert (tmp_path / "rel" / "tiny" / "report.json").is_file()


def test_a_misspelt_metric_key_is_refused_not_unset(tmp_path: Path) -> None:
    path = _file(tmp_path, metrics={"mrr@10": {"expcted": 0.9999, "tolerance": 0.001}})
    with pytest.raises(RegressionSpecError, match="unknown key.*expcted"):
        load_regression(path)


def test_a_seed_no_condition_trains_with_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--seed 99: no condition"):
        regress_main([str(_file(tmp_path)), "--seed", "99", "--work-dir", str(tmp_path / "w")])
    assert not (tmp_path / "w").exists()


def test_two_files_of_one_name_are_refused(tmp_path: Path) -> None:
    first, second = _file(tmp_path), _file(tmp_path)
    with pytest.raises(UserError, match="several files are named tiny"):
        regress_main([str(first), str(second), "--work-dir", str(tmp_path / "w")])


def test_a_misspelt_path_placeholder_is_refused_and_awk_braces_are_kept(tmp_path: Path) -> None:
    path = _file(tmp_path, run="{wrok}/copy.trec")
    with pytest.raises(RegressionSpecError, match=r"'\{wrok\}' in .* is no placeholder"):
        load_regression(path)
    awk = _file(tmp_path, name="awk", steps=["awk '{print $1}' {work}/copy.trec"])
    assert load_regression(awk).conditions[0].steps == ["awk '{print $1}' {work}/copy.trec"]


def test_a_seed_glob_that_matches_a_folder_says_so(tmp_path: Path, capsys) -> None:
    from pyserini_moe.cli.eval import main as eval_main

    (tmp_path / "d-s1.trec").write_text(RUN)
    (tmp_path / "d-sdir.trec").mkdir()
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    _refused(eval_main, ["--run", f"d={tmp_path}/d-s*.trec", "--qrels", str(tmp_path / "qrels.txt")],
             "matches the folder", capsys)
