"""Unusual input to the ``train`` command (:mod:`pyserini_moe.cli.train`): flags and
``--set`` of the same recipe field, a ``--set`` of a whole section, seeds and sizes out of
range, outputs that are files or hold the recipe; each is one ``error:`` line and no
folder is made."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli import run_main, train
from pyserini_moe.cli import train as train_cli
from pyserini_moe.cli.train import main as train_main
from pyserini_moe.validate import ConfigError
from tests.helpers import refused

pytestmark = pytest.mark.usefixtures("one_thread")

RECIPES = Path(__file__).resolve().parents[2] / "encoders"
RECIPE = Path(__file__).resolve().parents[2] / "encoders" / "siamese-minilm.yaml"
ROOT = Path(__file__).resolve().parents[2]


def test_a_training_refused_for_its_data_leaves_no_folder(tmp_path: Path, capsys) -> None:
    from pyserini_moe.cli import run_main
    from pyserini_moe.train import __main__ as train_cli

    recipe = Path(__file__).resolve().parents[2] / "encoders" / "taser-detr-protocol-minilm.yaml"
    out = tmp_path / "model"
    assert run_main(train_cli.main, ["--config", str(recipe), "--output-dir", str(out), "--set",
                                     "data.collection=nosuch", "--quiet"]) == 2
    assert "unknown collection 'nosuch'" in capsys.readouterr().err
    assert not out.exists()


def test_an_output_dir_inside_an_index_is_refused(tmp_path: Path, capsys) -> None:
    """It was accepted; the index then held files its --overwrite refused to replace."""
    from pyserini_moe.index.meta import write_meta

    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    assert run_main(train_main, ["--config", str(RECIPE), "--output-dir", str(index / "model"),
                                 "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --output-dir {index / 'model'} is inside {index}, an index: name a folder of "
        "its own (made if missing)")
    assert not (index / "model").exists()


# --- --set training.max_steps=1 --set training={} -------------------------------------------------


def test_a_whole_section_set_after_a_field_inside_it_is_refused(siamese_recipe, tmp_path, capsys,
                                                                error_line) -> None:
    recipe = tmp_path / "ok.yaml"
    recipe.write_text(yaml.safe_dump(siamese_recipe.to_dict()))
    argv = ["--config", str(recipe), "--output-dir", str(tmp_path / "out"),
            "--set", "training.max_steps=1", "--set", "training={}"]
    assert error_line(train_main, argv, capsys) == (
        "error: --set training={} replaces the whole of training, which the earlier --set "
        "training.max_steps=1 sets inside: the earlier one would be lost; give the field in the "
        "section's value, or drop one of them")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def recipe(siamese_recipe, tmp_path: Path) -> Path:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(siamese_recipe.to_dict()))
    return path


def _argv(recipe: Path, *extra: str) -> list[str]:
    return ["--config", str(recipe), *extra]


# --- a flag and a --set of its field --------------------------------------------------------------


@pytest.mark.parametrize("flag, setting, field", [
    (["--seed", "42"], "training.seed=7", "training.seed"),
    (["--max-steps", "1"], "training.max_steps=2", "training.max_steps"),
    (["--epochs", "1"], "training.epochs=3", "training.epochs"),
    (["--device", "cpu"], "training.device=cuda", "training.device"),
])
def test_a_flag_and_a_set_of_its_field_are_refused(recipe, tmp_path, capsys, error_line, flag,
                                                   setting, field) -> None:
    out = tmp_path / "out"
    argv = _argv(recipe, "--output-dir", str(out), *flag, "--set", setting, "--init-only")
    assert error_line(train_main, argv, capsys) == (
        f"error: --set {setting} and {' '.join(flag)} both set {field}: give one of them")
    assert not out.exists()


def test_a_set_of_the_output_dir_beside_output_dir_is_refused(recipe, tmp_path, capsys,
                                                              error_line) -> None:
    """The untrained model went to the --set folder; --output-dir was never made."""
    a, b = tmp_path / "a", tmp_path / "b"
    argv = _argv(recipe, "--output-dir", str(a), "--set", f"output_dir={b}", "--init-only")
    assert error_line(train_main, argv, capsys) == (
        f"error: --set output_dir={b} and --output-dir {a} both set output_dir: give one of them")
    assert not a.exists() and not b.exists()


def test_a_set_of_a_section_holding_a_flags_field_is_refused(recipe, tmp_path, capsys,
                                                             error_line) -> None:
    argv = _argv(recipe, "--output-dir", str(tmp_path / "out"), "--seed", "3",
                 "--set", "training={learning_rate: 0.01, seed: 9}", "--init-only")
    assert error_line(train_main, argv, capsys) == (
        "error: --set training={learning_rate: 0.01, seed: 9} replaces the whole of training, "
        "which --seed 3 also sets (training.seed): give one of them, or set the other fields "
        "of training one by one (--set training.FIELD=VALUE)")


def test_a_set_of_a_flags_field_alone_is_honoured(siamese_recipe, recipe, tmp_path) -> None:
    """Without the flag, the --set applies as before; so does the flag without the --set."""
    flags = {"training.device": "--device cpu", "output_dir": f"--output-dir {tmp_path}"}
    changed = siamese_recipe.with_settings(["training.seed=7", "training.max_steps=5"], flags)
    assert (changed.training.seed, changed.training.max_steps) == (7, 5)
    with pytest.raises(ConfigError, match="both set training.device"):
        siamese_recipe.with_settings(["training.device=cpu"], flags)
    out = tmp_path / "out"
    assert train_main(_argv(recipe, "--output-dir", str(out), "--set", "training.seed=7",
                            "--init-only", "--quiet")) == 0
    assert (out / "init").is_dir()


# --- a whole section that drops what the recipe set there -----------------------------------------


def test_a_whole_model_section_dropping_the_backbone_is_refused(recipe, siamese_recipe,
                                                                tmp_path, capsys,
                                                                error_line) -> None:
    """``model={type: siamese}`` trained the packaged MiniLM, not the recipe's backbone."""
    backbone = siamese_recipe.model.backbone
    out = tmp_path / "out"
    argv = _argv(recipe, "--output-dir", str(out), "--set", "model={type: siamese}",
                 "--init-only")
    assert error_line(train_main, argv, capsys) == (
        f"error: --set model={{type: siamese}} replaces the whole of model and so drops what the "
        f"recipe set there: model.backbone ({backbone}) would fall back to the default; set the "
        "fields one by one instead (--set model.FIELD=VALUE), or give the dropped ones in the "
        "value")
    assert not out.exists()
    # the dropped field given in the value, or by a later --set, loses nothing
    kept = siamese_recipe.with_settings([f"model={{type: siamese, backbone: {backbone}}}"])
    assert kept.model == siamese_recipe.model
    kept = siamese_recipe.with_settings(["model={type: siamese}", f"model.backbone={backbone}"])
    assert kept.model == siamese_recipe.model


def test_a_recipe_with_a_huge_came_dim_is_one_line(tmp_path, capsys) -> None:
    recipe = RECIPES / "came-minilm.yaml"
    assert run_main(train_cli.main, ["--config", str(recipe), "--output-dir",
                                     str(tmp_path / "out"),
                                     "--set", "model.args.dim=100000000000000"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --set model.args.dim=100000000000000: must be <= 65,536, " \
                          "got 100000000000000"
    assert not (tmp_path / "out").exists()


# --- train --seed out of numpy's range ------------------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_bad_seed_flag_is_blamed_on_the_flag(tmp_path, capsys, seed) -> None:
    recipe = RECIPES / "siamese-minilm.yaml"
    with pytest.raises(SystemExit) as exit_:
        train_cli.main(["--config", str(recipe), "--seed", seed])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"argument --seed: must be in [0, 2**32), got {seed}" in err
    assert str(recipe) not in err


def test_train_refuses_resume_with_init_only(tmp_path, capsys) -> None:
    refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "o"),
                         "--resume", "--init-only"], "--resume and --init-only exclude", capsys)
    assert not (tmp_path / "o").exists()


def test_train_names_an_output_dir_that_is_a_file(tmp_path, capsys) -> None:
    (tmp_path / "f").write_text("mine")
    refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "f")],
            f"--output-dir {tmp_path / 'f'} is a file: name a folder", capsys)
    assert (tmp_path / "f").read_text() == "mine"


def test_train_refuses_a_typo_sized_epoch_count_at_once(tmp_path, capsys) -> None:
    refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "o"),
                         "--epochs", str(10**20)], "must be <= 100,000", capsys)
    assert not (tmp_path / "o").exists()


def test_a_recipe_inside_the_output_folder_is_not_replaced(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    recipe = folder / "recipe.yaml"
    shutil.copy(ROOT / "encoders" / "siamese-minilm.yaml", recipe)
    before = recipe.read_bytes()
    refused(train_main, ["--config", str(recipe), "--output-dir", str(folder)],
            "holds the input", capsys)
    assert recipe.read_bytes() == before


# train --seed -1 is argparse's refusal of the flag (test_a_bad_seed_flag_is_blamed_on_the_flag)
@pytest.mark.parametrize("argv, message", [
    (["--set", "training.seed=4294967296"], "must be in [0, 2**32)"),
    (["--set", "data.seed=-3"], "--set data.seed=-3: must be in [0, 2**32)"),
])
def test_a_seed_numpy_cannot_take_is_one_error_line(argv, message, tmp_path, capsys) -> None:
    refused(train_main, ["--config", str(ROOT / "encoders" / "siamese-minilm.yaml"),
                         "--output-dir", str(tmp_path / "o"), *argv], message, capsys)
