"""A backbone used zero-shot encodes as its sentence-transformers configuration says (pooling,
normalisation, prompts), or as Pyserini's ``--encoder-class auto`` flags say: the vectors are
sentence-transformers' own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.biencoder import SiameseBiEncoder, sentence_transformers_settings

pytestmark = pytest.mark.usefixtures("one_thread")
QUERIES = ["what is dense retrieval", "cat sat on the mat"]
PASSAGES = ["a mixture of expert model", "the dog sat on a mat of the cat"]


def st_folder(tiny_bert: Path, folder: Path, pooling: str, normalize: bool,
              prompts: dict[str, str] | None = None) -> Path:
    """A sentence-transformers model on the tiny BERT, saved as such models are published."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(tiny_bert))
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling)]
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, prompts=prompts or {}, device="cpu").save(str(folder))
    return folder


def cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    return (ours * theirs).sum(1)


def compare(model, folder: Path, prompts: bool) -> None:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu")
    for side, texts, name in ((Side.QUERY, QUERIES, "query"), (Side.PASSAGE, PASSAGES, "passage")):
        ours = model.encode(texts, side, max_length=64).dense.numpy()
        theirs = st.encode(texts, prompt_name=name if prompts else None)
        assert cosines(ours, theirs).min() >= 0.9999
        assert np.allclose(np.linalg.norm(ours, axis=1), np.linalg.norm(theirs, axis=1),
                           rtol=1e-4)  # normalised or not, as theirs


def test_a_cls_pooled_unnormalised_model_gives_sentence_transformers_vectors(tiny_bert,
                                                                          tmp_path):
    folder = st_folder(tiny_bert, tmp_path / "cls", "cls", normalize=False)
    model = load_encoder(str(folder), device="cpu")
    assert model.args == {"pooling": "cls", "normalize": False}
    compare(model, folder, prompts=False)


def test_a_prefixed_model_gives_sentence_transformers_vectors(tiny_bert, tmp_path):
    folder = st_folder(tiny_bert, tmp_path / "e5", "mean", normalize=True,
                       prompts={"query": "query: ", "passage": "passage: "})
    model = load_encoder(str(folder), device="cpu")
    assert model.args["query_prefix"] == "query: " and model.args["passage_prefix"] == "passage: "
    compare(model, folder, prompts=True)
    # saved, the model keeps its prompts (and sentence-transformers reads them back)
    saved = tmp_path / "saved"
    model.save(saved)
    compare(load_encoder(str(saved), device="cpu"), saved, prompts=True)


def test_flags_override_the_configuration_and_default_without_one(tiny_bert, tmp_path):
    folder = st_folder(tiny_bert, tmp_path / "cls", "cls", normalize=False)
    model = load_encoder(str(folder), device="cpu", pooling="max", normalize=True,
                         query_prefix="q: ")
    assert model.args == {"pooling": "max", "normalize": True, "query_prefix": "q: "}
    plain = load_encoder(str(tiny_bert), device="cpu")  # a plain BERT folder: no such files
    assert sentence_transformers_settings(tiny_bert) == {}
    assert sentence_transformers_settings(tiny_bert, pooling="cls") == {"pooling": "cls"}
    assert plain.args == {"pooling": "mean", "normalize": True}
    prefixed = load_encoder(str(tiny_bert), device="cpu", query_prefix="query: ")
    a = prefixed.encode(QUERIES, Side.QUERY, 64).dense
    b = plain.encode(["query: " + q for q in QUERIES], Side.QUERY, 64).dense
    assert np.allclose(a.numpy(), b.numpy(), atol=1e-6)
    assert np.allclose(prefixed.encode(PASSAGES, Side.PASSAGE, 64).dense.numpy(),
                       plain.encode(PASSAGES, Side.PASSAGE, 64).dense.numpy(), atol=1e-6)


def test_settings_that_cannot_apply_are_one_error_line(tiny_bert, tmp_path):
    trained = tmp_path / "trained"
    SiameseBiEncoder.from_backbone(str(tiny_bert), device="cpu").save(trained)
    with pytest.raises(UserError, match="trained model"):
        load_encoder(str(trained), device="cpu", pooling="cls")
    folder = st_folder(tiny_bert, tmp_path / "sqrt", "mean", normalize=False)
    config = folder / "1_Pooling" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "pooling_mode": "mean_sqrt_len_tokens"}))
    with pytest.raises(UserError, match="--pooling"):
        load_encoder(str(folder), device="cpu")
    assert load_encoder(str(folder), device="cpu", pooling="mean").args["pooling"] == "mean"


def test_the_packaged_minilm_reads_as_before():
    assert sentence_transformers_settings("all-minilm-l6-v2") == {"pooling": "mean",
                                                                 "normalize": True}


def test_legacy_pooling_flags_are_read_too(tiny_bert, tmp_path):
    """Models published with sentence-transformers < 6 (and ours) write one flag per mode."""
    folder = st_folder(tiny_bert, tmp_path / "old", "cls", normalize=False)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
         "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}))
    assert sentence_transformers_settings(folder)["pooling"] == "cls"
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}))
    with pytest.raises(UserError, match="cls\\+mean"):
        sentence_transformers_settings(folder)
