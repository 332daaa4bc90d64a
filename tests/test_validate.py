"""One validator: recipes, pre-training arguments and regression files' numbers are checked by
pyserini_moe.validate, with the same field-path messages and the same number reading."""

from __future__ import annotations

import pytest

from pyserini_moe.lab.regress import RegressionSpecError, _number
from pyserini_moe.train.pretrain import PretrainArgs
from pyserini_moe.validate import ConfigError


def test_pre_training_arguments_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"pre-training arguments: mask_ratio: must be in "
                                          r"\(0, 1\), got 1.0"):
        PretrainArgs(backbone="x", corpora=("toy",), mask_ratio=1.0).check()
    with pytest.raises(ConfigError, match="variant: must be one of mote, siamese, separate"):
        PretrainArgs(backbone="x", corpora=("toy",), variant="moe").check()


def test_regression_numbers_read_as_recipe_numbers() -> None:
    assert _number("2e-5", "f.yaml: c: tolerance") == pytest.approx(2e-5)
    assert issubclass(RegressionSpecError, ConfigError)
    with pytest.raises(RegressionSpecError, match="f.yaml: c: tolerance: expected a number"):
        _number("high", "f.yaml: c: tolerance")
