"""A saved model folder never loads silently wrong elsewhere. A Siamese model is saved in the
sentence-transformers layout, so SentenceTransformer and AutoModel give its own vectors; every
other model's weights carry our prefixes under a name transformers' AutoModel and
sentence-transformers refuse (instead of initialising every weight at random). Our loader reads
both, and folders saved under the old weights name."""

from __future__ import annotations

import re

import pytest
import torch

from pyserini_moe.modeling import SiameseBiEncoder, Side, TaserEncoder, load_model
from pyserini_moe.modeling.folder import (
    AUTOMODEL_REFUSAL,
    TRANSFORMERS_WEIGHTS_FILE,
    WEIGHTS_FILE,
)


@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("cls", False), ("max", True)])
def test_a_siamese_model_loads_the_same_in_sentence_transformers_and_transformers(
        tiny_bert, tmp_path, pooling, normalize) -> None:
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, pooling=pooling, normalize=normalize,
                                           device="cpu").eval()
    with torch.no_grad():  # trained-like: away from the backbone it started from
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    folder = model.save(tmp_path / "model")
    texts = ["a cat sat on the mat", "dense retrieval"]
    ours = model.encode(texts, Side.QUERY).dense
    st = SentenceTransformer(str(folder), device="cpu")
    torch.testing.assert_close(torch.as_tensor(st.encode(texts)), ours, atol=1e-5, rtol=1e-5)
    backbone = AutoModel.from_pretrained(folder).eval()
    torch.testing.assert_close(backbone.embeddings.word_embeddings.weight,
                               model.backbone.embeddings.word_embeddings.weight)
    torch.testing.assert_close(load_model(folder, device="cpu").encode(texts, Side.QUERY).dense,
                               ours)


@pytest.mark.parametrize("name", ["taser", "sbmoe", "came"])
def test_moe_folders_load_in_sentence_transformers_through_our_module(name, tiny_bert, tiny_mlm,
                                                                      tmp_path) -> None:
    """transformers' AutoModel refuses the folder; sentence-transformers asks for
    trust_remote_code, then loads it through pyserini_moe's module, and encode_query /
    encode_document are the model's two sides."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from pyserini_moe.modeling import CameEncoder, SbMoeEncoder

    torch.manual_seed(0)
    build = {"taser": lambda: TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu"),
             "sbmoe": lambda: SbMoeEncoder.from_backbone(tiny_bert, n_experts=3, device="cpu"),
             "came": lambda: CameEncoder.from_backbone(tiny_mlm, shared_layers=1, dim=8,
                                                       device="cpu")}
    model = build[name]().eval()
    with torch.no_grad():  # query and passage sides apart, as after training
        for pname, param in model.named_parameters():
            if "experts" in pname or "gate" in pname or "stacks" in pname:
                param.add_(0.05 * torch.randn_like(param))
    folder = model.save(tmp_path / "model")
    assert (folder / WEIGHTS_FILE).is_file() and not (folder / TRANSFORMERS_WEIGHTS_FILE).exists()
    with pytest.raises(OSError):
        AutoModel.from_pretrained(folder)
    with pytest.raises(ValueError, match="trust_remote_code"):  # loud: our code, not theirs
        SentenceTransformer(str(folder), device="cpu")
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    texts = ["a cat sat on the mat", "dense retrieval"]
    only = "dense" if len(model.representations) > 1 else None
    for side, encode in ((Side.QUERY, st.encode_query), (Side.PASSAGE, st.encode_document)):
        expected = model.encode(texts, side, only=only).dense
        torch.testing.assert_close(torch.as_tensor(encode(texts)), expected, atol=1e-5,
                                   rtol=1e-5)
    with pytest.raises(ValueError, match="encode_query / encode_document"):
        st.encode(texts)
    again = load_model(folder, device="cpu")
    torch.testing.assert_close(again.encode(["a cat"], Side.QUERY, only=only).dense,
                               model.encode(["a cat"], Side.QUERY, only=only).dense)


def test_a_folder_saved_under_the_old_weights_name_still_loads(tiny_bert, tmp_path) -> None:
    torch.manual_seed(0)
    model = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").eval()
    folder = model.save(tmp_path / "old")
    (folder / WEIGHTS_FILE).rename(folder / TRANSFORMERS_WEIGHTS_FILE)
    torch.testing.assert_close(load_model(folder, device="cpu").encode(["a cat"], Side.QUERY).dense,
                               model.encode(["a cat"], Side.QUERY).dense)


def test_every_model_folder_has_a_card_and_training_adds_to_it(toy_data, tiny_bert, tmp_path,
                                                                siamese_recipe) -> None:
    from pyserini_moe.train.trainer import Trainer, build_model

    torch.manual_seed(0)
    folder = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").save(tmp_path / "m")
    card = (folder / "README.md").read_text()
    assert "| model type | `taser` |" in card and 'load_model("m")' in card
    assert "refuse this folder" in card
    # Hub metadata, and no path of this machine: the folder travels (push_to_hub)
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")
    assert "- mixture-of-experts" in card and "license: apache-2.0" in card
    assert str(tmp_path) not in card
    config = siamese_recipe
    Trainer(build_model(config.model, "cpu"), config, toy_data(1), progress=False).train()
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "## Training" in card and "2 steps of 4 queries" in card
    assert str(tmp_path) not in card
    assert 'SentenceTransformer(' in card  # a Siamese model is a sentence-transformers model


def test_a_splade_folder_is_a_sentence_transformers_sparse_encoder(tiny_mlm, tmp_path) -> None:
    """SparseEncoder loads a SPLADE folder through our module (trust_remote_code, as for the MoE
    folders) and its query and document vectors are the model's term weights; save() writes a
    folder that loads again and gives the same vectors."""
    from sentence_transformers import SparseEncoder

    from pyserini_moe.modeling import SpladeEncoder

    torch.manual_seed(0)
    model = SpladeEncoder.from_backbone(tiny_mlm, device="cpu").eval()
    folder = model.save(tmp_path / "splade")
    with pytest.raises(ValueError, match="trust_remote_code"):
        SparseEncoder(str(folder), device="cpu")
    st = SparseEncoder(str(folder), device="cpu", trust_remote_code=True)
    texts = ["a cat sat on the mat", "dense retrieval"]
    for side, encode in ((Side.QUERY, st.encode_query), (Side.PASSAGE, st.encode_document)):
        expected = model.encode(texts, side).sparse
        got = encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False)
        torch.testing.assert_close(torch.as_tensor(got), expected, atol=1e-5, rtol=1e-5)
    st.save(str(tmp_path / "copy"))
    again = SparseEncoder(str(tmp_path / "copy"), device="cpu", trust_remote_code=True)
    torch.testing.assert_close(
        torch.as_tensor(again.encode_query(texts, convert_to_tensor=True,
                                           convert_to_sparse_tensor=False)),
        model.encode(texts, Side.QUERY).sparse, atol=1e-5, rtol=1e-5)


def test_a_colbert_folder_is_a_sentence_transformers_multi_vector_encoder(tiny_bert,
                                                                          tmp_path) -> None:
    """MultiVectorEncoder loads a ColBERT folder through our module: each text's token vectors
    are the ones our multi-vector index holds (those our mask keeps)."""
    from sentence_transformers import MultiVectorEncoder

    from pyserini_moe.modeling import ColbertEncoder

    torch.manual_seed(0)
    model = ColbertEncoder.from_backbone(tiny_bert, device="cpu").eval()
    folder = model.save(tmp_path / "colbert")
    st = MultiVectorEncoder(str(folder), device="cpu", trust_remote_code=True)
    texts = ["a cat sat on the mat", "dense retrieval"]
    for side, encode in ((Side.QUERY, st.encode_query), (Side.PASSAGE, st.encode_document)):
        out = model.encode(texts, side)
        got = encode(texts)
        for i, tokens in enumerate(got):
            expected = out.multi[i][out.mask[i].bool()]
            torch.testing.assert_close(torch.as_tensor(tokens), expected, atol=1e-5, rtol=1e-5)


def test_automodel_refuses_each_moe_folder_naming_how_to_load_it(saved) -> None:
    """transformers' AutoModel (and so Pyserini's ``auto`` encoder) on a folder whose weights are
    not a plain backbone's fails naming this package's loader, not transformers' generic "no
    file named model.safetensors"; a Siamese folder is a plain backbone and loads."""
    from transformers import AutoModel

    model = load_model(saved, device="cpu")
    if model.weights_file == TRANSFORMERS_WEIGHTS_FILE:
        backbone = AutoModel.from_pretrained(saved)
        torch.testing.assert_close(backbone.embeddings.word_embeddings.weight,
                                   model.backbone.embeddings.word_embeddings.weight)
        return
    with pytest.raises(OSError, match=re.escape(AUTOMODEL_REFUSAL)) as refused:
        AutoModel.from_pretrained(saved)
    assert "pyserini_moe.load_model" in str(refused.value)
    assert not (saved / AUTOMODEL_REFUSAL).exists()


def test_a_sentence_transformers_model_saved_over_ours_is_two_models(tiny_bert, tmp_path) -> None:
    """SentenceTransformer.save of a plain model into a TASER folder left TASER's files beside
    the new ones: sentence-transformers loaded the one, load_model the other, in silence."""
    from sentence_transformers import SentenceTransformer

    from pyserini_moe.errors import UserError

    folder = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").save(tmp_path / "m")
    plain = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "plain")
    SentenceTransformer(str(plain), device="cpu").save(str(folder))
    with pytest.raises(UserError, match="holds two models"):
        load_model(folder, device="cpu")


def test_sentence_transformers_save_into_an_index_is_refused(tiny_bert, tiny_corpus,
                                                             tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    import pyserini_moe as pm

    folder = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").save(tmp_path / "m")
    index = pm.build_index("dense", corpus=tiny_corpus, encoder=folder, index=tmp_path / "i")
    before = sorted(p.name for p in index.iterdir())
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    with pytest.raises(FileExistsError, match="is an index, not a model"):
        st.save(str(index))
    assert sorted(p.name for p in index.iterdir()) == before


def test_sentence_transformers_saves_again_over_its_own_model_folder(tiny_bert, tmp_path) -> None:
    """A model folder (its marker is also the legacy index marker) was taken for an index: a
    second save, or a save into the folder loaded, was refused and lost the configuration file
    sentence-transformers had just written."""
    from sentence_transformers import SentenceTransformer

    from pyserini_moe.outputs import output_kind

    model = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").eval()
    folder = model.save(tmp_path / "m")
    assert output_kind(folder) == "a model"
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    for target in (tmp_path / "copy", tmp_path / "copy", folder):
        st.save(str(target))
        assert (target / "config_sentence_transformers.json").is_file()
        torch.testing.assert_close(load_model(target, device="cpu").encode(["a cat"],
                                                                           Side.QUERY).dense,
                                   model.encode(["a cat"], Side.QUERY).dense)


@pytest.mark.parametrize("loader", ["SparseEncoder", "MultiVectorEncoder"])
def test_a_dense_folder_is_refused_by_another_sentence_transformers_class(loader, tiny_mlm,
                                                                          tmp_path) -> None:
    """SparseEncoder would convert a dense MoE folder by stacking an untrained sparse head on
    our module, and encode without an error: the load is refused naming the class to use (and,
    for a model with term weights, how to get them)."""
    import sentence_transformers

    from pyserini_moe.modeling import CotMoteEncoder

    folder = CotMoteEncoder.from_backbone(tiny_mlm, device="cpu").save(tmp_path / "cotmote")
    with pytest.raises(ValueError, match=r"as SentenceTransformer\(folder.*\.sparse"):
        getattr(sentence_transformers, loader)(str(folder), device="cpu",
                                               trust_remote_code=True)
