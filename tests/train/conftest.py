"""Tests here run tiny models: single-threaded (see ``one_thread`` in tests/conftest.py)."""

import json
from pathlib import Path

import pytest

WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    yield


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """A learnable task: 24 documents of three words, each query the text of its positive."""
    root = tmp_path_factory.mktemp("toy")
    texts = [f"{WORDS[i % 18]} {WORDS[(3 * i + 1) % 18]} {WORDS[(5 * i + 2) % 18]}"
             for i in range(24)]
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "qrels").mkdir()
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(24)))
    (root / "negatives.trec").write_text("".join(
        f"q{i} Q0 d{(i + k) % 24} {k} {10 - k} toy\n" for i in range(24) for k in range(1, 6)))
    return root
