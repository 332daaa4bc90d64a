"""GradCache passes on tiny random BERTs of every model kind: the cached gradient is the gradient
of the same chunks encoded with autograd (dropout and gate noise replayed), and with dropout off
it is the one-pass gradient; a recipe with ``grad_cache_chunk`` trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyserini_moe.modeling.base import Side
from pyserini_moe.train.collator import Collator
from pyserini_moe.train.config import from_dict
from pyserini_moe.train.grad_cache import cached_pass, chunks, concat, encode_chunked
from pyserini_moe.train.loop import set_seed
from pyserini_moe.train.trainer import Trainer, build_model

# One model per way a representation can reach the loss: dense (+ a sparse side and FLOPS),
# token vectors of differing lengths, a noisy gate with a balance term, a learned router with a
# regulariser over both sides.
MODELS = {
    "siamese": {"pooling": "mean"},
    "cotmote": {"variant": "mote", "pooling": "mean", "sparse_head": "mlm"},
    "came": {"shared_layers": 1, "dim": 8, "stages": "specialized"},
    "sbmoe": {"n_experts": 3},
    "taser": {"router": "seq", "every": 1},
}


def _trainer(toy: Path, bert3: Path, out: Path, model_type: str, **training) -> Trainer:
    raw = {"output_dir": str(out),
           "model": {"type": model_type, "backbone": str(bert3), "args": MODELS[model_type]},
           "data": {"collection": str(toy), "validation_fraction": 0.25, "seed": 3,
                    "num_negatives": 1, "query_max_length": 8, "passage_max_length": 8,
                    "negatives": {"source": "run", "run": str(toy / "negatives.trec")}},
           "training": {"learning_rate": 3e-3, "batch_size": 6, "temperature": 0.1, "seed": 11,
                        "device": "cpu", "flops_weight": {"query": 0.1, "passage": 0.05},
                        **training}}
    config = from_dict(raw, f"{model_type}.yaml")
    set_seed(config.training.seed)
    return Trainer(build_model(config.model, "cpu"), config, progress=False)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Equal up to float summation order. atol 1e-5: an embedding row sums one term per
    occurrence of its token, and chunking reorders that sum; on one machine CAME's word-embedding
    gradient differed by 2.7e-6 in one element of 3,392 (values ~1e-2). A wrong replay or a
    wrong scale moves gradients by orders more."""
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("model_type", list(MODELS))
def test_cached_gradient_is_the_gradient_of_the_same_chunks(toy, bert3, tmp_path,
                                                            model_type) -> None:
    trainer = _trainer(toy, bert3, tmp_path, model_type)
    model = trainer.model.train()
    batch = Collator(model, 8, 8)(trainer._data().epoch_batches(0, 5)[0])

    def loss_of(q, p):
        return trainer.loss_of(q, p, batch)

    torch.manual_seed(5)
    loss, parts = cached_pass(model, batch.queries, batch.passages, 3, loss_of)
    cached = _grads(model)
    torch.manual_seed(5)  # the same draws, in the same order: queries' chunks, then passages'
    direct_loss, direct_parts = loss_of(encode_chunked(model, batch.queries, Side.QUERY, 3),
                                        encode_chunked(model, batch.passages, Side.PASSAGE, 3))
    direct_loss.backward()
    assert not loss.requires_grad and loss.item() == pytest.approx(direct_loss.item(), rel=1e-5)
    assert parts == pytest.approx(direct_parts, rel=1e-5)
    _assert_same(cached, _grads(model))


@pytest.mark.parametrize("model_type", ["siamese", "cotmote", "came"])
def test_without_dropout_chunks_give_the_one_pass_gradient(toy, bert3, tmp_path,
                                                           model_type) -> None:
    trainer = _trainer(toy, bert3, tmp_path, model_type)
    model = trainer.model.eval()  # no dropout: chunking alone must not change anything
    batch = Collator(model, 8, 8)(trainer._data().epoch_batches(0, 5)[0])
    loss, _ = cached_pass(model, batch.queries, batch.passages, 2,
                          lambda q, p: trainer.loss_of(q, p, batch), scale=0.5)
    cached = _grads(model)
    one_pass, _ = trainer.loss(batch)
    (0.5 * one_pass).backward()
    assert loss.item() == pytest.approx(one_pass.item(), rel=1e-5)
    _assert_same(cached, _grads(model))


def test_chunks_cut_padding_and_concat_pads_token_vectors_back() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    parts = chunks({"input_ids": mask * 7, "attention_mask": mask}, 2)
    assert [p["attention_mask"].shape for p in parts] == [(2, 2), (1, 4)]
    from pyserini_moe.modeling.base import Encoded

    joined = concat([Encoded(multi=torch.ones(2, 2, 3), mask=parts[0]["attention_mask"],
                             aux_loss=torch.tensor(1.0)),
                     Encoded(multi=torch.ones(1, 4, 3), mask=parts[1]["attention_mask"],
                             aux_loss=torch.tensor(4.0))])
    assert joined.multi.shape == (3, 4, 3) and torch.equal(joined.mask, mask)
    assert joined.multi[0, 2:].abs().sum() == 0
    assert joined.aux_loss.item() == pytest.approx(2.0)  # (1 x 2 rows + 4 x 1 row) / 3


def test_a_recipe_with_grad_cache_trains_and_validates(toy, bert3, tmp_path) -> None:
    trainer = _trainer(toy, bert3, tmp_path / "gc", "cotmote", grad_cache_chunk=2, max_steps=3)
    trainer.train()
    log = [json.loads(line) for line in (tmp_path / "gc" / "train_log.jsonl").read_text()
           .splitlines()]
    assert len(log) == 3 and all(e["loss"] > 0 for e in log) and "flops_passage" in log[0]
    assert (tmp_path / "gc" / "best").is_dir()
