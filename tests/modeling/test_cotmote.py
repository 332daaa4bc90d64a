"""CoT-MoTE on tiny random BERTs: Q-FFN / P-FFN routing by side, dense and sparse heads, the
variants, save/load, and a training step through the trainer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from pyserini_moe.modeling import CotMoteEncoder, SiameseBiEncoder, Side, load_model
from pyserini_moe.modeling.heads import SpladeHead, keep_top_k
from pyserini_moe.train.config import from_dict, load_config
from pyserini_moe.train.trainer import Trainer, parameter_groups

ENCODERS = Path(__file__).resolve().parents[2] / "encoders"


def make(tiny_bert: Path, **args) -> CotMoteEncoder:
    torch.manual_seed(0)
    return CotMoteEncoder.from_backbone(tiny_bert, device="cpu", **args).eval()


def perturb(model: CotMoteEncoder, expert: int) -> None:
    """Make one expert of every block differ from the FFN it was copied from."""
    with torch.no_grad():
        for block in model.expert_layers:
            block.experts[expert].intermediate.dense.weight.mul_(1.5)


def test_every_block_gets_a_query_and_a_passage_ffn(tiny_bert) -> None:
    model = make(tiny_bert)
    layers = model.backbone.encoder.layer
    assert len(model.expert_layers) == len(layers) == 2
    assert all(len(block.experts) == 2 and block.router == "det" for block in model.expert_layers)
    siamese = make(tiny_bert, variant="siamese")
    assert siamese.expert_layers == () and siamese.passage_backbone is None
    separate = make(tiny_bert, variant="separate")
    assert separate.passage_backbone is not None
    assert separate.passage_backbone is not separate.backbone
    # Attention is shared in MoTE: one copy of it per layer; FFNs: two per layer.
    names = [n for n, _ in model.named_parameters()]
    assert sum(".attention.self.query.weight" in n for n in names) == 2
    assert sum(".intermediate.dense.weight" in n for n in names) == 4


def test_queries_never_touch_the_passage_ffn_and_passages_never_the_query_ffn(tiny_bert,
                                                                              texts) -> None:
    model = make(tiny_bert)
    calls: list[tuple[str, int]] = []
    for block in model.expert_layers:
        for index, expert in enumerate(block.experts):
            expert.register_forward_hook(
                lambda module, args, out, index=index: calls.append((current, index)))
    current = "query"
    model.encode(texts, Side.QUERY)
    current = "passage"
    model.encode(texts, Side.PASSAGE)
    assert calls.count(("query", 0)) == 2 and calls.count(("passage", 1)) == 2
    assert ("query", 1) not in calls and ("passage", 0) not in calls


def test_untrained_mote_equals_the_siamese_model_and_experts_then_diverge(tiny_bert,
                                                                         texts) -> None:
    mote, siamese = make(tiny_bert), make(tiny_bert, variant="siamese")
    for side in (Side.QUERY, Side.PASSAGE):
        a, b = mote.encode(texts, side), siamese.encode(texts, side)
        torch.testing.assert_close(a.dense, b.dense)
        torch.testing.assert_close(a.sparse, b.sparse)
    perturb(mote, 1)  # only the P-FFN changes: queries keep their vectors
    torch.testing.assert_close(mote.encode(texts, Side.QUERY).dense,
                               siamese.encode(texts, Side.QUERY).dense)
    assert not torch.allclose(mote.encode(texts, Side.PASSAGE).dense,
                              siamese.encode(texts, Side.PASSAGE).dense)


def test_dense_is_the_last_layer_cls_and_sparse_is_eq_4(tiny_bert, texts) -> None:
    model = make(tiny_bert, variant="siamese", sparse_top_k=0)
    batch = model.tokenize(texts, Side.PASSAGE, 16)
    hidden = model.backbone(**batch).last_hidden_state
    out = model.encode(texts, Side.PASSAGE)
    torch.testing.assert_close(out.dense, hidden[:, 0])
    embeddings = model.backbone.get_input_embeddings().weight
    logits = hidden @ embeddings.T  # h_i E^T, no transform, no bias
    logits = logits.masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
    torch.testing.assert_close(out.sparse, torch.log1p(torch.relu(logits)).max(1).values)


def test_sparse_pooling_on_a_hand_computed_example() -> None:
    config = type("C", (), {"hidden_size": 2})()
    embeddings = torch.nn.Embedding(3, 2)
    with torch.no_grad():
        embeddings.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))
    head = SpladeHead(config, embeddings, transform=False)
    hidden = torch.tensor([[[2.0, -1.0], [0.5, 3.0], [9.0, 9.0]]])  # the third token is padding
    mask = torch.tensor([[1, 1, 0]])
    # token 1: logits (2, -1, -1); token 2: (0.5, 3, -3.5); max -> (2, 3, -1) -> log1p(relu)
    expected = torch.tensor([[math.log(3.0), math.log(4.0), 0.0]])
    torch.testing.assert_close(head(hidden, mask), expected)


def test_top_k_keeps_the_largest_weights_of_each_row() -> None:
    weights = torch.tensor([[0.1, 0.9, 0.0, 0.5], [3.0, 1.0, 2.0, 0.0]])
    torch.testing.assert_close(keep_top_k(weights, 2),
                               torch.tensor([[0.0, 0.9, 0.0, 0.5], [3.0, 0.0, 2.0, 0.0]]))
    torch.testing.assert_close(keep_top_k(weights, 0), weights)


def test_scores_are_dense_plus_sparse_and_only_skips_the_other_head(tiny_bert, texts) -> None:
    model = make(tiny_bert, sparse_top_k=5)
    q, p = model.encode(texts[:2], Side.QUERY), model.encode(texts, Side.PASSAGE)
    assert ((q.sparse > 0).sum(-1) <= 5).all()
    torch.testing.assert_close(model.score(q, p), q.dense @ p.dense.T + q.sparse @ p.sparse.T)
    dense_only = model.encode(texts, Side.PASSAGE, only="dense")
    sparse_only = model.encode(texts, Side.PASSAGE, only="sparse")
    assert dense_only.sparse is None and sparse_only.dense is None
    torch.testing.assert_close(dense_only.dense, p.dense)
    torch.testing.assert_close(sparse_only.sparse, p.sparse)


@pytest.mark.parametrize("variant", ["mote", "siamese", "separate"])
def test_save_and_load_round_trip(tiny_bert, texts, tmp_path, variant) -> None:
    model = make(tiny_bert, variant=variant, sparse_top_k=7)
    if variant == "mote":
        perturb(model, 0)
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m", device="cpu")
    assert isinstance(loaded, CotMoteEncoder) and loaded.variant == variant
    assert loaded.sparse_top_k == 7
    for side in (Side.QUERY, Side.PASSAGE):
        a, b = model.encode(texts, side), loaded.encode(texts, side)
        torch.testing.assert_close(a.dense, b.dense)
        torch.testing.assert_close(a.sparse, b.sparse)
    # a saved model is also a starting point (pre-training output -> fine-tuning)
    again = CotMoteEncoder.from_backbone(tmp_path / "m", variant=variant, device="cpu")
    torch.testing.assert_close(again.eval().encode(texts, Side.PASSAGE).dense,
                               model.encode(texts, Side.PASSAGE).dense)


def test_bad_arguments_and_a_saved_model_of_another_variant(tiny_bert, tmp_path) -> None:
    with pytest.raises(ValueError, match="variant: must be one of"):
        make(tiny_bert, variant="moe")
    with pytest.raises(ValueError, match="sparse_top_k"):
        make(tiny_bert, sparse_top_k=-1)
    with pytest.raises(ValueError, match="pooling"):
        make(tiny_bert, pooling="first")
    make(tiny_bert, variant="siamese").save(tmp_path / "siamese")
    with pytest.raises(ValueError, match="not a cotmote mote"):
        CotMoteEncoder.from_backbone(tmp_path / "siamese", variant="mote", device="cpu")
    SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "other")
    with pytest.raises(ValueError, match="siamese model"):
        CotMoteEncoder.from_backbone(tmp_path / "other", device="cpu")


def test_one_training_step_updates_both_experts_through_the_hybrid_loss(tiny_bert,
                                                                       tmp_path) -> None:
    config = from_dict({
        "output_dir": str(tmp_path / "run"),
        "model": {"type": "cotmote", "backbone": str(tiny_bert)},
        "data": {"collection": "toy", "query_max_length": 8, "passage_max_length": 12},
        "training": {"learning_rate": 1e-3, "batch_size": 3, "device": "cpu",
                     "flops_weight": 0.01},
    }, "toy.yaml")
    model = make(tiny_bert).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(model, config, progress=False)
    from pyserini_moe.train.collator import Batch

    queries = model.tokenize(["what is dense", "cat sat", "a model"], Side.QUERY, 8)
    passages = model.tokenize(["dense retrieval is", "the cat sat on the mat",
                               "mixture of experts model", "the dog"], Side.PASSAGE, 12)
    batch = Batch(queries, passages, torch.arange(3))
    loss, parts = trainer.loss(batch)
    assert "flops_query" in parts and "flops_passage" in parts
    optimizer = torch.optim.AdamW(parameter_groups(model, config.training), lr=1e-3)
    loss.backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(".experts.0." in n for n in changed) and any(".experts.1." in n for n in changed)
    assert any("attention" in n for n in changed)


@pytest.mark.parametrize("name,variant", [("cotmote-minilm", "mote"),
                                          ("cotmote-siamese-minilm", "siamese"),
                                          ("cotmote-separate-minilm", "separate")])
def test_the_recipes_load(name, variant) -> None:
    config = load_config(ENCODERS / f"{name}.yaml")
    assert config.model.type == "cotmote" and config.model.args["variant"] == variant
    assert config.data.collection == "scifact"


@pytest.mark.parametrize("variant", ["mote", "separate"])
def test_an_mlm_sparse_head_puts_the_transform_and_bias_before_e(tiny_bert, texts, tmp_path,
                                                                 variant) -> None:
    model = make(tiny_bert, variant=variant, sparse_top_k=0, sparse_head="mlm")
    for encoder, head in zip(model.encoders(), model.sparse_heads):
        assert head.transform is not None and head.bias is not None
        assert head.embedding_weight is encoder.get_input_embeddings().weight  # tied, not copied
    if variant == "separate":  # two encoders, but one starting point: the same head, copied
        query_head, passage_head = model.sparse_heads
        assert passage_head.transform is not query_head.transform
        for a, b in zip(query_head.parameters(), passage_head.parameters()):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(model.encode(texts, Side.QUERY, 16).sparse,
                                   model.encode(texts, Side.PASSAGE, 16).sparse)
    batch = model.tokenize(texts, Side.PASSAGE, 16)
    hidden = model.hidden_states(batch["input_ids"], batch["attention_mask"], Side.PASSAGE)
    head = model.encoder_for(Side.PASSAGE)[1]
    logits = head.transform(hidden) @ head.embedding_weight.T + head.bias
    logits = logits.masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
    torch.testing.assert_close(model.encode(texts, Side.PASSAGE).sparse,
                               torch.log1p(torch.relu(logits)).max(1).values)
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m", device="cpu")
    assert loaded.args["sparse_head"] == "mlm"
    torch.testing.assert_close(loaded.encode(texts, Side.QUERY).sparse,
                               model.encode(texts, Side.QUERY).sparse)
    with pytest.raises(ValueError, match="sparse head"):
        CotMoteEncoder.from_backbone(tmp_path / "m", variant=variant, device="cpu")
    with pytest.raises(ValueError, match="sparse_head: must be one of plain, mlm"):
        make(tiny_bert, sparse_head="splade")
