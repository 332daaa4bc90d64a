"""Training recipes and their ``--set`` (:mod:`pyserini_moe.train.config`): numbers written
the way people write them, keys written twice, sections a ``--set`` replaces, and
negatives settings nobody reads; errors blame the file or the ``--set`` they come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.train.config import from_dict, load_config
from pyserini_moe.validate import ConfigError

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


def test_a_field_a_whole_section_set_drops_blames_that_set(siamese_recipe) -> None:
    """The section first, then a field inside it, is an order that loses nothing; what the
    section's value lacks is its --set's, not the recipe file's (which has the field)."""
    changed = siamese_recipe.with_settings(["training={learning_rate: 0.01, batch_size: 2, device: cpu}",
                                            "training.max_steps=1"])
    assert changed.training.max_steps == 1 and changed.training.learning_rate == 0.01
    with pytest.raises(ConfigError, match=r"^--set training=\{\}: training\.learning_rate: "
                                          "missing required field$"):
        siamese_recipe.with_settings(["training={}", "training.max_steps=1"])


# --- train --set training..max_steps / Training.max_steps -----------------------------------------


def test_an_empty_field_name_in_a_set_is_blamed_on_the_set(siamese_recipe) -> None:
    with pytest.raises(ConfigError) as refused:
        siamese_recipe.with_settings(["training..max_steps=1"])
    assert str(refused.value) == (
        "--set training..max_steps=1: 'training..max_steps' has an empty field name (a dot too "
        "many?): expected dotted field names, e.g. training.max_steps=1000")


def test_an_unknown_section_a_set_makes_is_blamed_on_the_set(siamese_recipe) -> None:
    with pytest.raises(ConfigError) as refused:
        siamese_recipe.with_settings(["Training.max_steps=1"])
    assert str(refused.value) == ("--set Training.max_steps=1: Training: unknown field (known: "
                                  "data, model, output_dir, training)")
    with pytest.raises(ConfigError, match=r"^--set training\.foo\.bar=1: training\.foo: "
                                          "unknown field"):
        siamese_recipe.with_settings(["training.foo.bar=1"])


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


def test_a_recipe_key_written_twice_is_refused(tmp_path: Path) -> None:
    """YAML keeps the last of two ``training:`` blocks in silence; a recipe pasted twice
    trained with the second block only."""
    recipe = tmp_path / "dup.yaml"
    recipe.write_text("output_dir: out\nmodel: {type: siamese}\ndata: {collection: scifact}\n"
                      "training: {learning_rate: 1.0e-4, max_steps: 2}\n"
                      "training: {learning_rate: 1.0e-4, max_steps: 1}\n")
    with pytest.raises(ConfigError, match="the key 'training' is written twice in one mapping"):
        load_config(recipe)


def test_a_merge_key_may_still_override_what_it_merges(tmp_path: Path) -> None:
    recipe = tmp_path / "merge.yaml"
    recipe.write_text("output_dir: out\nmodel: {type: siamese}\ndata: {collection: scifact}\n"
                      "training: {<<: {learning_rate: 1.0e-4, max_steps: 2}, max_steps: 1}\n")
    assert load_config(recipe).training.max_steps == 1


# --- train recipes --------------------------------------------------------------------------------


def _recipe_with_negatives(negatives: dict) -> dict:
    return {"output_dir": "out", "model": {"type": "siamese"},
            "data": {"collection": "scifact", "negatives": negatives},
            "training": {"learning_rate": 1.0e-5}}


@pytest.mark.parametrize("negatives, field", [
    ({"run": "round1.trec"}, "run"),
    ({"source": "bm25", "model": "m", "kind": "dense"}, "model"),
    ({"source": "bm25", "kind": "dense"}, "kind"),
    ({"source": "run", "run": __file__, "model": "m"}, "model"),
    ({"source": "model", "model": "m", "kind": "dense", "run": "r.trec"}, "run"),
])
def test_a_negatives_field_the_source_does_not_read_is_refused(negatives, field) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(_recipe_with_negatives(negatives), "encoders/r.yaml")
    message = str(info.value)
    assert message.startswith(f"encoders/r.yaml: data.negatives.{field}: not read when source "
                              f"is '{negatives.get('source', 'bm25')}'")
    assert "\n" not in message


def test_the_fields_a_source_reads_stay_accepted() -> None:
    assert from_dict(_recipe_with_negatives({"source": "run", "run": __file__})).data.negatives.run
    assert from_dict(_recipe_with_negatives({"source": "model", "model": "m", "kind": "dense"}))


def test_set_names_the_setting_the_source_ignores(siamese_recipe) -> None:
    with pytest.raises(ConfigError, match=r"^--set data.negatives.run=x.trec: not read when "
                                          "source is 'bm25'"):
        siamese_recipe.with_settings(["data.negatives.run=x.trec"])


# --- data.negatives read by nobody when no hard negative is drawn ---------------------------------


def test_in_batch_only_training_refuses_a_negatives_source_and_mines_nothing(tmp_path) -> None:
    from pyserini_moe.train.config import from_dict
    from pyserini_moe.train.data import NEGATIVES_RUN, load_training_data
    from pyserini_moe.validate import ConfigError

    run = tmp_path / "round1.trec"
    run.write_text("q0 Q0 d1 1 1.0 t\n")
    recipe = {"output_dir": "out", "model": {"type": "siamese"},
              "data": {"collection": "scifact", "num_negatives": 0,
                       "negatives": {"source": "run", "run": str(run)}},
              "training": {"learning_rate": 1.0e-5}}
    with pytest.raises(ConfigError, match="^r.yaml: data.negatives.source: not read when "
                                          "data.num_negatives is 0"):
        from_dict(recipe, "r.yaml")
    recipe["data"]["negatives"] = {"depth": 3}  # a depth nobody reads
    with pytest.raises(ConfigError, match="^r.yaml: data.negatives.depth: not read when "):
        from_dict(recipe, "r.yaml")
    del recipe["data"]["negatives"]
    config = from_dict(recipe, "r.yaml").data
    data = load_training_data(config, tmp_path / "work", progress=False)
    assert not (tmp_path / "work" / NEGATIVES_RUN).exists()  # no BM25 run over the queries
    assert data.candidates and all(len(c) == 0 for c in data.candidates.values())


# --- one recipe field set twice on the command line -----------------------------------------------


def test_set_of_one_field_to_two_values_is_refused(siamese_recipe) -> None:
    from pyserini_moe.validate import ConfigError

    same = siamese_recipe.with_settings(["training.max_steps=1", "training.max_steps= 1"])
    assert same.training.max_steps == 1
    with pytest.raises(ConfigError, match="^--set training.max_steps is given twice \\(1 and 2\\): "
                                          "give it once$"):
        siamese_recipe.with_settings(["training.max_steps=1", "training.max_steps=2"])


def test_a_folder_given_as_the_recipe_is_named_a_folder(tmp_path: Path) -> None:
    """It was "recipe not found", while the path exists."""
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a folder, not a recipe: name the "
                                                "YAML file"):
        load_config(tmp_path)
