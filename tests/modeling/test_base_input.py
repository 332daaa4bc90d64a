"""Saved models and what they encode (:mod:`pyserini_moe.modeling.base`): damaged metadata
and arguments, a training folder named as the model, and invisible queries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder, load_model
from pyserini_moe.modeling.base import Side, is_blank


def test_a_damaged_model_metadata_file(tiny_bert, tmp_path) -> None:
    torch.manual_seed(0)
    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    meta = next(p for p in folder.iterdir() if p.name == "pyserini_moe.json")
    meta.write_text("{not json")
    with pytest.raises(ValueError, match="the model metadata is damaged"):
        load_model(folder, device="cpu")


@pytest.mark.parametrize("query", ["\u200b", " \u200b\ufeff ", "\u2060\t", "", "\x00", "\x01\x02"])
def test_an_invisible_query_is_an_empty_query(tiny_bert: Path, query: str) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    assert is_blank(query)
    with pytest.raises(UserError, match="cannot encode an empty query"):
        model.encode(["fine", query], Side.QUERY, 16)


@pytest.mark.parametrize(("texts", "words"), [
    ([], "no query to encode"), (["fine", None], "query 2 is NoneType, not a string"),
    ([b"cat"], "query is bytes"), (["cat \ud800"], "half of a UTF-16 surrogate pair")])
def test_what_no_tokenizer_takes_is_one_line(tiny_bert: Path, texts: list, words: str) -> None:
    """Before: an IndexError, a TypeError or an AttributeError from inside the tokenizer."""
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    with pytest.raises(UserError, match=re.escape(words)):
        model.encode_query(texts)


def test_the_default_score_names_vectors_it_lacks(tiny_bert: Path) -> None:
    from pyserini_moe.modeling.base import Encoded

    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    queries = model.encode_query(["a cat"])
    with pytest.raises(UserError, match="the passages given hold none"):
        model.score(queries, Encoded(sparse=torch.ones(1, 4)))


@pytest.mark.parametrize("model_type", ["siamese", "taser"])
def test_score_names_what_is_not_an_encoding(tiny_bert: Path, model_type: str) -> None:
    """Before: an AttributeError ('numpy.ndarray' object has no attribute 'dense')."""
    from pyserini_moe.modeling import model_class

    extra = {"every": 1} if model_type == "taser" else {}
    model = model_class(model_type).from_backbone(tiny_bert, device="cpu", **extra).eval()
    queries, passages = model.encode_query(["a"]), model.encode_document(["b"])
    with pytest.raises(UserError, match="score takes what encode returned for the queries "
                                        r"\(an Encoded\), got ndarray"):
        model.score(queries.dense.numpy(), passages)
    with pytest.raises(UserError, match="for the passages .* got NoneType"):
        model.score(queries, None)


def test_a_query_with_one_visible_character_is_not_blank() -> None:
    assert not is_blank("\u200bq") and not is_blank("é")


@pytest.mark.parametrize(("args", "words"), [
    (["pooling", "mean"], "'args' is list, not a mapping"), (None, "'args' is NoneType"),
    ({"normalize": "yes"}, "siamese model argument normalize: expected true or false")])
def test_damaged_saved_arguments_name_the_model_file(tiny_bert, tmp_path: Path, args,
                                                     words: str) -> None:
    """a saved folder whose ``args`` were a list or null ended in a
    TypeError traceback; a bad value did not name the folder."""
    import json

    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.folder import MODEL_FILE, load_model

    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    meta = json.loads((folder / MODEL_FILE).read_text())
    meta["args"] = args
    (folder / MODEL_FILE).write_text(json.dumps(meta))
    with pytest.raises(UserError, match=f"^{folder / MODEL_FILE}: .*{words}"):
        load_model(folder, device="cpu")


# --- a training run's folder named as the model ---------------------------------------------------


def test_a_training_folder_named_as_a_model_points_at_its_best(ws, tmp_path) -> None:
    import shutil

    from pyserini_moe.modeling.backbone import resolve_backbone
    from pyserini_moe.modeling.folder import load_model

    run = tmp_path / "run"
    shutil.copytree(ws["model"], run / "best")
    (run / "recipe.yaml").write_text("model: {type: siamese}\n")
    said = f"(a training run? give its best/: {run / 'best'})"
    with pytest.raises(FileNotFoundError, match=re.escape(said)):
        load_model(run)
    with pytest.raises(ValueError, match=re.escape(said)):
        resolve_backbone(run)


def test_weights_that_do_not_fit_the_recorded_arguments_are_one_line(tiny_bert: Path,
                                                                       tmp_path: Path) -> None:
    """A model folder whose pyserini_moe.json was edited (another expert count) was torch's
    many-line size-mismatch error."""
    import json

    from pyserini_moe.modeling import SbMoeEncoder, load_model

    folder = SbMoeEncoder.from_backbone(tiny_bert, n_experts=3, device="cpu").save(tmp_path / "m")
    meta = json.loads((folder / "pyserini_moe.json").read_text())
    meta["args"]["n_experts"] = 4
    (folder / "pyserini_moe.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"weights do not fit the sbmoe model its "
                                        r"pyserini_moe.json and config.json describe \(") as info:
        load_model(folder, device="cpu")
    assert "\n" not in str(info.value)
