import json

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import (
    ColbertEncoder,
    DprBiEncoder,
    Encoded,
    SiameseBiEncoder,
    Side,
    SpladeEncoder,
    load_model,
)
from pyserini_moe.modeling.backbone import BackboneNotFoundError
from pyserini_moe.modeling.losses import contrastive_loss, flops

MODELS = {
    "siamese": lambda path: SiameseBiEncoder.from_backbone(path, device="cpu"),
    "siamese-cls": lambda path: SiameseBiEncoder.from_backbone(path, pooling="cls",
                                                               normalize=False, device="cpu"),
    "dpr": lambda path: DprBiEncoder.from_backbone(path, device="cpu"),
    "splade": lambda path: SpladeEncoder.from_backbone(path, device="cpu"),
    "colbert": lambda path: ColbertEncoder.from_backbone(path, dim=16, device="cpu"),
}


@pytest.fixture(params=sorted(MODELS))
def model(request, tiny_bert, tiny_mlm):
    # SPLADE from a checkpoint with an MLM head: without one the head starts deliberately sparse
    # (bias -3), which on a 32-dim toy model leaves every logit below zero.
    return MODELS[request.param](tiny_mlm if request.param == "splade" else tiny_bert).eval()


def _fields(enc: Encoded) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(enc).items() if v is not None}


def test_shapes(model, texts) -> None:
    q = model.encode(texts[:2], Side.QUERY)
    p = model.encode(texts, Side.PASSAGE)
    assert model.score(q, p).shape == (2, 3)
    for enc, n in ((q, 2), (p, 3)):
        if "dense" in model.representations:
            assert enc.dense.shape == (n, 32)
        if "sparse" in model.representations:
            assert enc.sparse.shape == (n, len(model.tokenizer))
            assert (enc.sparse >= 0).all()
        if "multi" in model.representations:
            assert enc.multi.shape[:2] == enc.mask.shape and enc.multi.shape[::2] == (n, 16)
    if model.args.get("normalize"):
        vectors = q.dense if q.dense is not None else q.multi[q.mask.bool()]
        torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(len(vectors)))


def test_save_load_round_trip(model, tmp_path, texts) -> None:
    model.save(tmp_path / "saved")
    loaded = load_model(tmp_path / "saved", device="cpu")
    assert type(loaded) is type(model) and loaded.args == model.args
    for side in Side:
        before, after = _fields(model.encode(texts, side)), _fields(loaded.encode(texts, side))
        assert before.keys() == after.keys()
        for k in before:
            torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)


def test_dpr_saves_two_configs_and_two_encoders(tiny_bert, tmp_path, texts) -> None:
    model = DprBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    with torch.no_grad():  # make the encoders differ, as after training
        model.passage_encoder.embeddings.word_embeddings.weight.mul_(2)
    model.save(tmp_path / "dpr")
    assert (tmp_path / "dpr" / "config.json").is_file()
    assert (tmp_path / "dpr" / "passage" / "config.json").is_file()
    loaded = load_model(tmp_path / "dpr", device="cpu")
    q, p = loaded.encode(texts, Side.QUERY).dense, loaded.encode(texts, Side.PASSAGE).dense
    assert not torch.allclose(q, p)
    torch.testing.assert_close(p, model.encode(texts, Side.PASSAGE).dense, rtol=0, atol=0)


def test_splade_stays_tied_after_loading(tiny_bert, tiny_mlm, tmp_path) -> None:
    model = SpladeEncoder.from_backbone(tiny_bert, device="cpu")
    assert not model.pretrained_head
    assert SpladeEncoder.from_backbone(tiny_mlm, device="cpu").pretrained_head
    model.save(tmp_path / "splade")
    loaded = load_model(tmp_path / "splade", device="cpu")
    assert loaded.head.embedding_weight is loaded.backbone.get_input_embeddings().weight


def test_splade_keeps_its_top_k_terms_per_side_in_training_and_after_loading(
        tiny_mlm, texts, tmp_path) -> None:
    model = SpladeEncoder.from_backbone(tiny_mlm, device="cpu", query_top_k=2, passage_top_k=3)
    full = SpladeEncoder.from_backbone(tiny_mlm, device="cpu").eval()
    model.eval()
    for side, k in ((Side.QUERY, 2), (Side.PASSAGE, 3)):
        cut, whole = model.encode(texts, side).sparse, full.encode(texts, side).sparse
        assert ((cut > 0).sum(1) <= k).all() and (cut > 0).any()
        top = whole.topk(k, dim=1)  # the same weights, the k largest kept
        torch.testing.assert_close(cut.gather(1, top.indices), top.values)
    model.save(tmp_path / "cut")
    loaded = load_model(tmp_path / "cut", device="cpu")
    assert loaded.args == {"query_top_k": 2, "passage_top_k": 3}
    assert ((loaded.encode(texts, Side.QUERY).sparse > 0).sum(1) <= 2).all()
    model.train()  # the cut holds in training too; the gradient reaches the kept terms only
    out = model(**model.tokenize(texts, Side.PASSAGE, 32), side=Side.PASSAGE).sparse
    assert ((out > 0).sum(1) <= 3).all()
    with pytest.raises(UserError, match="query_top_k: must be >= 0"):
        SpladeEncoder.from_backbone(tiny_mlm, device="cpu", query_top_k=-1)


def test_splade_padding_does_not_change_weights(tiny_bert, texts) -> None:
    model = SpladeEncoder.from_backbone(tiny_bert, device="cpu").eval()
    alone = model.encode(texts[2:], Side.PASSAGE).sparse
    padded = model.encode(["the cat sat on the mat of the dog, what a mixture", texts[2]],
                          Side.PASSAGE).sparse
    torch.testing.assert_close(padded[1:], alone, rtol=1e-5, atol=1e-6)


def test_gradient_reaches_every_parameter(model, texts) -> None:
    model.train()
    q = model(**model.tokenize(texts[:2], Side.QUERY, 32), side=Side.QUERY)
    p = model(**model.tokenize(texts, Side.PASSAGE, 32), side=Side.PASSAGE)
    loss = contrastive_loss(model.score(q, p), torch.tensor([0, 1]), temperature=0.1)
    if q.sparse is not None:
        loss = loss + flops(q.sparse) + flops(p.sparse)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_load_model_without_metadata_is_a_clear_error(tiny_bert) -> None:
    with pytest.raises(FileNotFoundError, match="not a saved pyserini-moe model"):
        load_model(tiny_bert)


def test_saved_metadata_names_the_type(tiny_bert, tmp_path) -> None:
    ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu").save(tmp_path / "c")
    meta = json.loads((tmp_path / "c" / "pyserini_moe.json").read_text())
    assert meta == {"model_type": "colbert", "args": {"dim": 16, "normalize": True}}


@pytest.mark.parametrize("cls", [SiameseBiEncoder, DprBiEncoder, SpladeEncoder, ColbertEncoder])
def test_unknown_backbone(cls) -> None:
    with pytest.raises(BackboneNotFoundError):
        cls.from_backbone("no-such-org/no-such-backbone-xyz", device="cpu")


def test_unknown_pooling_rejected(tiny_bert) -> None:
    with pytest.raises(ValueError, match="pooling: must be one of cls, mean, max"):
        SiameseBiEncoder.from_backbone(tiny_bert, pooling="median", device="cpu")
