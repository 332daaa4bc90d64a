"""A diverged training and what it leaves (issue 39): training whose loss became NaN exited 0,
saved a NaN model and wrote bare ``NaN`` into its JSON log; a model with NaN weights built an
all-NaN index. Both are now one error line that says where, with nothing written from there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertTokenizerFast

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.modeling.base import load_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _trainer(config, toy_data, tiny_bert, nan_when):
    """A trainer whose model's loss hook returns NaN when ``nan_when(training, call)`` holds
    (``call``: 1-based count of the loss computations of that mode)."""
    from pyserini_moe.train.trainer import Trainer  # noqa: PLC0415

    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    loss_of, calls = model.compute_loss, {True: 0, False: 0}

    def compute_loss(*args, **kwargs) -> torch.Tensor:
        loss = loss_of(*args, **kwargs)
        calls[model.training] += 1
        return loss * float("nan") if nan_when(model.training, calls[model.training]) else loss

    model.compute_loss = compute_loss
    return Trainer(model, config, toy_data(), progress=False)


def _strict_log(out: Path) -> list[dict]:
    """The training log, refusing NaN / Infinity (not JSON, though Python's json writes them)."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"train_log.jsonl holds {constant}")

    return [json.loads(line, parse_constant=refuse)
            for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_a_nan_loss_stops_training_at_its_step(toy_data, tiny_bert, siamese_recipe) -> None:
    config = siamese_recipe.with_settings(["training.eval_every=1", "training.max_steps=3"])
    trainer = _trainer(config, toy_data, tiny_bert, lambda training, call: training and call == 2)
    with pytest.raises(UserError, match=r"^training diverged at step 2: the loss is nan; "):
        trainer.train()
    out = config.output_dir
    assert [entry["step"] for entry in _strict_log(out)] == [1]
    best = load_model(out / "best", device="cpu")  # step 1's model, the last sound one
    assert all(torch.isfinite(p).all() for p in best.parameters())
    assert not (out / "last").exists() and not (out / "train_summary.json").exists()


def test_a_nan_validation_loss_saves_no_best_model(toy_data, tiny_bert, siamese_recipe) -> None:
    config = siamese_recipe.with_settings(["training.eval_every=1"])
    trainer = _trainer(config, toy_data, tiny_bert, lambda training, call: not training)
    with pytest.raises(UserError, match="^training diverged at step 1: the validation loss is "
                                        "nan; "):
        trainer.train()
    out = config.output_dir
    assert not (out / "train_log.jsonl").exists()  # step 1's entry would hold the NaN
    assert not (out / "best").exists() and not (out / "checkpoint").exists()


def test_a_model_with_nan_weights_builds_no_index(tiny_bert, tiny_corpus, tmp_path,
                                                  capsys) -> None:
    """One token's embedding NaN: the documents holding it encode to NaN; the first is named."""
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    cat = BertTokenizerFast.from_pretrained(tiny_bert).convert_tokens_to_ids("cat")
    embeddings = next(p for name, p in model.named_parameters() if "word_embeddings" in name)
    with torch.no_grad():
        embeddings[cat] = float("nan")
    folder = model.save(tmp_path / "model")
    docs = [json.loads(line) for line in (tiny_corpus / "corpus.jsonl").read_text().splitlines()]
    first = next(d["_id"] for d in docs if "cat" in f"{d['title']} {d['text']}".split())
    assert first != docs[0]["_id"]  # the refusal names the bad document, not the first one
    index = tmp_path / "dense"
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(index), "--encoder", str(folder),
                                     "--device", "cpu", "--max-length", "64", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"error: {index}: document '{first}' encodes to NaN "
                                            "or infinite values"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no index, no temporary
