"""The recipe schema: defaults, every complaint naming file and field, the shipped recipes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pyserini_moe.train.config import ConfigError, TrainConfig, from_dict, load_config

ENCODERS = Path(__file__).resolve().parents[2] / "encoders"

MINIMAL = {
    "output_dir": "work/models/x",
    "model": {"type": "siamese"},
    "data": {"collection": "scifact"},
    "training": {"learning_rate": 2e-5},
}


def with_change(path: str, value: object, base: dict = MINIMAL) -> dict:
    """``MINIMAL`` with one dotted field set (``...`` deletes it)."""
    raw = copy.deepcopy(base)
    *parents, last = path.split(".")
    target = raw
    for key in parents:
        target = target.setdefault(key, {})
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return raw


def test_minimal_recipe_gets_the_documented_defaults():
    config = from_dict(MINIMAL, "r.yaml")
    assert config.model.backbone == "all-minilm-l6-v2" and config.model.args == {}
    assert config.data.split == "train" and config.data.validation_fraction == 0.05
    assert config.data.negatives.source == "bm25" and config.data.negatives.depth == 100
    assert config.data.negatives.skip_top == 0
    assert config.training.device == "auto" and config.training.eval_every is None
    assert config.training.flops_weight.query == config.training.flops_weight.passage == 0
    assert config.output_dir == Path("work/models/x")


def test_one_flops_number_applies_to_both_sides_and_ints_are_floats():
    config = from_dict(with_change("training.flops_weight", 1), "r.yaml")
    assert config.training.flops_weight.query == config.training.flops_weight.passage == 1.0
    config = from_dict(with_change("training.flops_weight", {"query": 0.001, "passage": 0.0008}))
    assert (config.training.flops_weight.query, config.training.flops_weight.passage) == (0.001,
                                                                                          0.0008)


@pytest.mark.parametrize(("path", "value", "field", "words"), [
    ("model.type", ..., "model.type", "missing"),
    ("output_dir", ..., "output_dir", "missing"),
    ("training.learning_rate", ..., "training.learning_rate", "missing"),
    ("training.lerning_rate", 1e-5, "training.lerning_rate", "unknown field"),
    ("data.negatives.deepth", 5, "data.negatives.deepth", "unknown field"),
    ("model.type", "bert", "model.type", "unknown model type"),
    ("model.args", {"poolin": "cls"}, "model.args.poolin", "not an argument"),
    ("model.args", {"pooling": "median"}, "model.args.pooling", "must be one of cls, mean, max"),
    ("model.args", {"normalize": "yes"}, "model.args.normalize", "true or false"),
    ("training.learning_rate", -1.0, "training.learning_rate", "> 0"),
    ("training.batch_size", 2.5, "training.batch_size", "integer"),
    ("training.epochs", True, "training.epochs", "integer"),
    ("training.max_steps", 0, "training.max_steps", "> 0"),
    ("training.device", "gpu", "training.device", "auto, cpu, cuda"),
    ("training.group_learning_rates", {"head.": 0}, "training.group_learning_rates", "> 0"),
    ("training.flops_weight", {"query": -1}, "training.flops_weight.query", ">= 0"),
    ("data.validation_fraction", 1.5, "data.validation_fraction", "[0, 1)"),
    ("data.negatives.source", "dpr", "data.negatives.source", "bm25, run, model"),
    ("data.negatives.kind", "faiss", "data.negatives.kind", "dense, impact, multivector"),
    ("data.negatives.skip_top", 100, "data.negatives.skip_top", "smaller than depth"),
    ("data.negatives", {"source": "run"}, "data.negatives.run", "required"),
    ("data.negatives", {"source": "run", "run": "no/such.trec"}, "data.negatives.run", "not found"),
    ("data.negatives", {"source": "model", "model": "m"}, "data.negatives.kind", "required"),
    ("data", "scifact", "data", "mapping"),
])
def test_errors_name_the_file_and_the_field(path, value, field, words):
    with pytest.raises(ConfigError) as info:
        from_dict(with_change(path, value), "encoders/broken.yaml")
    message = str(info.value)
    assert message.startswith(f"encoders/broken.yaml: {field}: ")
    assert words in message
    assert "\n" not in message


def test_load_config_reads_yaml_and_rejects_broken_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("output_dir: out\nmodel: {type: splade}\ndata: {collection: scifact}\n"
                    "training: {learning_rate: 1.0e-4, flops_weight: {query: 0.001}}\n")
    config = load_config(good)
    assert config.source == good and config.model.type == "splade"
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty.yaml: expected a mapping"):
        load_config(empty)
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")


def test_output_dir_on_the_command_line_stands_in_for_the_recipes(tmp_path, tiny_bert, capsys):
    """Issue 39: ``train --config R --output-dir D`` refused a recipe R without output_dir."""
    from pyserini_moe.cli import run_main
    from pyserini_moe.cli import train as train_cli

    recipe = tmp_path / "shared.yaml"
    recipe.write_text(f"model: {{type: siamese, backbone: {tiny_bert}}}\n"
                      "data: {collection: scifact}\ntraining: {learning_rate: 1.0e-4}\n")
    assert load_config(recipe, tmp_path / "out").output_dir == tmp_path / "out"
    assert train_cli.main(["--config", str(recipe), "--output-dir", str(tmp_path / "out"),
                           "--device", "cpu", "--init-only", "--quiet"]) == 0
    assert (tmp_path / "out" / "init" / "pyserini_moe.json").is_file()
    assert run_main(train_cli.main, ["--config", str(recipe), "--init-only"]) == 2  # neither
    assert capsys.readouterr().err.splitlines()[-1] == (f"error: {recipe}: output_dir: missing "
                                                        "required field")


def test_to_dict_round_trips_and_overrides_are_validated():
    config = from_dict(MINIMAL, "r.yaml")
    assert from_dict(config.to_dict(), "r.yaml") == config
    changed = config.with_overrides(output_dir="elsewhere", max_steps=3, epochs=None, device="cpu")
    assert changed.output_dir == Path("elsewhere") and changed.training.max_steps == 3
    assert changed.training.epochs == config.training.epochs and changed.training.device == "cpu"
    with pytest.raises(ConfigError, match="training.max_steps"):
        config.with_overrides(max_steps=0)


def test_settings_override_any_field_and_are_validated(tmp_path):
    run = tmp_path / "round1.trec"
    run.write_text("q1 Q0 d1 1 1.0 r1\n")
    config = from_dict(MINIMAL, "r.yaml")
    changed = config.with_settings(["data.negatives.source=run", f"data.negatives.run={run}",
                                    "model.args.pooling=cls", "training.temperature=0.5"])
    assert changed.data.negatives.source == "run" and changed.data.negatives.run == run
    assert changed.model.args["pooling"] == "cls" and changed.training.temperature == 0.5
    assert config.with_settings([]) == config
    with pytest.raises(ConfigError, match="data.negatives.run: required"):
        config.with_settings(["data.negatives.source=run"])
    with pytest.raises(ConfigError, match="--set training.bogus=1: unknown field"):
        config.with_settings(["training.bogus=1"])
    with pytest.raises(ConfigError, match="expected FIELD=VALUE"):
        config.with_settings(["training.temperature"])
    with pytest.raises(ConfigError, match="output_dir is not a section"):
        config.with_settings(["output_dir.x=1"])


@pytest.mark.parametrize("recipe", sorted(ENCODERS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe):
    assert isinstance(load_config(recipe), TrainConfig)


@pytest.mark.parametrize("name", ["siamese-minilm", "dpr-minilm", "splade-minilm",
                                  "colbert-minilm", "taser-detr-minilm", "taser-seqr-minilm",
                                  "taser-tokr-minilm", "taser-shared-minilm"])
def test_the_quick_recipes_are_shipped(name):
    config = load_config(ENCODERS / f"{name}.yaml")
    assert config.model.backbone == "all-minilm-l6-v2" and config.data.collection == "scifact"
    assert config.output_dir.parts[0] == "work"  # trained models stay out of git
