"""Tests here run tiny models: single-threaded (see ``one_thread`` in tests/conftest.py)."""

from collections.abc import Callable

import pytest

from pyserini_moe.train.data import TrainingData

WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]
TEXTS = [f"{WORDS[i % 18]} {WORDS[(3 * i + 1) % 18]} {WORDS[(5 * i + 2) % 18]}" for i in range(24)]


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    yield


@pytest.fixture
def toy_data() -> Callable[..., TrainingData]:
    """A learnable in-memory task: each query is the text of its positive passage; 18 training
    and 6 validation queries, each with 5 candidate negatives."""
    def make(num_negatives: int = 1) -> TrainingData:
        ids = [f"d{i}" for i in range(24)]
        return TrainingData(
            queries={f"q{i}": t for i, t in enumerate(TEXTS)},
            passages=dict(zip(ids, TEXTS)),
            positives={f"q{i}": frozenset({f"d{i}"}) for i in range(24)},
            train_pairs=[(f"q{i}", f"d{i}") for i in range(18)],
            validation_pairs=[(f"q{i}", f"d{i}") for i in range(18, 24)],
            candidates={f"q{i}": [f"d{(i + k) % 24}" for k in range(1, 6)] for i in range(24)},
            num_negatives=num_negatives, seed=3)
    return make
