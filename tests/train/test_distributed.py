"""Data-parallel training: two gloo processes under torchrun train exactly like one process
(in-batch negatives gathered across ranks, gradients summed), for dense and multi-vector models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModel, AutoTokenizer

from pyserini_moe.modeling import load_model
from pyserini_moe.train.distributed import Ranks

WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]


def test_ranks_take_contiguous_slices_of_every_batch() -> None:
    batch = list(range(7))
    assert [Ranks(r, 2).local(batch) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6]]
    assert Ranks(1, 3).counts(7) == [3, 2, 2]
    with pytest.raises(ValueError, match="batch_size"):
        Ranks(0, 4).counts(3)


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory) -> Path:
    """A backbone without dropout (so one and two processes compute the same thing), a small
    collection with training qrels and a run to draw hard negatives from."""
    root = tmp_path_factory.mktemp("dist")
    backbone = AutoModel.from_pretrained(tiny_bert, hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
    backbone.save_pretrained(root / "backbone")
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(root / "backbone")
    data = root / "toy"
    (data / "qrels").mkdir(parents=True)
    n = 16
    docs = [" ".join(WORDS[(i * k) % 18] for k in range(1, 4 + i % 5)) for i in range(n)]
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(docs)))
    (data / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": " ".join(t.split()[:2 + i % 3])}) + "\n"
        for i, t in enumerate(docs)))
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(n)))
    (root / "negatives.trec").write_text("".join(
        f"q{i} Q0 d{(i + k) % n} {k} {10 - k} run\n" for i in range(n) for k in range(1, 5)))
    return root


def _recipe(setup: Path, model: dict) -> Path:
    recipe = {
        "output_dir": str(setup / "unused"),
        "model": {"backbone": str(setup / "backbone"), **model},
        "data": {"collection": str(setup / "toy"), "validation_fraction": 0.0,
                 "num_negatives": 1, "negatives": {"source": "run",
                                                   "run": str(setup / "negatives.trec"),
                                                   "depth": 4},
                 "query_max_length": 8, "passage_max_length": 12},
        "training": {"learning_rate": 5e-3, "batch_size": 6, "epochs": 2, "temperature": 0.5,
                     "warmup_ratio": 0.0, "device": "cpu", "seed": 7},
    }
    path = setup / f"{model['type']}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _train(recipe: Path, out: Path, processes: int) -> list[dict]:
    launcher = [sys.executable, "-m", "pyserini_moe.train"] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={processes}", "-m", "pyserini_moe.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*launcher, "--config", str(recipe), "--output-dir", str(out),
                           "--quiet"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("model", [{"type": "siamese", "args": {"pooling": "mean"}},
                                   {"type": "colbert", "args": {"dim": 8}}],
                         ids=["dense", "multivector"])
def test_two_gloo_processes_train_like_one(setup, tmp_path, model) -> None:
    recipe = _recipe(setup, model)
    one = _train(recipe, tmp_path / "one", 1)
    two = _train(recipe, tmp_path / "two", 2)
    assert len(one) == len(two) == 6  # 16 queries, batches of 6 -> 3 steps per epoch, 2 epochs
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-5), (a, b)
    assert one[-1]["loss"] < one[0]["loss"]  # it learns at all
    m1, m2 = (load_model(tmp_path / d / "last", device="cpu").state_dict() for d in ("one", "two"))
    for name in m1:
        torch.testing.assert_close(m2[name], m1[name], atol=1e-5, rtol=1e-4)
