"""The query length travels from the recipe to the model, from the model to its index, and from
the index to search: a search cuts queries as training did unless told otherwise, and a model
that records no length searches at every position."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.meta import META_FILE, read_meta
from pyserini_moe.modeling import CotMoteEncoder, SiameseBiEncoder
from pyserini_moe.modeling.folder import MODEL_FILE, load_model
from pyserini_moe.search.dispatch import SearchSettings, open_any

pytestmark = pytest.mark.usefixtures("one_thread")
LONG_QUERY = " ".join(["what", "is", "dense", "retrieval", "cat", "sat", "on", "mat"] * 8)


def _model(tiny_bert: Path, folder: Path, query_max_length: int | None) -> Path:
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    model.query_max_length = query_max_length
    return model.save(folder)


def _index(model: Path, corpus: Path, folder: Path, retriever: str = "dense") -> Path:
    assert index_cli.main(["--retriever", retriever, "--corpus", str(corpus), "--index",
                           str(folder), "--encoder", str(model), "--device", "cpu",
                           "--quiet"]) == 0
    return folder


@pytest.fixture(scope="module")
def trained(tiny_bert, tiny_corpus, tmp_path_factory) -> Path:
    """A dense index of a model trained (as far as its folder says) at 16 query tokens."""
    root = tmp_path_factory.mktemp("qlen")
    return _index(_model(tiny_bert, root / "model", 16), tiny_corpus, root / "dense")


def test_a_model_saves_and_loads_its_query_length(tiny_bert, tmp_path) -> None:
    folder = _model(tiny_bert, tmp_path / "m", 16)
    assert json.loads((folder / MODEL_FILE).read_text())["query_max_length"] == 16
    assert load_model(folder, device="cpu").query_max_length == 16
    plain = _model(tiny_bert, tmp_path / "plain", None)
    assert "query_max_length" not in json.loads((plain / MODEL_FILE).read_text())
    assert load_model(plain, device="cpu").query_max_length is None


@pytest.mark.parametrize("bad", [0, -3, "32", 1.5, True])
def test_a_damaged_query_length_is_one_line_naming_the_file(tiny_bert, tmp_path, bad) -> None:
    folder = _model(tiny_bert, tmp_path / "m", 16)
    meta = json.loads((folder / MODEL_FILE).read_text())
    (folder / MODEL_FILE).write_text(json.dumps({**meta, "query_max_length": bad}))
    with pytest.raises(UserError, match=rf"{MODEL_FILE}: query_max_length is .*damaged"):
        load_model(folder, device="cpu")


def test_the_index_records_the_training_length_and_search_uses_it(trained, caplog) -> None:
    assert read_meta(trained).query_max_length == 16
    with caplog.at_level(logging.WARNING):
        searcher = open_any(SearchSettings(retriever="dense", index=str(trained), device="cpu"))
        encoder = searcher.query_encoder
        assert encoder.max_length == 16
        encoder.encode(LONG_QUERY)
    assert encoder.queries_cut == 1
    assert any("longer than 16 tokens are cut" in r.getMessage() for r in caplog.records)


def test_a_length_given_overrides_the_recorded_one(trained) -> None:
    searcher = open_any(SearchSettings(retriever="dense", index=str(trained), device="cpu",
                                       query_max_length=40))
    assert searcher.query_encoder.max_length == 40


def test_impact_indexes_record_it_too(tiny_mlm, tiny_corpus, tmp_path) -> None:
    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_mlm, sparse_top_k=20, device="cpu")
    model.query_max_length = 12
    index = _index(model.save(tmp_path / "m"), tiny_corpus, tmp_path / "impact", "impact")
    assert read_meta(index).query_max_length == 12
    searcher = open_any(SearchSettings(retriever="impact", index=str(index), device="cpu"))
    assert searcher.query_encoder.max_length == 12


def test_without_a_training_length_the_index_records_the_positions(tiny_bert, tiny_corpus,
                                                                   tmp_path) -> None:
    index = _index(_model(tiny_bert, tmp_path / "m", None), tiny_corpus, tmp_path / "dense")
    assert read_meta(index).query_max_length == 512  # the tiny BERT's positions


def test_an_index_that_records_no_length_searches_at_the_models_length(trained, tmp_path) -> None:
    """An index that records no query length (built before the field existed): the model's own
    length, as every other route of the model reads it."""
    old = Path(shutil.copytree(trained, tmp_path / "old"))
    meta = json.loads((old / META_FILE).read_text())
    del meta["query_max_length"]
    (old / META_FILE).write_text(json.dumps(meta))
    searcher = open_any(SearchSettings(retriever="dense", index=str(old), device="cpu"))
    assert searcher.query_encoder.max_length == 16
