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
import inspect
import logging
import numbers
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import check_coverage
from pyserini_moe.eval.metrics import evaluate as _evaluate
from pyserini_moe.index.encoded import BuildSettings, build_indexes
from pyserini_moe.index.lucene import build_bm25_index
from pyserini_moe.io import check_path, refuse_input_as_output
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import TextEncoder, check_text
from pyserini_moe.representation import INDEX_KINDS as MODEL_INDEX_KINDS
from pyserini_moe.runs import (
    JAVA_INT_MAX,
    Run,
    check_id,
    check_run,
    check_table,
    ranked,
    read_trec_run,
)
from pyserini_moe.search.base import Hit
from pyserini_moe.search.dispatch import SearchSettings, TopicSearcher, recorded_retriever

log = logging.getLogger(__name__)

INDEX_KINDS = ("bm25", *MODEL_INDEX_KINDS)  # what build_index builds (as `index --retriever`)
METRICS = ("ndcg@10", "recall@100")  # what evaluate reports unless told


def load_model(name_or_path: str | os.PathLike, device: str | None = None,
               **options: Any) -> TextEncoder:
    """A model folder saved by ``train``, an ONNX export, or a Hugging Face backbone used
    zero-shot (``"all-minilm-l6-v2"`` is the packaged MiniLM), in eval mode; ``options`` are
    encode-time options (SB-MoE: ``inference="all"``)."""

    return load_encoder(str(_path(name_or_path, "model")), device=device,
                        options=options or None).eval()


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
    index = _path(index, "index")
    refuse_input_as_output([str(index)], [str(_path(corpus, "corpus")),
                                          None if encoder is None else str(_encoder(encoder))])
    if kind == "bm25":
        if encoder is not None:
            raise UserError("a BM25 index is built from the text: leave encoder out")
        _refuse_unknown(settings, _names(build_bm25_index) - {"corpus", "index", "overwrite"},
                        "a bm25 build_index")
        build_bm25_index(str(corpus), index, overwrite=overwrite, **settings)
        return index
    if encoder is None:
        raise UserError(f"a {kind} index needs an encoder (a model folder or backbone name)")
    _refuse_unknown(settings, {f.name for f in dataclasses.fields(BuildSettings)}
                    - {"corpus", "encoder", "outputs", "overwrite", "progress"},
                    f"a {kind} build_index")
    build_indexes(BuildSettings(str(corpus), str(encoder), {kind: str(index)},
                                overwrite=overwrite, progress=progress, **settings))
    return index


def _path(value: object, what: str) -> Path:
    return check_path(value, what, "folder")


def _encoder(value: object) -> Path:
    """A model folder or backbone name; a loaded model is saved first (the index records the
    folder its queries are encoded with)."""
    if isinstance(value, TextEncoder):
        raise UserError(f"encoder: a loaded {type(value).__name__}; save it first "
                        "(model.save(folder)) and give the folder: an index records the folder "
                        "its queries are encoded with")
    return _path(value, "encoder")


def _names(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters)


def _refuse_unknown(given: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise UserError(f"{what} has no setting {', '.join(unknown)} (it takes: "
                        f"{', '.join(sorted(known))})")


def _depth(k: object) -> int:
    """``k`` as every searcher takes it: a whole number (numpy's too) from 1 to a Java int."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= JAVA_INT_MAX:
        raise UserError(f"k {k!r}: give a whole number from 1 to {JAVA_INT_MAX}")
    return int(k)


def _topics(topics: Mapping[Any, Any]) -> dict[str, str]:
    """``{qid: text}`` checked query by query, so that an error names the query; numpy's
    strings become Python's (Lucene's bridge takes only these)."""
    return {str(check_id(qid, "query id")): str(check_text(text, f"query {qid!r}"))
            for qid, text in topics.items()}


def _sequence(values: object, what: str) -> list[Any]:
    """A list (or tuple, array, generator) of queries or ids; a string or a mapping, whose
    iteration gives characters or keys, is refused."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise UserError(f"batch_search takes a list of queries and a list of their ids, got "
                        f"{type(values).__name__} for the {what}: search(query, k) takes one "
                        "query, run({qid: text}, k) a mapping")
    return list(values)


class Searcher:
    """A search over one index (or a hybrid / fusion), opened once: Pyserini's
    ``LuceneSearcher`` / ``FaissSearcher`` idiom. Made by :func:`open_searcher`."""

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings
        self._searcher: TopicSearcher | None = TopicSearcher(settings)

    def close(self) -> None:
        """Let go of the model and the index (Pyserini's searchers' ``close``); a search after it
        is refused. ``with open_searcher(...) as searcher:`` closes at the block's end."""
        self._searcher = None

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def search(self, q: str, k: int = 10) -> list[Hit]:
        """The top ``k`` hits of one query, best first."""
        if not isinstance(q, str):
            raise UserError(f"search takes one query string, got {type(q).__name__}: use "
                            "batch_search(queries, qids, k) for several")
        return self.batch_search([q], ["q"], k)["q"]

    def batch_search(self, queries: Iterable[str], qids: Iterable[str],
                     k: int = 10) -> dict[str, list[Hit]]:
        """``{qid: hits}`` for several queries at once (batched through the encoder)."""
        queries, qids = _sequence(queries, "queries"), _sequence(qids, "qids")
        if len(queries) != len(qids):
            raise UserError(f"{len(queries)} queries but {len(qids)} qids: give one id a query")
        topics = dict(zip(qids, queries))
        if len(topics) != len(qids):
            raise UserError("qids repeat: give each query its own id")
        run = self.run(topics, k)
        return {str(qid): [Hit(docid, score) for docid, score in ranked(run.get(str(qid), {}))]
                for qid in qids}  # numpy's strings as Python's, as in the run

    def run(self, topics: Mapping[str, str] | str | os.PathLike, k: int = 1000) -> Run:
        """``{qid: {docid: score}}`` of a topic set: ``{qid: text}``, or a name / file as the
        ``search`` command's ``--topics`` takes (``"scifact:test"``); write it with
        :func:`pyserini_moe.runs.write_trec_run`."""
        if isinstance(topics, (str, os.PathLike)):
            topics = load_topics(str(topics))
        elif not isinstance(topics, Mapping):
            raise UserError(f"run takes {{qid: text}} or a topic set's name or file, got "
                            f"{type(topics).__name__}")
        if self._searcher is None:
            raise UserError("this searcher is closed: open another with open_searcher")
        outcome = self._searcher.search(_topics(topics), hits=_depth(k))
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
    several = isinstance(index, (list, tuple))
    indexes = [str(_path(i, "index")) for i in (index if several else [index])]
    if not indexes:
        raise UserError("open_searcher needs an index: a folder, or a list of a model's indexes")
    if "hits" in settings:
        raise UserError("hits is k: give it to search / batch_search / run")
    _refuse_unknown(settings, {f.name for f in dataclasses.fields(SearchSettings)}
                    - {"retriever", "index", "encoder", "bm25_index", "topics", "output"},
                    "open_searcher")
    retriever = retriever or recorded_retriever(indexes)
    settings.setdefault("quiet", True)
    return Searcher(SearchSettings(
        retriever=retriever, index=indexes if retriever == "fused" else indexes[0],
        encoder=str(_encoder(encoder)) if encoder is not None else None,
        bm25_index=str(_path(bm25_index, "bm25_index")) if bm25_index is not None else None,
        **settings))


def evaluate(run: Run | str | os.PathLike, qrels: str | os.PathLike | Mapping[str, Mapping[str, int]],
             metrics: Iterable[str] | str | None = METRICS) -> dict[str, float]:
    """The mean of each metric over the judged queries (ranx; ``trec_eval -c``'s convention:
    a judged query the run misses counts 0). ``run``: ``{qid: {docid: score}}`` or a TREC run
    file; ``qrels``: a name (``"scifact:test"``), a qrels file, or ``{qid: {docid: grade}}``."""

    run = read_trec_run(run) if isinstance(run, (str, os.PathLike)) else check_run(run)
    qrels = load_qrels(qrels) if isinstance(qrels, (str, os.PathLike)) else _qrels(qrels)
    metrics = ([metrics] if isinstance(metrics, str) else
               list(METRICS if metrics is None else metrics))
    check_coverage({"run": run}, qrels)
    return _evaluate(run, qrels, metrics)


def _qrels(qrels: object) -> dict[str, dict[str, int]]:
    """``{qid: {docid: grade}}`` with string ids and whole-number grades, else one line."""
    checked = check_table(qrels, "qrels", "grade", "a whole number",
                          "{qid: {docid: grade}}, a qrels file or a name such as 'scifact:test'",
                          lambda v: isinstance(v, numbers.Integral))
    return {qid: {docid: int(grade) for docid, grade in judged.items()}
            for qid, judged in checked.items()}
