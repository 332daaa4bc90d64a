"""CoT-MAE pre-training of CoT-MoTE on a tiny random BERT: contextual spans, masking, the decoder
loss (causal, fed by the [CLS] bottleneck), a short run and its command line."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

from pyserini_moe.modeling import CotMoteEncoder, Side, load_model
from pyserini_moe.modeling.cotmae import ContextualMae, mask_tokens, mlm_heads_for
from pyserini_moe.pretrain import main as pretrain_main
from pyserini_moe.train.pretrain import (
    ContextExample,
    PretrainArgs,
    pretrain,
    pseudo_query_pairs,
    query_examples,
    span_examples,
)

DOCS = ["the cat sat on the mat. the dog sat on a mat. what is a model?",
        "dense retrieval is a model. sparse retrieval is a model.",
        "one sentence only"]


def mae(tiny_bert, variant: str = "mote") -> ContextualMae:
    torch.manual_seed(0)
    encoder = CotMoteEncoder.from_backbone(tiny_bert, variant=variant, device="cpu")
    return ContextualMae(encoder, mlm_heads_for(encoder, str(tiny_bert)))


def test_neighbouring_spans_cut_documents_at_a_sentence_boundary() -> None:
    examples = span_examples(DOCS, random.Random(0))
    assert len(examples) == 2  # the one-sentence document gives no pair
    for example, doc in zip(examples, DOCS):
        assert example.side == Side.PASSAGE and example.anchor and example.context
        assert doc in (f"{example.anchor} {example.context}", f"{example.context} {example.anchor}")


def test_query_pairs_train_both_experts() -> None:
    examples = query_examples([("what is a model", "dense retrieval is a model."), ("  ", "x")])
    assert examples == [ContextExample("dense retrieval is a model.", Side.PASSAGE,
                                       "what is a model"),
                        ContextExample("what is a model", Side.QUERY,
                                       "dense retrieval is a model.")]


def test_masking_picks_only_real_tokens_and_follows_the_ratio(tiny_bert) -> None:
    model = mae(tiny_bert)
    tok = model.encoder.tokenizer
    batch = model.encoder.tokenize(["the cat sat on the mat " * 10, "a dog"], Side.PASSAGE, 64)
    masked, labels = mask_tokens(batch["input_ids"], batch["attention_mask"], tok, 0.3,
                                 torch.Generator().manual_seed(0))
    chosen = labels != -100
    assert not chosen[batch["attention_mask"] == 0].any()  # never padding
    assert not chosen[:, 0].any()  # never [CLS]
    real = (batch["attention_mask"].bool() & ~torch.isin(
        batch["input_ids"], torch.tensor(tok.all_special_ids))).sum().item()
    assert 0.15 < chosen.sum().item() / real < 0.45
    torch.testing.assert_close(labels[chosen], batch["input_ids"][chosen])
    assert (masked[chosen] == tok.mask_token_id).float().mean() > 0.6


def _losses(model: ContextualMae, anchor: str, context: str) -> tuple[torch.Tensor, torch.Tensor]:
    enc = model.encoder
    anchors = enc.tokenize([anchor], Side.PASSAGE, 32)
    ctx = enc.tokenize([context], Side.PASSAGE, 32)
    labels = torch.full_like(anchors["input_ids"], -100)
    labels[0, 1] = anchors["input_ids"][0, 1]
    return model.loss(anchors, labels, ctx, Side.PASSAGE)


def test_the_decoder_reads_the_bottleneck_and_cannot_see_ahead(tiny_bert) -> None:
    model = mae(tiny_bert).eval()
    mlm, dec = _losses(model, "the cat sat on the mat", "a dog sat")
    assert mlm.item() > 0 and dec.item() > 0 and torch.isfinite(dec)
    # another anchor changes only the [CLS] vector the decoder reads: its loss changes
    _, other = _losses(model, "dense retrieval model", "a dog sat")
    assert not torch.isclose(dec, other)
    # causal: the decoder state at position i ignores the tokens after i
    enc = model.encoder
    ctx = enc.tokenize(["a dog sat on", "a dog ran to"], Side.PASSAGE, 16)
    embeds = enc.backbone.get_input_embeddings()(ctx["input_ids"])
    out = model.decoder(inputs_embeds=embeds, attention_mask=ctx["attention_mask"],
                        use_cache=False).last_hidden_state
    same = 3  # [CLS] a dog: identical prefixes
    torch.testing.assert_close(out[0, :same], out[1, :same])
    assert not torch.allclose(out[0, same:], out[1, same:])


def test_a_short_pretraining_run_lowers_the_loss_and_saves_a_cotmote_model(tiny_bert,
                                                                            tmp_path) -> None:
    examples = span_examples(DOCS[:2] * 4, random.Random(1)) + query_examples(
        [("what is a model", "dense retrieval is a model.")])
    args = PretrainArgs(backbone=str(tiny_bert), corpora=("toy",), max_steps=12, batch_size=4,
                        max_length=24, context_max_length=16, learning_rate=3e-3, seed=3)
    model_dir = pretrain(args, tmp_path / "pt", torch.device("cpu"), examples, progress=False)
    log = [json.loads(line) for line in (tmp_path / "pt" / "pretrain_log.jsonl").read_text()
           .splitlines()]
    assert len(log) == 12 and {"mlm_loss", "decoder_loss", "lr"} <= set(log[0])
    first = sum(e["loss"] for e in log[:3])
    last = sum(e["loss"] for e in log[-3:])
    assert last < first
    loaded = load_model(model_dir, device="cpu")
    assert isinstance(loaded, CotMoteEncoder) and loaded.variant == "mote"
    assert not any(k.startswith("decoder") for k in loaded.state_dict())  # decoder discarded
    saved = json.loads((tmp_path / "pt" / "pretrain_args.json").read_text())
    assert saved["examples"] == len(examples) and saved["max_steps"] == 12
    # fine-tuning starts from it
    start = CotMoteEncoder.from_backbone(model_dir, device="cpu").eval()
    torch.testing.assert_close(start.encode(["a dog"], Side.QUERY).dense,
                               loaded.encode(["a dog"], Side.QUERY).dense)


def test_pretraining_trains_each_expert_on_its_own_side(tiny_bert) -> None:
    model = mae(tiny_bert).train()
    enc = model.encoder
    anchors = enc.tokenize(["what is a model"], Side.QUERY, 16)
    labels = anchors["input_ids"].masked_fill(torch.ones_like(anchors["input_ids"]).bool(), -100)
    labels[0, 2] = anchors["input_ids"][0, 2]
    mlm, dec = model.loss(anchors, labels, enc.tokenize(["a model"], Side.PASSAGE, 8),
                          Side.QUERY)
    (mlm + dec).backward()
    block = enc.expert_layers[0]
    q_grad = block.experts[0].intermediate.dense.weight.grad
    p_grad = block.experts[1].intermediate.dense.weight.grad
    assert q_grad is not None and q_grad.abs().sum() > 0
    assert p_grad is None or p_grad.abs().sum() == 0
    switched = ContextualMae(enc, list(model.mlm_heads), switch_experts=True)
    assert switched.route_side(Side.QUERY) == Side.PASSAGE


def test_pseudo_queries_file_errors(tiny_corpus, tmp_path) -> None:
    bad = tmp_path / "pq.tsv"
    bad.write_text("no tab here\n")
    with pytest.raises(ValueError, match="expected CORPUS=FILE"):
        pseudo_query_pairs(str(bad))
    with pytest.raises(ValueError, match=r"pq.tsv:1: expected docid<TAB>query"):
        pseudo_query_pairs(f"{tiny_corpus}={bad}")
    bad.write_text("no-such-doc\twhat is it\n")
    with pytest.raises(ValueError, match=f"'no-such-doc' is not in {re.escape(str(tiny_corpus))}"):
        pseudo_query_pairs(f"{tiny_corpus}={bad}")


def test_command_line_errors(tmp_path, capsys) -> None:
    from pyserini_moe.cli import run_main

    assert run_main(pretrain_main, ["--output-dir", str(tmp_path / "o")]) == 2
    assert "nothing to pre-train on" in capsys.readouterr().err
    (tmp_path / "exists").mkdir()
    assert run_main(pretrain_main, ["--corpus", "scifact", "--output-dir",
                                    str(tmp_path / "exists")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert run_main(pretrain_main, ["--queries", "scifact", "--output-dir",
                                    str(tmp_path / "q"), "--max-steps", "1"]) == 2
    assert "COLLECTION:SPLIT" in capsys.readouterr().err


def test_an_mlm_sparse_head_is_the_head_pre_training_trains(tiny_bert, tmp_path) -> None:
    torch.manual_seed(0)
    encoder = CotMoteEncoder.from_backbone(tiny_bert, sparse_head="mlm", device="cpu")
    heads = mlm_heads_for(encoder, str(tiny_bert))
    assert all(a is b for a, b in zip(heads, encoder.sparse_heads))
    args = PretrainArgs(backbone=str(tiny_bert), sparse_head="mlm", corpora=("toy",),
                        max_steps=2, batch_size=4, max_length=24, context_max_length=16,
                        learning_rate=3e-3, seed=3)
    examples = span_examples(DOCS[:2] * 4, random.Random(1))
    model_dir = pretrain(args, tmp_path / "pt", torch.device("cpu"), examples, progress=False)
    from pyserini_moe.train.trainer import set_seed

    set_seed(3)  # the start pretrain() builds for seed 3
    start = CotMoteEncoder.from_backbone(tiny_bert, sparse_head="mlm", device="cpu")
    loaded = load_model(model_dir, device="cpu")
    assert loaded.args["sparse_head"] == "mlm"
    before = start.sparse_heads[0].transform.dense.weight
    after = loaded.sparse_heads[0].transform.dense.weight
    assert not torch.allclose(before, after)


def test_encoder_learning_rate_zero_trains_only_the_heads_and_decoder(tiny_bert, tmp_path) -> None:
    """The gentle recipe's extreme: a frozen encoder body, while the MLM head (the encoder's own
    mlm sparse head) and the decoder learn."""
    args = PretrainArgs(backbone=str(tiny_bert), sparse_head="mlm", corpora=("toy",),
                        max_steps=2, batch_size=4, max_length=24, context_max_length=16,
                        learning_rate=3e-3, encoder_learning_rate=0.0, seed=3)
    examples = span_examples(DOCS[:2] * 4, random.Random(1))
    model_dir = pretrain(args, tmp_path / "pt", torch.device("cpu"), examples, progress=False)
    from pyserini_moe.train.trainer import set_seed

    set_seed(3)  # the start pretrain() builds for seed 3
    start = CotMoteEncoder.from_backbone(tiny_bert, sparse_head="mlm", device="cpu").state_dict()
    after = load_model(model_dir, device="cpu").state_dict()
    assert start.keys() == after.keys()
    heads = [k for k in start if k.startswith("sparse_heads.") and "embedding_weight" not in k]
    assert heads and all(not torch.equal(start[k], after[k]) for k in heads
                         if "LayerNorm" not in k)
    for key in set(start) - set(heads):
        torch.testing.assert_close(after[key], start[key], atol=0, rtol=0, msg=key)
    assert json.loads((tmp_path / "pt" / "pretrain_args.json").read_text())[
        "encoder_learning_rate"] == 0.0


def test_a_negative_encoder_learning_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="encoder_learning_rate"):
        PretrainArgs(backbone="x", corpora=("toy",), encoder_learning_rate=-1.0).check()


def test_grad_accumulation_steps_once_per_accumulated_batch(tiny_bert, tmp_path,
                                                            monkeypatch) -> None:
    """The paper's batch of 2048 on one device: --batch-size 256 --grad-accumulation 8. Each
    optimizer step sees grad_accumulation forward passes; the log has one line per step with
    the mean of their losses."""
    import pyserini_moe.train.pretrain as module

    passes: list[tuple[int, float]] = []
    real_step = module._losses

    def counting_step(model, batch, args, generator):
        parts = real_step(model, batch, args, generator)
        passes.append((len(batch), (parts["mlm_loss"] + parts["decoder_loss"]).item()))
        return parts

    monkeypatch.setattr(module, "_losses", counting_step)
    args = PretrainArgs(backbone=str(tiny_bert), corpora=("toy",), max_steps=3, batch_size=4,
                        grad_accumulation=2, max_length=24, context_max_length=16,
                        learning_rate=3e-3, seed=3)
    examples = span_examples(DOCS[:2] * 4, random.Random(1))
    pretrain(args, tmp_path / "pt", torch.device("cpu"), examples, progress=False)
    log = [json.loads(line) for line in (tmp_path / "pt" / "pretrain_log.jsonl").read_text()
           .splitlines()]
    assert [size for size, _ in passes] == [4] * 6 and len(log) == 3
    for i, entry in enumerate(log):
        mean = (passes[2 * i][1] + passes[2 * i + 1][1]) / 2
        assert entry["loss"] == pytest.approx(mean, rel=1e-5)
    with pytest.raises(ValueError, match="grad_accumulation"):
        PretrainArgs(backbone="x", corpora=("toy",), grad_accumulation=0).check()
