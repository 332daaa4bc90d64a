"""encode_stream: the background tokenizer changes nothing but the waiting: same vectors as
encoding batch by batch (bit for bit on the CPU), same order, errors raised at their batch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SbMoeEncoder, SiameseBiEncoder
from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.pipeline import encode_stream

pytestmark = pytest.mark.usefixtures("one_thread")
BATCHES = [["a cat sat on the mat", "dense"], ["what is retrieval", "x y z w", "sparse experts"],
           ["mixture"]]


@pytest.mark.parametrize("make", [
    lambda p: SiameseBiEncoder.from_backbone(p, device="cpu"),
    lambda p: SbMoeEncoder.from_backbone(p, n_experts=3, device="cpu")])
def test_same_vectors_in_the_same_order_as_batch_by_batch(make, tiny_bert: Path) -> None:
    model = make(tiny_bert).eval()
    for side in (Side.QUERY, Side.PASSAGE):
        streamed = list(encode_stream(model, iter(BATCHES), side, 16, prefetch=2))
        assert [batch for batch, _ in streamed] == BATCHES
        for texts, (_, out) in zip(BATCHES, streamed, strict=True):
            assert torch.equal(out.dense, model.encode(texts, side, 16).dense)


def test_an_error_in_the_tokenizer_thread_is_raised_at_its_batch(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    stream = encode_stream(model, iter([["fine"], ["   "], ["never reached"]]), Side.QUERY, 16)
    assert next(stream)[1].dense.shape[0] == 1
    with pytest.raises(UserError, match="empty query"):
        next(stream)


def test_stopping_early_ends_the_thread(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    before = threading.active_count()
    stream = encode_stream(model, (["text"] for _ in range(100)), Side.PASSAGE, 16, prefetch=1)
    next(stream)
    stream.close()  # the consumer breaks off: the tokenizer thread must not stay blocked
    assert threading.active_count() == before


def test_an_encoder_without_encode_tokens_is_encoded_batch_by_batch() -> None:
    class Plain:
        def encode(self, texts, side, max_length, only=None):
            return len(texts)

    assert [n for _, n in encode_stream(Plain(), BATCHES, Side.PASSAGE, 16)] == [2, 3, 1]


def test_batches_of_records_are_encoded_by_their_texts(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    records = [[{"id": "d1", "text": "a cat"}], [{"id": "d2", "text": "dense"}]]
    pairs = list(encode_stream(model, records, Side.PASSAGE, 16,
                               texts=lambda batch: [r["text"] for r in batch]))
    assert [batch[0]["id"] for batch, _ in pairs] == ["d1", "d2"]
    assert torch.equal(pairs[1][1].dense, model.encode(["dense"], Side.PASSAGE, 16).dense)
