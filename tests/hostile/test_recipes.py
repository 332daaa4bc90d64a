"""Hostile input to training recipes: numbers written the way people write them, and errors that
blame the right place."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.train.config import ConfigError, load_config

RECIPE = """output_dir: work/x
model: {type: siamese}
data: {collection: scifact}
training:
  learning_rate: LR
"""


def _recipe(tmp_path: Path, lr: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.replace("LR", lr))
    return path


@pytest.mark.parametrize("text,value", [("2e-5", 2e-5), ("2.0e-5", 2e-5), ("1E-4", 1e-4),
                                        ("3", 3.0), (".5", 0.5)])
def test_numbers_yaml_11_reads_as_strings_are_numbers(tmp_path: Path, text: str,
                                                      value: float) -> None:
    assert load_config(_recipe(tmp_path, text)).training.learning_rate == pytest.approx(value)


def test_set_accepts_exponent_numbers_and_a_bad_set_blames_set(tmp_path: Path) -> None:
    config = load_config(_recipe(tmp_path, "2.0e-5"))
    assert config.with_settings(["training.learning_rate=1e-4"]).training.learning_rate == 1e-4
    with pytest.raises(ConfigError) as err:
        config.with_settings(["training.learning_rate=fast"])
    message = str(err.value)
    assert message.startswith("--set training.learning_rate=fast: expected a number")
    assert "r.yaml" not in message


def test_a_word_is_still_refused_in_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"r\.yaml: training\.learning_rate: expected a number"):
        load_config(_recipe(tmp_path, "fast"))
    with pytest.raises(ConfigError, match="must be > 0"):
        load_config(_recipe(tmp_path, "-2e-5"))
