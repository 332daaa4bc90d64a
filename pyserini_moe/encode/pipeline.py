"""Encoding that keeps the model busy: the next batches are tokenized by background workers while
the model encodes the current one, optionally sorted by length so that batches carry less
padding.

Tokenizing in the calling thread leaves a GPU idle between batches (measured: every model topped
out near 1,100 passages/s on an H100 whatever its size). Here a feeder thread reads the batches
in windows of ``bucket`` and hands each window to a tokenizer worker; the prepared windows wait,
in order, in a bounded queue; the model's thread pins a batch's memory when the model is on
CUDA and copies it without blocking.

One worker is a background thread. More are processes, spawned once per stream (the stream
starts when all of them have: its first batch waits for the slowest start, and from then on
it runs at its full rate), each with its own copy of the tokenizer and one core: measured on
an H200 (docs/performance.md), tokenizer *threads* did not beat the batch-by-batch loop,
because turning a tokenizer's output into arrays holds the GIL, and the model's thread needs
the GIL for every kernel it launches.

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
import ctypes
import dataclasses
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, TextEncoder, text_prefix
from pyserini_moe.modeling.base import tokenize as tokenize_texts

_DONE = object()
T = TypeVar("T")
# Encoded's per-text tensors; ``multi`` and ``mask`` are padded along their token axis when
# chunks of different lengths are joined. A router's aux_loss / routing are training signals,
# not vectors: a bucketed window does not carry them.
_PER_TEXT = ("dense", "sparse", "multi", "mask")


@dataclasses.dataclass
class _Window(Generic[T]):
    """Consecutive batches tokenized together; ``chunks`` comes from a worker: (rows, padded
    tokens), rows being the chunk's positions among the window's texts (None: the chunk is batch
    i, in order)."""

    batches: list[T]
    sizes: list[int]
    chunks: Future


def encode_stream(model: TextEncoder, batches: Iterable[T], side: Side, max_length: int,
                  only: str | None = None, prefetch: int = 2,
                  texts: Callable[[T], list[str]] = list, workers: int = 1,
                  bucket: int = 1) -> Iterator[tuple[T, Encoded]]:
    """``(batch, model.encode(texts(batch), side, max_length, only))`` for each batch, in order.

    Up to ``max(prefetch, workers)`` windows of ``bucket`` batches are tokenized ahead, by one
    background thread (``workers=1``) or by ``workers`` processes (``workers > 1``; see the module
    docstring for why processes); ``batches`` is read by a feeder thread, so a corpus reader's
    progress runs ahead by as much. ``bucket > 1`` sorts each window by length before padding.
    An error while reading or tokenizing (an empty query, a damaged record) is raised here, at
    the window it belongs to."""
    if not isinstance(model, RetrievalModel) and (workers != 1 or bucket != 1):
        raise UserError("--tokenizer-workers and --length-bucket apply to PyTorch encoders; an "
                        "ONNX export encodes batch by batch: leave them out")
    if not isinstance(model, RetrievalModel) or prefetch < 1:
        for batch in batches:
            yield batch, model.encode(texts(batch), side, max_length, only=only)
        return
    if workers < 1 or bucket < 1:
        raise ValueError(f"workers and bucket must be >= 1 (got {workers}, {bucket})")
    pin = model.device.type == "cuda"
    # The tokenizer thread gets a copy of the tokenizer (processes unpickle one anyway): a fast
    # tokenizer keeps its padding and truncation as state that each call sets, so a caller
    # tokenizing with the model's own tokenizer while the stream runs would change a batch
    # under the thread (it did: a ragged batch). A copy costs ~30 ms a stream.
    tokenizer = copy.deepcopy(model.tokenizer) if workers == 1 else model.tokenizer
    settings = {"tokenizer": tokenizer, "side": side, "max_length": max_length,
                "prefix": text_prefix(model.args, side)}
    if workers == 1:  # the thread gets this stream's settings with each window
        pool: Executor = ThreadPoolExecutor(1, thread_name_prefix="tokenize")
        window_args: tuple[Any, ...] = (settings,)
    else:  # a process keeps them from its start (the tokenizer is pickled once, not a window)
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                   initargs=(settings, context.Barrier(workers)))
        window_args = ()
        _wait_for_workers(pool, workers)

    def encode(window: _Window[T]) -> Iterator[tuple[T, Encoded]]:
        outs = []
        for rows, tokens in _chunks(window):
            tokens = {k: torch.as_tensor(v) for k, v in tokens.items()}
            if pin:
                tokens = {k: v.pin_memory() for k, v in tokens.items()}
            tokens = {k: v.to(model.device, non_blocking=pin) for k, v in tokens.items()}
            outs.append((rows, model.encode_tokens(tokens, side, only)))
        if all(rows is None for rows, _ in outs):
            yield from zip(window.batches, (out for _, out in outs), strict=True)
            return
        joined = _join([out for _, out in outs])
        rows = torch.tensor([r for chunk_rows, _ in outs for r in chunk_rows])
        place = torch.empty_like(rows)
        place[rows] = torch.arange(len(rows))  # place[i]: where text i of the window landed
        start = 0
        for batch, size in zip(window.batches, window.sizes, strict=True):
            yield batch, _take(joined, place[start:start + size])
            start += size

    ready: queue.Queue[Any] = queue.Queue(maxsize=max(prefetch, workers))
    stop = threading.Event()

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
                per_batch = [texts(batch) for batch in window]
                future = pool.submit(_tokenize_window, per_batch, bucket, *window_args)
                if not put(_Window(window, [len(t) for t in per_batch], future)):
                    return
            put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(e)

    feeder = threading.Thread(target=feed, name="tokenize-feed", daemon=True)
    feeder.start()
    try:
        while (item := ready.get()) is not _DONE:
            if isinstance(item, BrokenProcessPool):  # refused a window: a worker had died
                raise _worker_died() from None
            if isinstance(item, BaseException):
                raise item
            yield from encode(item)
    finally:  # the consumer stopped early (an error, a break): let the workers end
        stop.set()
        while feeder.is_alive():
            try:
                ready.get(timeout=0.1)
            except queue.Empty:
                pass
        pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------ the tokenizer's side
# A worker process's tokenizer and settings, set once when it starts, and its start barrier.
_WORKER: dict[str, Any] = {}


# How long started workers wait for the last one to start (spawning imports torch: seconds).
START_TIMEOUT = 600.0


def _wait_for_workers(pool: ProcessPoolExecutor, workers: int) -> None:
    """Return once every worker process has started. The pool spawns its processes one by one
    as work arrives, and each imports torch and unpickles the tokenizer (seconds): a stream
    would otherwise open on one worker and reach its full rate seconds later. Each worker takes
    one of ``workers`` tasks that meet at a barrier, so none can take two. A worker that fails
    to start shuts the pool and raises here."""
    try:
        for future in [pool.submit(_meet) for _ in range(workers)]:
            future.result()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise


def _chunks(window: _Window[Any]) -> Any:
    """A window's tokenized chunks; a worker process that died (killed, out of memory) is one
    line, not the pool's traceback."""
    try:
        return window.chunks.result()
    except BrokenProcessPool:
        raise _worker_died() from None


def _worker_died() -> UserError:
    return UserError("a tokenizer worker process died (killed, or out of memory): run again, "
                     "with fewer --tokenizer-workers if memory is short")


def _start_worker(settings: dict[str, Any], barrier: Any) -> None:
    _end_with_parent()
    # one core a worker: the tokenizers' Rust threads would fight the other workers
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER.update(settings, barrier=barrier)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _end_with_parent() -> None:
    """Ask the kernel to end this worker when its parent dies, however it dies (SIGKILL runs no
    clean-up: the workers and the resource tracker stayed behind, ~400 MB each). Linux only;
    elsewhere the pool's own shutdown is all there is."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request: nobody to wait for
        os._exit(1)


def _meet() -> None:
    _WORKER["barrier"].wait(timeout=START_TIMEOUT)


def _tokenize_window(per_batch: list[list[str]], bucket: int,
                     settings: dict[str, Any] | None = None
                     ) -> list[tuple[list[int] | None, dict[str, np.ndarray]]]:
    """The window's padded chunks: its batches as they are (``bucket=1``), else its texts
    sorted by length, longest first (by characters: a cheap proxy for tokens), in runs of the
    largest batch's size. ``settings``: the stream's (a thread); None: the process's."""
    w = _WORKER if settings is None else settings

    def tokenize(chunk: list[str]) -> dict[str, np.ndarray]:
        return tokenize_texts(w["tokenizer"], chunk, w["side"], w["max_length"], "np",
                              w["prefix"])

    if bucket == 1:
        return [(None, tokenize(t)) for t in per_batch]
    flat = [text for batch_texts in per_batch for text in batch_texts]
    order = sorted(range(len(flat)), key=lambda i: -len(flat[i]))  # stable: ties in order
    width = max(len(t) for t in per_batch) or 1
    return [(rows, tokenize([flat[i] for i in rows]))
            for rows in (order[i:i + width] for i in range(0, len(flat), width))]


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
