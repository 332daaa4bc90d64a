"""Encoding that keeps the model busy: the next batches are tokenized in a background thread
while the model encodes the current one.

Tokenizing in the calling thread leaves a GPU idle between batches (issue 36: every model topped
out near 1,100 passages/s on an H100 whatever its size). Here a thread tokenizes ahead into a
bounded queue (Hugging Face's fast tokenizers release the GIL), pins the batch's memory when the
model is on CUDA, and the model's thread copies it without blocking. Batches keep their texts and
their order, so the vectors are exactly those of :meth:`RetrievalModel.encode` batch by batch.
An encoder without :meth:`~pyserini_moe.modeling.base.RetrievalModel.encode_tokens` (an ONNX
export) is encoded batch by batch as before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, TextEncoder

_DONE = object()
T = TypeVar("T")


def encode_stream(model: TextEncoder, batches: Iterable[T], side: Side, max_length: int,
                  only: str | None = None, prefetch: int = 2,
                  texts: Callable[[T], list[str]] = list) -> Iterator[tuple[T, Encoded]]:
    """``(batch, model.encode(texts(batch), side, max_length, only))`` for each batch, in order,
    with up to ``prefetch`` batches tokenized ahead (``batches`` is read in that thread too: a
    corpus reader's progress runs ahead by as much). An error in the tokenizer's thread (an empty
    query, a damaged record) is raised here, at the batch it belongs to."""
    if not isinstance(model, RetrievalModel) or prefetch < 1:
        for batch in batches:
            yield batch, model.encode(texts(batch), side, max_length, only=only)
        return
    ready: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    pin = model.device.type == "cuda"

    def tokenize_ahead() -> None:
        try:
            for batch in batches:
                tokens = model.tokenize(texts(batch), side, max_length, on_device=False)
                if pin:
                    tokens = {k: v.pin_memory() for k, v in tokens.items()}
                while not stop.is_set():
                    try:
                        ready.put((batch, tokens), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            ready.put(e)

    worker = threading.Thread(target=tokenize_ahead, name="tokenize-ahead", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            batch, tokens = item
            tokens = {k: v.to(model.device, non_blocking=pin) for k, v in tokens.items()}
            yield batch, model.encode_tokens(tokens, side, only)
    finally:  # the consumer stopped early (an error, a break): let the thread end
        stop.set()
        while worker.is_alive():
            try:
                ready.get(timeout=0.1)
            except queue.Empty:
                pass
