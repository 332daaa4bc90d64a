"""Cases of the thirteenth hostile pass on ``train``: its own flags (``--seed``, ``--max-steps``,
``--epochs``, ``--device``, ``--output-dir``) silently beaten by a ``--set`` of the same recipe
field, applied after them (H13-01, H13-02, H13-03, H13-04); a ``--set`` of a whole section that
drops a field the recipe set, ``model={type: siamese}`` training the packaged MiniLM instead of
the recipe's backbone (H13-05)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli.train import main as train_main
from pyserini_moe.validate import ConfigError


@pytest.fixture
def recipe(siamese_recipe, tmp_path: Path) -> Path:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(siamese_recipe.to_dict()))
    return path


def _argv(recipe: Path, *extra: str) -> list[str]:
    return ["--config", str(recipe), *extra]


# -- a flag and a --set of its field (H13-01, H13-02, H13-03, H13-04) ---------------------------

@pytest.mark.parametrize("flag, setting, field", [
    (["--seed", "42"], "training.seed=7", "training.seed"),  # H13-01
    (["--max-steps", "1"], "training.max_steps=2", "training.max_steps"),  # H13-02
    (["--epochs", "1"], "training.epochs=3", "training.epochs"),
    (["--device", "cpu"], "training.device=cuda", "training.device"),  # H13-03
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
    """H13-04: the untrained model went to the --set folder; --output-dir was never made."""
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


# -- a whole section that drops what the recipe set there (H13-05) ------------------------------

def test_a_whole_model_section_dropping_the_backbone_is_refused(recipe, siamese_recipe,
                                                                tmp_path, capsys,
                                                                error_line) -> None:
    """H13-05: ``model={type: siamese}`` trained the packaged MiniLM, not the recipe's backbone."""
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


def test_a_whole_nested_section_dropping_a_recipe_field_is_refused(siamese_recipe) -> None:
    """The same for any section, nested ones included: ``data={...}`` without the recipe's
    ``query_max_length``, ``data.negatives={}`` after the recipe's depth."""
    with pytest.raises(ConfigError, match=r"^--set data=\{collection: toy\} replaces the whole "
                       r"of data and so drops what the recipe set there: data\.query_max_length "
                       r"\(8\), data\.passage_max_length \(8\) would fall back"):
        siamese_recipe.with_settings(["data={collection: toy}"])
    deeper = siamese_recipe.with_settings(["data.negatives.depth=30"])
    with pytest.raises(ConfigError, match=r"drops what the recipe set there: "
                                          r"data\.negatives\.depth \(30\)"):
        deeper.with_settings(["data.negatives={skip_top: 1}"])
    # a value equal to the default is not lost; dict-valued fields (model.args) are values
    assert siamese_recipe.with_settings(["data.negatives={depth: 100}"]) == siamese_recipe
    assert siamese_recipe.with_settings(["model.args={}"]).model.args == {}
