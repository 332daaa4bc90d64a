"""A model card quotes the regression rows that train its recipe."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from pyserini_moe.train.measured import measured_rows

ROW = """name: r
conditions:
  - name: mine.scifact.test
    seeds: [42, 43]
    steps:
      - "{python} -m pyserini_moe.train --config {root}/encoders/mine.yaml --set model.args.router=mean"
    run: x
    metrics:
      ndcg@10: {expected: 0.7504, sd: 0.0064, seeds: [0.75, 0.7508], tolerance: spread}
      recall@100: {expected: null, tolerance: 0.01}
  - name: other.scifact.test
    steps: ["{python} -m pyserini_moe.train --config {root}/encoders/mine-too.yaml"]
    metrics: {ndcg@10: {expected: 0.5, tolerance: 0.01}}
  - name: unmeasured.scifact.test
    steps: ["{python} -m pyserini_moe.train --config {root}/encoders/mine.yaml"]
    metrics: {ndcg@10: {expected: null, tolerance: 0.01}}
"""


def _checkout(root: Path) -> Path:
    (root / "encoders").mkdir(parents=True)
    (root / "regressions").mkdir()
    (root / "regressions" / "r.yaml").write_text(ROW)
    (root / "regressions" / "broken.yaml").write_text("conditions: [\n")
    recipe = root / "encoders" / "mine.yaml"
    recipe.write_text("model: {type: siamese}\n")
    return recipe


def test_the_rows_training_a_recipe_are_its_measured_rows(tmp_path) -> None:
    recipe = _checkout(tmp_path)
    assert measured_rows(recipe) == [
        "- `mine.scifact.test` (r.yaml, seeds 42, 43; with --set model.args.router=mean): "
        "ndcg@10 0.7504 ± 0.0064"]
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("model: {type: siamese}\n")
    assert measured_rows(outside) == []


def test_training_quotes_them_in_the_card(toy_data, siamese_recipe, tmp_path) -> None:
    from pyserini_moe.train.trainer import Trainer, build_model

    config = dataclasses.replace(siamese_recipe, source=_checkout(tmp_path / "checkout"))
    torch.manual_seed(0)
    Trainer(build_model(config.model, "cpu"), config, toy_data(1), progress=False).train()
    card = (tmp_path / "run" / "last" / "README.md").read_text()
    assert "## Measured with this recipe" in card and "`mine.scifact.test` (r.yaml" in card
