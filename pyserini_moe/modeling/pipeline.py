"""Encoding that keeps the model busy: the next batches are tokenized by background workers while
the model encodes the current one, optionally sorted by length so that batches carry less
padding.

Tokenizing in the calling thread leaves a GPU idle between batches (issue 36: every model topped
out near 1,100 passages/s on an H100 whatever its size). Here a feeder thread reads the batches
in windows of ``bucket`` and hands each window to one of ``workers`` tokenizer threads (Hugging
Face's fast tokenizers release the GIL; each worker has its own copy, since a fast tokenizer
sets its padding state on every call); the prepared windows wait, in order, in a bounded queue;
the batch's memory is pinned when the model is on CUDA and the model's thread copies it without
blocking.

``bucket=1`` keeps every batch as it is: the vectors are exactly those of
:meth:`RetrievalModel.encode` batch by batch. ``bucket=W > 1`` sorts the texts of W consecutive
batches by length (longest first: a batch too large for the device fails at once) and pads each
run of ``batch size`` texts to its own longest, then puts every vector back in its batch and its
place. Only the padding changes, so a vector differs from the batch-by-batch one by float
rounding (attention ignores padded positions; the sums run over other block sizes).
An encoder without :meth:`~pyserini_moe.modeling.base.RetrievalModel.encode_tokens` (an ONNX
export) is encoded batch by batch as before.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import torch
import torch.nn.functional as F

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, TextEncoder

_DONE = object()
T = TypeVar("T")
# Encoded's per-text tensors; ``multi`` and ``mask`` are padded along their token axis when
# chunks of different lengths are joined. A router's aux_loss / routing are training signals,
# not vectors: a bucketed window does not carry them.
_PER_TEXT = ("dense", "sparse", "multi", "mask")
# A model's tokenizer -> its copies for extra workers, made once (a copy costs ~60 ms).
_COPIES: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class _Window(Generic[T]):
    """Consecutive batches tokenized together. ``chunks``: (rows, padded tokens), where rows are
    the chunk's positions among the window's texts (None: the chunk is batch i, in order)."""

    batches: list[T]
    sizes: list[int]
    chunks: list[tuple[torch.Tensor | None, dict[str, torch.Tensor]]]


def encode_stream(model: TextEncoder, batches: Iterable[T], side: Side, max_length: int,
                  only: str | None = None, prefetch: int = 2,
                  texts: Callable[[T], list[str]] = list, workers: int = 1,
                  bucket: int = 1) -> Iterator[tuple[T, Encoded]]:
    """``(batch, model.encode(texts(batch), side, max_length, only))`` for each batch, in order.

    Up to ``max(prefetch, workers)`` windows of ``bucket`` batches are tokenized ahead by
    ``workers`` threads (``batches`` is read by a feeder thread: a corpus reader's progress runs
    ahead by as much). ``bucket > 1`` sorts each window by length before padding (see the module
    docstring). An error while reading or tokenizing (an empty query, a damaged record) is
    raised here, at the window it belongs to."""
    if not isinstance(model, RetrievalModel) or prefetch < 1:
        for batch in batches:
            yield batch, model.encode(texts(batch), side, max_length, only=only)
        return
    if workers < 1 or bucket < 1:
        raise ValueError(f"workers and bucket must be >= 1 (got {workers}, {bucket})")
    pin = model.device.type == "cuda"
    tokenizers = _tokenizers(model.tokenizer, workers)

    def prepare(window: list[T]) -> _Window[T]:
        tokenizer = tokenizers.get()  # a worker holds a tokenizer no other thread uses
        try:
            return _prepare(window, tokenizer)
        finally:
            tokenizers.put(tokenizer)

    def _prepare(window: list[T], tokenizer: Any) -> _Window[T]:
        def tokenize(batch_texts: list[str]) -> dict[str, torch.Tensor]:
            tokens = model.tokenize(batch_texts, side, max_length, on_device=False,
                                    tokenizer=tokenizer)
            return {k: v.pin_memory() for k, v in tokens.items()} if pin else tokens

        per_batch = [texts(batch) for batch in window]
        if bucket == 1:
            return _Window(window, [len(t) for t in per_batch],
                           [(None, tokenize(t)) for t in per_batch])
        flat = [text for batch_texts in per_batch for text in batch_texts]
        order = sorted(range(len(flat)), key=lambda i: -len(flat[i]))  # stable: ties in order
        width = max(len(t) for t in per_batch) or 1
        chunks = []
        for start in range(0, len(flat), width):
            rows = order[start:start + width]
            chunks.append((torch.tensor(rows), tokenize([flat[i] for i in rows])))
        return _Window(window, [len(t) for t in per_batch], chunks)

    def encode(window: _Window[T]) -> Iterator[tuple[T, Encoded]]:
        outs = []
        for rows, tokens in window.chunks:
            tokens = {k: v.to(model.device, non_blocking=pin) for k, v in tokens.items()}
            outs.append((rows, model.encode_tokens(tokens, side, only)))
        if all(rows is None for rows, _ in outs):
            yield from zip(window.batches, (out for _, out in outs), strict=True)
            return
        joined = _join([out for _, out in outs])
        rows = torch.cat([r for r, _ in outs])
        place = torch.empty_like(rows)
        place[rows] = torch.arange(len(rows))  # place[i]: where text i of the window landed
        start = 0
        for batch, size in zip(window.batches, window.sizes, strict=True):
            yield batch, _take(joined, place[start:start + size])
            start += size

    ready: queue.Queue[Any] = queue.Queue(maxsize=max(prefetch, workers))
    stop = threading.Event()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="tokenize")

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def feed() -> None:
        try:
            it = iter(batches)
            while window := list(itertools.islice(it, bucket)):
                if not put(pool.submit(prepare, window)):
                    return
            put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(e)

    feeder = threading.Thread(target=feed, name="tokenize-feed", daemon=True)
    feeder.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield from encode(item.result())
    finally:  # the consumer stopped early (an error, a break): let the threads end
        stop.set()
        while feeder.is_alive():
            try:
                ready.get(timeout=0.1)
            except queue.Empty:
                pass
        pool.shutdown(wait=True, cancel_futures=True)


def _tokenizers(tokenizer: Any, workers: int) -> queue.SimpleQueue[Any]:
    """``workers`` tokenizers no two threads share: the model's own and cached copies of it."""
    copies = _COPIES.setdefault(tokenizer, [])
    while len(copies) < workers - 1:
        copies.append(copy.deepcopy(tokenizer))
    free: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for each in (tokenizer, *copies[:workers - 1]):
        free.put(each)
    return free


def _join(parts: list[Encoded]) -> Encoded:
    """The chunks' outputs as one, in chunk order; token axes padded to the longest chunk."""
    fields: dict[str, torch.Tensor] = {}
    for name in _PER_TEXT:
        tensors = [getattr(p, name) for p in parts]
        if any(t is None for t in tensors):
            continue
        if name in ("multi", "mask"):
            length = max(t.shape[1] for t in tensors)
            tail = (0, 0) if name == "multi" else ()  # multi: [B, L, D]; mask: [B, L]
            tensors = [F.pad(t, (*tail, 0, length - t.shape[1])) for t in tensors]
        fields[name] = torch.cat(tensors)
    return Encoded(**fields)


def _take(joined: Encoded, rows: torch.Tensor) -> Encoded:
    """The ``rows`` of every per-text tensor of ``joined``."""
    return Encoded(**{name: getattr(joined, name)[rows.to(getattr(joined, name).device)]
                      for name in _PER_TEXT if getattr(joined, name) is not None})
