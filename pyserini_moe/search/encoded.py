"""Searchers for indexes built from a model: dense (Faiss), impact (Lucene), multi-vector (ours).

Dense and impact search go through Pyserini's own ``FaissSearcher`` and ``LuceneImpactSearcher``
with our query encoders plugged in, so a run from ``python -m pyserini_moe.search`` is exactly
what Pyserini itself returns. The query encoder defaults to the one recorded in the index and must
match the encoder that built it (same architecture and weights).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from pyserini_moe import _java
from pyserini_moe.encode.common import position_limit
from pyserini_moe.encode.impact import DEFAULT_QUERY_MAX_TERMS
from pyserini_moe.errors import UserError
from pyserini_moe.index.doc_vectors import DOC_VECTORS, DocVectors
from pyserini_moe.index.meta import (
    IndexMeta,
    IndexMismatchError,
    check_kind,
    check_unique_ids,
    meta_path,
)
from pyserini_moe.index.multivector import MultiVectorIndex
from pyserini_moe.modeling.auto import is_backbone, load_encoder
from pyserini_moe.modeling.folder import fingerprint
from pyserini_moe.runs import Run
from pyserini_moe.search.base import Hit, batched_search, open_lucene

if TYPE_CHECKING:
    from pyserini_moe.encode.adapters import ModelQueryEncoder, PrecomputedQueryEncoder
    from pyserini_moe.modeling.base import TextEncoder

    QueryEncoder = ModelQueryEncoder | PrecomputedQueryEncoder

log = logging.getLogger(__name__)
# Hits whose stored documents a Lucene impact search holds at once (see ImpactSearcher._batch).
MAX_HITS_IN_FLIGHT = 16_000


def open_index(index: str | os.PathLike, kind: str, encoder: str | None = None,
               encoded_queries: str | None = None) -> IndexMeta:
    """Metadata of a pyserini-moe index of ``kind``; a clear error for anything else. A dense
    index built elsewhere (``python -m pyserini.encode`` writes a Faiss ``index`` and a ``docid``
    file, no metadata) is searched with the ``encoder`` given, or the ``encoded_queries``, with a
    warning that nothing can check the pairing."""
    if not Path(index).is_dir():
        raise FileNotFoundError(f"index folder not found: {index}")
    meta = check_kind(index, kind)
    if meta is not None and meta.shard:
        log.warning("%s is shard %s of %s (documents %s-%s of the corpus): a search of it "
                    "covers that slice only (queries encoded with it fit the merged index as "
                    "well); merge the shards to search the whole corpus (python -m "
                    "pyserini_moe.merge)", index,
                    meta.shard.get("id"), meta.shard.get("num"), meta.shard.get("start"),
                    meta.shard.get("stop"))
    if meta is not None:
        return meta
    foreign_dense = kind == "dense" and (Path(index) / "index").is_file() \
        and (Path(index) / "docid").is_file()
    if foreign_dense and (encoder or encoded_queries):
        log.warning("%s was not built by pyserini-moe (no pyserini_moe_index.json): searching it "
                    "with %s, but nothing can check that this encoder built it", index,
                    encoder or encoded_queries)
        return IndexMeta(kind=kind, encoder=encoder, foreign=True)
    hint = " (a Faiss index built elsewhere: give --encoder, the model that encoded it)" \
        if foreign_dense else ""
    raise IndexMismatchError(f"{index} has no pyserini_moe_index.json{hint}: build it with "
                             f"`python -m pyserini_moe.index --retriever {kind}`")


def check_encoder(meta: IndexMeta, model: TextEncoder, index: str | os.PathLike, name: str) -> None:
    """Refuse a query encoder whose weights differ from the encoder that built the index."""

    if meta.foreign:
        return  # built elsewhere: nothing recorded to check against (open_index warned)
    if fingerprint(model) != meta.encoder_fingerprint:
        raise IndexMismatchError(
            f"{index} was built by encoder {meta.encoder!r} "
            f"({meta.model_type}, fingerprint {meta.encoder_fingerprint}); the query "
            f"encoder {name!r} ({model.model_type}, fingerprint {fingerprint(model)}) is a different "
            "model. Search with the encoder that built the index, or rebuild the index.")


def check_encoded_queries(meta: IndexMeta, made_by: str | None, index: str | os.PathLike,
                          path: str) -> None:
    """Refuse queries encoded by another model than the one that built the index (another
    model's vectors of the same size searched it without a word: a run of neither). Queries
    that record no encoder (Pyserini's, or written before encode_queries recorded it) are
    searched, with a warning that nothing checks them."""
    if meta.foreign or not meta.encoder_fingerprint:
        return  # nothing recorded to check against (open_index warned of a foreign index)
    if made_by is None:
        log.warning("%s records no encoder (encoded by Pyserini, or before pyserini-moe recorded "
                    "it): nothing checks that %s, the encoder that built %s, made them", path,
                    meta.encoder, index)
    elif made_by != meta.encoder_fingerprint:
        # an export's fingerprint extends its source's (``<fp>-int8-...``): one model, run apart
        related = made_by.startswith(meta.encoder_fingerprint) or \
            meta.encoder_fingerprint.startswith(made_by)
        other = ("the same model exported otherwise (an int8 export is another encoder)"
                 if related else "another model")
        raise IndexMismatchError(
            f"{path} holds queries encoded by {other} (fingerprint {made_by}) than "
            f"{meta.encoder!r}, which built {index} (fingerprint {meta.encoder_fingerprint}): "
            f"encode the topics with `python -m pyserini_moe.encode_queries --index {index}`")


class _EncodedSearcher:
    """Shared set-up: read the index metadata, load and check the query encoder."""

    kind: str
    query_encoder: QueryEncoder  # the model's, or queries encoded ahead of time

    def __init__(self, index: str | os.PathLike, encoder: str | None = None,
                 device: str | None = None, query_max_length: int | None = None,
                 precision: str = "fp32", encoded_queries: str | None = None) -> None:
        _java.bootstrap()
        self.index = str(index)
        self._folder_id = _folder_id(index)
        self.meta = open_index(index, self.kind, encoder, encoded_queries)
        if encoded_queries is not None:
            self.query_encoder = self._precomputed(encoded_queries)
            return
        self.encoder_name = encoder or self.meta.encoder
        if not self.encoder_name:  # every index we build records it: a damaged metadata file
            raise IndexMismatchError(f"{index} records no encoder in its pyserini_moe_index.json: "
                                     "give --encoder, the model that built it")
        if encoder is None and os.sep in self.encoder_name and not Path(self.encoder_name).exists():
            raise IndexMismatchError(
                f"{index} records its encoder as {self.encoder_name!r}, a path relative to where "
                "the index was built (older indexes): run from there, or pass "
                "--encoder with the model folder")

        # The encode-time options the documents were encoded with (SB-MoE's TOP-1 / ALL) hold
        # for the queries too.
        # and a backbone used zero-shot encodes queries as the index recorded it was used
        zero_shot = (self.meta.zero_shot or {}) if is_backbone(self.encoder_name) else {}
        model = load_encoder(self.encoder_name, device=device,
                             options=self.meta.encoder_options, precision=precision,
                             **zero_shot)
        if query_max_length is None:  # as the index records (its encoder's training length)
            query_max_length = self._recorded_query_length(model)
        self.query_encoder = self._query_encoder(model, query_max_length)
        log.info("%s: queries are cut at %d tokens", index, self.query_encoder.max_length)
        check_encoder(self.meta, self.query_encoder.model, index, self.encoder_name)

    def _recorded_query_length(self, model: TextEncoder) -> int | None:
        """The query length the index metadata records, checked against the model's positions
        here: the query encoder's own check blames ``--query-max-length``, a flag the user did
        not give when the value came from the metadata."""
        length = self.meta.query_max_length
        limit = position_limit(model)
        if length is not None and limit is not None and length > limit:
            raise IndexMismatchError(
                f"{meta_path(self.index)}: the index metadata records query_max_length {length}, "
                f"above the {limit} token positions of the encoder {self.encoder_name}: the "
                "metadata is damaged (rebuild the index), or pass --query-max-length "
                f"{limit} or less")
        return length

    def _query_encoder(self, model: TextEncoder, max_length: int | None) -> ModelQueryEncoder:
        raise NotImplementedError

    def _check_num_docs(self, held: int, where: str) -> None:
        """The recorded document count against what ``where`` (Faiss, Lucene) holds: a
        metadata file edited or copied from another index would otherwise pass unnoticed."""
        if self.meta.num_docs is not None and self.meta.num_docs != held:
            raise IndexMismatchError(f"{meta_path(self.index)}: the metadata says "
                                     f"{self.meta.num_docs} documents, the {where} index holds "
                                     f"{held}: the index is damaged: build it again")

    def check_unchanged(self) -> None:
        """The metadata (and so the query encoder) and the index files are read one after the
        other: an ``--overwrite`` rebuild renamed into place between the two paired one model's
        queries with another's documents, a run of neither (exit 0). A rebuild puts a new folder
        at the path, so the folder's identity is compared once everything is open."""
        if _folder_id(self.index) != self._folder_id:
            raise IndexMismatchError(f"{self.index} was replaced (rebuilt) while this search "
                                     "opened it: search again")

    def _precomputed(self, path: str) -> PrecomputedQueryEncoder:
        """Queries encoded ahead of time instead of a model (Pyserini's ``--encoded-queries``),
        checked against the index as an ``--encoder`` is (:func:`check_encoded_queries`)."""
        from pyserini_moe.encode.adapters import PrecomputedQueryEncoder
        from pyserini_moe.search.encoded_queries import read_encoded_queries_made_by  # noqa: PLC0415 - a circle: encoded_queries uses this module

        read = read_encoded_queries_made_by(path, self.kind)
        check_encoded_queries(self.meta, read.made_by, self.index, path)
        self._check_encoding(path, read.encoding or {})
        log.info("%s: %d queries encoded ahead of time in %s (no model loaded)", self.index,
                 len(read.vectors), path)
        return PrecomputedQueryEncoder(read.vectors, path, dense=self.kind == "dense")

    def _check_encoding(self, path: str, encoding: dict[str, int]) -> None:
        """Impact queries quantised with another factor than the index's weights are refused
        (their scores would be on another scale: rankings of neither); queries encoded with
        another cut than this search would make (``encode_queries --query-max-length 4``) are
        searched as encoded, and one warning says so (the flags that set the cut do not apply
        to a search of encoded queries)."""
        made = encoding.get("quantization")
        if self.kind == "impact" and made is not None and made != self.meta.quantization:
            raise IndexMismatchError(
                f"{path}: its weights were quantised with factor {made}, the documents of "
                f"{self.index} with {self.meta.quantization}: encode the topics with `python -m "
                f"pyserini_moe.encode_queries --index {self.index}`")
        usual = {"query_max_length": self.meta.query_max_length,
                 "query_max_terms": getattr(self, "query_max_terms", None)}
        other = [f"--{name.replace('_', '-')} {encoding[name]} (a search with the encoder: "
                 f"{value})" for name, value in usual.items()
                 if value is not None and name in encoding and encoding[name] != value]
        if other:
            log.warning("warning: %s were encoded with %s: they are searched as encoded; encode "
                        "them again to search as the encoder would", path, ", ".join(other))

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True) -> Run:
        """Batches of topics through the Pyserini searcher (which calls our query encoder)."""
        return batched_search(
            topics, lambda texts, qids: self.searcher.batch_search(texts, qids, k=hits, threads=threads),
            batch_size, self.kind, progress)


class DenseSearcher(_EncodedSearcher):
    """Pyserini ``FaissSearcher`` + :class:`~pyserini_moe.encode.dense.DenseQueryEncoder`."""

    kind = "dense"

    def __init__(self, *args: Any, ef_search: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from pyserini.search.faiss import FaissSearcher

        try:
            self.searcher = FaissSearcher(self.index, self.query_encoder)
        except UnicodeDecodeError as e:  # Pyserini reads the docid file as text
            raise IndexMismatchError(f"{self.index}/docid: not UTF-8 text ({e.reason} at byte "
                                     f"{e.start}); the index is damaged: build it again") from None
        except AssertionError:  # Pyserini's check that each vector has a docid line
            raise IndexMismatchError(f"{self.index}: the docid file and the Faiss index hold "
                                     "different numbers of documents; the index is damaged: "
                                     "build it again") from None
        except RuntimeError as e:  # Faiss could not read its file
            raise IndexMismatchError(f"{self.index}/index: Faiss cannot read it ({_first_line(e)})"
                                     "; the index is damaged: build it again") from None
        # Pyserini reads the docid file itself; its list is what the hits and rescore() use
        check_unique_ids(Path(self.index) / "docid", self.searcher.docids)
        queries = getattr(self.query_encoder, "vectors", None)  # encoded ahead of time
        dim = len(next(iter(queries.values()))) if queries else self.searcher.index.d
        if dim != self.searcher.index.d:
            raise UserError(f"the encoded queries have {dim} dimensions, {self.index} holds "
                            f"{self.searcher.index.d}: they come from another encoder")
        self._check_num_docs(self.searcher.index.ntotal, "Faiss")
        recorded = self.meta.dim
        if recorded is not None and recorded != self.searcher.index.d:
            raise IndexMismatchError(f"{self.index}: the metadata says {recorded} dimensions, the "
                                     f"Faiss index holds {self.searcher.index.d}: the index is "
                                     "damaged: build it again")
        if ef_search is not None:  # Pyserini's --ef-search: HNSW's search breadth
            hnsw = getattr(self.searcher.index, "hnsw", None)
            if hnsw is None:
                raise UserError(f"--ef-search applies to an HNSW index; {self.index} is flat")
            hnsw.efSearch = ef_search

    def _query_encoder(self, model: TextEncoder, max_length: int | None) -> ModelQueryEncoder:
        from pyserini_moe.encode.adapters import DenseQueryEncoder

        return DenseQueryEncoder(model, max_length=max_length)

    def rescore(self, topics: dict[str, str], candidates: dict[str, list[str]],
                batch_size: int = 64) -> Run:
        """Exact inner products of each query with its candidate documents, read back from the
        Faiss index (flat and HNSW-flat indexes store the vectors)."""

        rows = {docid: i for i, docid in enumerate(self.searcher.docids)}
        run: Run = {}
        for qids, vectors in _encoded_batches(self.query_encoder, topics, candidates, batch_size):
            for qid, vector in zip(qids, vectors):
                docs = candidates[qid]
                matrix = np.stack([self.searcher.index.reconstruct(rows[d]) for d in docs]) \
                    if docs else np.zeros((0, len(vector)), dtype=np.float32)
                run[qid] = dict(zip(docs, (matrix @ vector).tolist()))
        return run


class ImpactSearcher(_EncodedSearcher):
    """Pyserini ``LuceneImpactSearcher`` + :class:`~pyserini_moe.encode.impact.ImpactQueryEncoder`.

    Queries are quantised with the factor stored in the index, so both sides use the same scale,
    and keep at most ``query_max_terms`` terms, which may not exceed Lucene's max clause count.
    """

    kind = "impact"

    def __init__(self, *args: Any, query_max_terms: int | None = None, **kwargs: Any) -> None:
        _java.bootstrap()
        from pyserini.pyclass import autoclass

        limit = autoclass("org.apache.lucene.search.IndexSearcher").getMaxClauseCount()
        self.query_max_terms = query_max_terms or min(DEFAULT_QUERY_MAX_TERMS, limit)
        if self.query_max_terms > limit:
            raise UserError(f"{self.query_max_terms} query terms (--query-max-terms) exceed "
                            f"Lucene's max clause count ({limit}): Lucene refuses such queries")
        super().__init__(*args, **kwargs)
        from pyserini.search.lucene import LuceneImpactSearcher

        self.searcher = open_lucene(lambda path: LuceneImpactSearcher(path, self.query_encoder),
                                    Path(self.index))
        self._check_num_docs(self.searcher.num_docs, "Lucene")
        self._store: DocVectors | None = None  # doc_vectors/, read at the first exact re-scoring

    def _query_encoder(self, model: TextEncoder, max_length: int | None) -> ModelQueryEncoder:
        from pyserini_moe.encode.adapters import ImpactQueryEncoder

        return ImpactQueryEncoder(model, max_length=max_length,
                                  quantization=self._quantization(),
                                  max_terms=self.query_max_terms)

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True) -> Run:
        return batched_search(topics, lambda texts, qids: self._batch(texts, qids, hits, threads),
                              batch_size, self.kind, progress)

    @property
    def scale(self) -> float:
        """Lucene scores are sums of quantised query x document weights: multiplied by this they
        are the model's own dot products again (what fusing with other experts needs)."""
        return 1.0 / float(self._quantization()) ** 2

    def _quantization(self) -> int:
        """The factor the index's weights were quantised with (every impact index records it)."""
        if self.meta.quantization is None:
            raise IndexMismatchError(f"{self.index}: its pyserini_moe_index.json records no "
                                     "quantization; the index is damaged: build it again")
        return self.meta.quantization

    def rescore(self, topics: dict[str, str], candidates: dict[str, list[str]],
                batch_size: int = 64) -> Run:
        """Exact quantised dot products with the candidates' vectors, in Lucene's units, from
        the index's ``doc_vectors/`` (see :mod:`pyserini_moe.index.doc_vectors`)."""

        folder = Path(self.index) / DOC_VECTORS
        if not folder.is_dir():
            raise IndexMismatchError(f"{self.index} has no {DOC_VECTORS}/ (built by an older "
                                     "version, or not by pyserini-moe): rebuild it with `python -m "
                                     "pyserini_moe.index --retriever impact` for exact re-scoring")
        if self._store is None:
            self._store = DocVectors(folder)
        store = self._store
        run: Run = {}
        for qids, queries in _encoded_batches(self.query_encoder, topics, candidates, batch_size):
            for qid, query in zip(qids, queries):
                missing = [d for d in candidates[qid] if d not in store]
                if missing:
                    raise IndexMismatchError(f"{self.index} has no vector for document "
                                             f"{missing[0]!r} (a candidate of query {qid!r})")
                run[qid] = {d: float(s) for d, s in store.score(query, candidates[qid]).items()}
        return run

    def _batch(self, texts: list[str], qids: list[str], hits: int, threads: int) -> dict:
        """Lucene's hits as plain (docid, score) pairs, searched in slices of at most
        ``MAX_HITS_IN_FLIGHT`` hits: Anserini loads every hit's stored document, and an index
        that stores more than the docid (one built by an older version kept each vector, tens of
        kB for a dense one) made 64 queries x 1,000 hits exhaust the 6 GB Java heap (measured).

        Anserini's batch search drops its tasks' exceptions (an OutOfMemoryError among them) and
        reports only "queryCount = N is not equal to completedTaskCount = M"; a slice that fails
        so is searched one query at a time: the same hits, or the failing query named with
        Lucene's reason."""
        from jnius import JavaException

        found: dict[str, list[Hit]] = {}
        step = max(1, MAX_HITS_IN_FLIGHT // max(1, hits))
        for start in range(0, len(qids), step):
            part_texts, part_qids = texts[start:start + step], qids[start:start + step]
            try:
                results = self.searcher.batch_search(part_texts, part_qids, k=hits,
                                                     threads=threads)
            except JavaException as e:
                if "completedTaskCount" not in str(e):
                    raise
                log.warning("Lucene's batch search failed (%s); searching its %d queries one at "
                            "a time", e.innermessage, len(part_qids))
                results = {}
                for text, qid in zip(part_texts, part_qids):
                    try:
                        found[qid] = _plain(self.searcher.search(text, k=hits))
                    except JavaException as err:
                        raise UserError(f"Lucene failed on query {qid!r}: {err.classname}: "
                                        f"{err.innermessage}") from None
            for qid, scored in results.items():
                found[qid] = _plain(scored)
            del results  # release the Java hits (and their stored documents) now
        return found


def _plain(scored: Any) -> list[Hit]:
    """Lucene's scored documents as Python pairs, so no Java object outlives the slice."""
    return [Hit(str(h.docid), float(h.score)) for h in scored]


class MultiVectorSearcher(_EncodedSearcher):
    """Our multi-vector index: Faiss token candidates, exact MaxSim re-scoring."""

    kind = "multivector"

    def __init__(self, *args: Any, faiss_params: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        self.searcher = MultiVectorIndex(self.index, faiss_params=faiss_params)

    def _query_encoder(self, model: TextEncoder, max_length: int | None) -> ModelQueryEncoder:
        from pyserini_moe.encode.adapters import MultiVectorQueryEncoder

        return MultiVectorQueryEncoder(model, max_length=max_length)

    def rescore(self, topics: dict[str, str], candidates: dict[str, list[str]],
                batch_size: int = 64) -> Run:
        """Exact MaxSim of each query with its candidate documents."""

        rows = {docid: i for i, docid in enumerate(self.searcher.docids)}
        run: Run = {}
        for qids, vectors in _encoded_batches(self.query_encoder, topics, candidates, batch_size):
            for qid, vector in zip(qids, vectors):
                docs = np.array(sorted(rows[d] for d in candidates[qid]), dtype=np.int64)
                scores = self.searcher.maxsim_docs(self.searcher.query_matrix(vector), docs)
                run[qid] = {self.searcher.docids[d]: float(x) for d, x in zip(docs, scores)}
        return run

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True, exhaustive: bool = False) -> Run:
        """Faiss token candidates + exact MaxSim; ``exhaustive`` scores every document instead
        (the reference the candidate search is measured against)."""
        qids = list(topics)
        vectors: dict = {}
        for start in range(0, len(qids), batch_size):
            batch = qids[start:start + batch_size]
            vectors.update(zip(batch, self.query_encoder.encode_batch([topics[q] for q in batch])))
        if exhaustive:
            return {qid: dict(self.searcher.exhaustive_search(vectors[qid], k=hits))
                    for qid in tqdm(qids, desc="exhaustive maxsim", disable=not progress)}
        return self.searcher.batch_search(vectors, k=hits, threads=threads, progress=progress)


def _encoded_batches(encoder: QueryEncoder, topics: dict[str, str], candidates: dict[str, list[str]],
                     batch_size: int) -> Iterator[tuple[list[str], Any]]:
    """(query ids, their encodings) for the queries that have candidates, a batch at a time."""
    qids = [q for q in candidates if q in topics]
    for start in range(0, len(qids), batch_size):
        batch = qids[start:start + batch_size]
        yield batch, encoder.encode_batch([topics[q] for q in batch])


SEARCHERS = {"dense": DenseSearcher, "impact": ImpactSearcher, "multivector": MultiVectorSearcher}


def open_searcher(kind: str, index: str | os.PathLike, encoder: str | None = None,
                  device: str | None = None, query_max_length: int | None = None,
                  query_max_terms: int | None = None,
                  faiss_params: str | None = None,
                  ef_search: int | None = None, precision: str = "fp32",
                  encoded_queries: str | None = None) -> _EncodedSearcher:
    """The searcher of ``kind`` with the options that kind takes (the others are ignored)."""
    extra = {"dense": {"ef_search": ef_search}, "impact": {"query_max_terms": query_max_terms},
             "multivector": {"faiss_params": faiss_params}}.get(kind, {})
    searcher = SEARCHERS[kind](index, encoder, device=device, query_max_length=query_max_length,
                               precision=precision, encoded_queries=encoded_queries, **extra)
    searcher.check_unchanged()
    return searcher


def _folder_id(folder: str | os.PathLike) -> tuple[int, int] | None:
    """(device, inode) of ``folder``: a folder renamed into its place has another."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[-1] if lines else type(error).__name__
