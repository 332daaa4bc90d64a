"""The Python API, in Pyserini's and sentence-transformers' idiom (``import pyserini_moe as pm``):

- :func:`load_model`: a trained folder, an ONNX export or a backbone used zero-shot; its
  ``encode_query`` / ``encode_document`` cut texts where every other route does;
- :func:`build_index`: a BM25, dense, impact or multi-vector index of a collection;
- :func:`open_searcher`: a :class:`Searcher` on any index (ours or Pyserini-built), with a BM25
  hybrid or several indexes of one model fused, whose ``search(query, k)`` and
  ``batch_search(queries, qids, k)`` return :class:`Hit` lists, as Pyserini's searchers do;
- :func:`evaluate`: a run's metrics (ranx, as ``python -m pyserini_moe.eval``).

Each function is the library form of a command (``index``, ``search``, ``eval``) and takes that
command's settings by their flag names (``--query-max-length`` is ``query_max_length``), so one
set of checks and defaults serves both. docs/python.md shows it end to end.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import evaluate as _evaluate
from pyserini_moe.index.encoded import BuildSettings, build_indexes
from pyserini_moe.index.lucene import build_bm25_index
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import TextEncoder
from pyserini_moe.representation import INDEX_KINDS as MODEL_INDEX_KINDS
from pyserini_moe.runs import Run, ranked, read_trec_run
from pyserini_moe.search.base import Hit
from pyserini_moe.search.dispatch import SearchSettings, TopicSearcher, recorded_retriever

log = logging.getLogger(__name__)

INDEX_KINDS = ("bm25", *MODEL_INDEX_KINDS)  # what build_index builds (as `index --retriever`)


def load_model(name_or_path: str | os.PathLike, device: str | None = None,
               **options: Any) -> TextEncoder:
    """A model folder saved by ``train``, an ONNX export, or a Hugging Face backbone used
    zero-shot (``"all-minilm-l6-v2"`` is the packaged MiniLM), in eval mode; ``options`` are
    encode-time options (SB-MoE: ``inference="all"``)."""

    return load_encoder(str(name_or_path), device=device, options=options or None).eval()


def build_index(kind: str, corpus: str | os.PathLike, index: str | os.PathLike,
                encoder: str | os.PathLike | None = None, *, overwrite: bool = False,
                progress: bool = False, **settings: Any) -> Path:
    """Index ``corpus`` (a collection name such as ``"scifact"`` or a BEIR-layout folder) into
    the folder ``index``: ``kind`` "bm25" with Lucene, else "dense", "impact" or "multivector"
    with ``encoder`` (a model folder or backbone name). ``settings`` are the ``index`` command's
    (``max_length=256``, ``batch_size=32``, ``threads``, ``faiss``, ``quantization``, ...).
    Written to a temporary folder and renamed when complete, as the command does."""
    if kind not in INDEX_KINDS:
        raise UserError(f"index kind {kind!r}: choose from {', '.join(INDEX_KINDS)}")
    if kind == "bm25":
        if encoder is not None:
            raise UserError("a BM25 index is built from the text: leave encoder out")
        build_bm25_index(str(corpus), index, overwrite=overwrite, **settings)
        return Path(index)
    if encoder is None:
        raise UserError(f"a {kind} index needs an encoder (a model folder or backbone name)")
    build_indexes(BuildSettings(str(corpus), str(encoder), {kind: str(index)},
                                overwrite=overwrite, progress=progress, **settings))
    return Path(index)


class Searcher:
    """A search over one index (or a hybrid / fusion), opened once: Pyserini's
    ``LuceneSearcher`` / ``FaissSearcher`` idiom. Made by :func:`open_searcher`."""

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings
        self._searcher = TopicSearcher(settings)

    def search(self, q: str, k: int = 10) -> list[Hit]:
        """The top ``k`` hits of one query, best first."""
        if not isinstance(q, str):
            raise UserError(f"search takes one query string, got {type(q).__name__}: use "
                            "batch_search(queries, qids, k) for several")
        return self.batch_search([q], ["q"], k)["q"]

    def batch_search(self, queries: list[str], qids: list[str], k: int = 10) -> dict[str, list[Hit]]:
        """``{qid: hits}`` for several queries at once (batched through the encoder)."""
        if isinstance(queries, str) or isinstance(qids, str):
            raise UserError("batch_search takes a list of queries and a list of their ids; "
                            "search(query, k) takes one")
        if len(queries) != len(qids):
            raise UserError(f"{len(queries)} queries but {len(qids)} qids: give one id a query")
        if len(set(qids)) != len(qids):
            raise UserError("qids repeat: give each query its own id")
        run = self.run(dict(zip(qids, queries)), k)
        return {qid: [Hit(docid, score) for docid, score in ranked(run.get(qid, {}))]
                for qid in qids}

    def run(self, topics: Mapping[str, str] | str, k: int = 1000) -> Run:
        """``{qid: {docid: score}}`` of a topic set: ``{qid: text}``, or a name / file as the
        ``search`` command's ``--topics`` takes (``"scifact:test"``); write it with
        :func:`pyserini_moe.runs.write_trec_run`."""
        if isinstance(topics, str):
            topics = load_topics(topics)
        outcome = self._searcher.search(dict(topics), hits=k)
        for notice in outcome.notices:
            log.warning("%s", notice.removeprefix("warning: "))
        return outcome.run


def open_searcher(index: str | os.PathLike | list[str | os.PathLike],
                  encoder: str | os.PathLike | None = None, *,
                  retriever: str | None = None, bm25_index: str | os.PathLike | None = None,
                  **settings: Any) -> Searcher:
    """A :class:`Searcher` on ``index``: the kind it records (BM25 for a Lucene index without
    our metadata, as Pyserini-built ones), ``fused`` for a list of indexes of one model. The
    encoder is the one the index records unless ``encoder`` names another. ``bm25_index`` makes
    it Pyserini's hybrid (``alpha``, ``hybrid_normalize``); ``settings`` are the ``search``
    command's (``query_max_length``, ``fusion``, ``k1``, ``b``, ``remove_query``, ...)."""
    indexes = [str(i) for i in index] if isinstance(index, list) else [str(index)]
    retriever = retriever or recorded_retriever(indexes)
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(SearchSettings)})
    if unknown:
        raise UserError(f"open_searcher has no setting {', '.join(unknown)} (see "
                        "python -m pyserini_moe.search --help)")
    settings.setdefault("quiet", True)
    return Searcher(SearchSettings(
        retriever=retriever, index=indexes if retriever == "fused" else indexes[0],
        encoder=str(encoder) if encoder is not None else None,
        bm25_index=str(bm25_index) if bm25_index is not None else None, **settings))


def evaluate(run: Run | str | os.PathLike, qrels: str | os.PathLike | Mapping[str, Mapping[str, int]],
             metrics: Iterable[str] = ("ndcg@10", "recall@100")) -> dict[str, float]:
    """The mean of each metric over the judged queries (ranx; ``trec_eval -c``'s convention:
    a judged query the run misses counts 0). ``run``: ``{qid: {docid: score}}`` or a TREC run
    file; ``qrels``: a name (``"scifact:test"``), a qrels file, or ``{qid: {docid: grade}}``."""

    if isinstance(run, (str, os.PathLike)):
        run = read_trec_run(run)
    if isinstance(qrels, (str, os.PathLike)):
        qrels = load_qrels(qrels)
    return _evaluate(run, {q: dict(d) for q, d in qrels.items()}, metrics)
