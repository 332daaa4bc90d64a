"""Indexes built from a model's encodings: dense (Faiss), impact (Lucene), multi-vector (ours).

:func:`build_indexes` streams the corpus through the model once and feeds every requested index
from the same forward pass (CoT-MoTE's dense + sparse, CAME's three experts: the shared layers and
the backbone run once, not once per index). Each index is written into a temporary folder and
renamed at the end (an interrupted build leaves nothing that looks complete), and records the
encoder's identity in ``pyserini_moe_index.json``. ``build_dense_index`` & co. are its one-kind
forms; :class:`BuildSettings` checks a build's settings when it is made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import faiss as _faiss
from tqdm import tqdm

from pyserini_moe.data.beir import Document
from pyserini_moe.data.corpus import Corpus, corpus_identity, open_corpus
from pyserini_moe.encode.common import describe, first_non_finite
from pyserini_moe.encode.dense import DensePassageEncoder
from pyserini_moe.encode.impact import ImpactPassageEncoder
from pyserini_moe.encode.multivector import MultiVectorPassageEncoder
from pyserini_moe.encode.pipeline import encode_stream
from pyserini_moe.errors import UserError, library_write
from pyserini_moe.index.doc_vectors import DOC_VECTORS, write_doc_vectors
from pyserini_moe.index.lucene import run_index_collection
from pyserini_moe.index.meta import META_FILE, write_meta
from pyserini_moe.index.multivector import MultiVectorIndexWriter, faiss_factory_string
from pyserini_moe.index.readers import READERS, unread_problem
from pyserini_moe.io import atomic_path
from pyserini_moe.modeling.auto import load_encoder
from pyserini_moe.modeling.base import Encoded, Side
from pyserini_moe.modeling.device import check_parallelism
from pyserini_moe.outputs import refuse_to_rebuild
from pyserini_moe.representation import INDEX_KINDS, Representation
from pyserini_moe.runs import JAVA_INT_MAX
from pyserini_moe.validate import check_types

log = logging.getLogger(__name__)

KINDS = INDEX_KINDS
IMPACT_SHARD = "impact-shard"  # a shard's quantised vectors, indexed by Lucene when merged
IMPACT_VECTORS = "vectors.jsonl"


@dataclasses.dataclass(frozen=True)
class Shard:
    """Shard ``id`` of ``num`` contiguous, equal slices of the corpus (Pyserini's encoder splits
    the same way), so merging the shards in id order gives the single-process document order."""

    id: int
    num: int

    def __post_init__(self) -> None:
        if self.num < 1 or not 0 <= self.id < self.num:
            raise UserError(f"shard {self.id} of {self.num}: need 0 <= --shard-id < --shard-num")

    def span(self, n_docs: int) -> tuple[int, int]:
        """[start, stop) document numbers of this shard in a corpus of ``n_docs``."""
        size = math.ceil(n_docs / self.num)
        start = min(n_docs, self.id * size)
        return start, min(n_docs, start + size)

    def describe(self, n_docs: int) -> dict[str, int]:
        start, stop = self.span(n_docs)
        return {"id": self.id, "num": self.num, "start": start, "stop": stop}


def batches(collection: Corpus, batch_size: int, desc: str, progress: bool = True,
            shard: Shard | None = None) -> Iterator[list[Document]]:
    """The corpus (or one shard of it) in lists of ``batch_size`` documents, with a progress
    bar."""
    start, stop = (shard or Shard(0, 1)).span(collection.num_docs())
    docs = itertools.islice(collection.corpus(), start, stop)
    with tqdm(total=stop - start, desc=desc, unit="doc", disable=not progress) as bar:
        while batch := list(itertools.islice(docs, batch_size)):
            yield batch
            bar.update(len(batch))


def faiss_index(dim: int, spec: str):
    """``flat`` (exact inner product, Pyserini's default) or ``hnsw[M]`` (approximate)."""

    m = check_dense_faiss(spec)
    if m is None:
        return faiss.IndexFlatIP(dim)
    return faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)


def check_dense_faiss(spec: str) -> int | None:
    """None for ``flat``, M for ``hnsw[M]`` (32 when left out); anything else is refused, before
    any document is encoded."""
    if spec == "flat":
        return None
    if re.fullmatch(r"hnsw\d*", spec) and int(spec[4:] or 32) >= 2:
        return int(spec[4:] or 32)
    raise UserError(f"unknown faiss index {spec!r}: use 'flat' or 'hnsw[M]' (e.g. hnsw32)")


class _Sink:
    """One index fed from the shared encoding pass: ``add`` each batch, ``finish`` once.
    ``fields``: the :class:`~pyserini_moe.index.meta.IndexMeta` fields every index of the pass
    records (encoder, collection, shard, ...); ``docs``: the corpus size, where a compressed
    multi-vector build needs it to size its codec (else None)."""

    def __init__(self, out: Path, adapter: Any, fields: dict[str, Any],
                 stack: contextlib.ExitStack, settings: BuildSettings, docs: int | None) -> None:
        self.out, self.adapter, self.fields, self.stack = out, adapter, fields, stack
        self.settings, self.docs = settings, docs

    def add(self, docs: list[Document], out: Encoded) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def finish(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class _DenseSink(_Sink):
    """Faiss index in Pyserini's layout (``index`` + ``docid``), readable by ``FaissSearcher``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.index = None
        self.ids = self.stack.enter_context(open(self.out / "docid", "w"))

    def add(self, docs: list[Document], out: Encoded) -> None:
        vectors = self.adapter.convert(out)
        if self.index is None:
            spec = self.settings.faiss
            self.index = faiss_index(vectors.shape[1], spec)
            if not self.index.is_trained:
                raise UserError(f"faiss index {spec!r} needs training; not supported here")
        self.index.add(vectors)
        self.ids.writelines(f"{d.id}\n" for d in docs)

    def finish(self) -> None:

        self.ids.flush()
        with library_write(self.out / "index"):
            _faiss.write_index(self.index, str(self.out / "index"))
        write_meta(self.out, "dense", num_docs=self.index.ntotal, dim=self.index.d,
                   faiss=self.settings.faiss, **self.fields)


class _ImpactSink(_Sink):
    """``JsonVectorCollection`` of quantised term weights -> Lucene impact index (Anserini) and
    its ``doc_vectors/`` for exact re-scoring of fused candidates. A shard writes only its
    ``vectors.jsonl`` (kind ``impact-shard``): Lucene indexes all shards' vector files at once when
    they are merged (:mod:`pyserini_moe.index.merge`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.sharded = self.settings.shard is not None
        folder = self.out if self.sharded else Path(self.stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pyserini-moe-vectors-")))
        self.vectors_dir = folder
        self.file = self.stack.enter_context(open(folder / IMPACT_VECTORS, "w"))
        self.count = self.terms = 0

    def add(self, docs: list[Document], out: Encoded) -> None:
        for doc, vector in zip(docs, self.adapter.convert(out)):
            self.file.write(json.dumps({"id": doc.id, "contents": "", "vector": vector}) + "\n")
            self.count += 1
            self.terms += len(vector)

    def finish(self) -> None:
        self.file.close()
        impact = {"quantization": self.settings.quantization,
                  "doc_max_terms": self.adapter.max_terms,
                  "terms_per_doc": round(self.terms / max(1, self.count), 1)}
        if self.sharded:
            write_meta(self.out, IMPACT_SHARD, num_docs=self.count, **impact, **self.fields)
            return
        if not self.terms:
            raise UserError(f"every document's term weights round to 0 at --quantization "
                            f"{self.settings.quantization}: the index would hold no term "
                            "(raise the factor, or check that the model is trained)")
        lucene_impact_index(self.vectors_dir, self.out, self.settings.threads)
        write_meta(self.out, "impact", num_docs=self.count, **impact, **self.fields)


class _MultiVectorSink(_Sink):
    """Token vectors (fp16, memory-mapped) + a Faiss token index for late-interaction search."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.writer = None

    def add(self, docs: list[Document], out: Encoded) -> None:

        matrices = self.adapter.convert(out)
        if self.writer is None:  # the writer owns its folder: it renames it over ``out``'s
            self.writer = self.stack.enter_context(MultiVectorIndexWriter(
                self.out, int(matrices[0].shape[1]), self.fields,
                faiss_index=self.settings.faiss, progress=self.settings.progress,
                overwrite=self.settings.overwrite, compression=self.settings.compression,
                expected_docs=self.docs))
        self.writer.add_batch([d.id for d in docs], matrices)

    def finish(self) -> None:
        pass  # the writer finishes (token index, metadata) when the stack closes it


# The settings only some index kinds read (faiss, compression, doc_max_terms, quantization,
# threads): the one table, :data:`pyserini_moe.index.readers.READERS`.
BUILD_KIND_SETTINGS = ("faiss", "compression", "doc_max_terms", "quantization", "threads")


# Build settings that count something (documents, tokens, processes): at least one.
_COUNTS = ("batch_size", "max_length", "quantization", "threads", "tokenizer_workers",
           "length_bucket")


@dataclasses.dataclass(frozen=True)
class BuildSettings:
    """One build of a model's indexes: what ``python -m pyserini_moe.index`` takes for them,
    flag for flag. Settings that cannot work together are refused when the object is made, one
    line each naming the flags (before the model loads), so the command line, the analyses and
    negative mining share one set of checks.

    ``outputs``: ``{"dense": path, "impact": path, "multivector": path}``, any non-empty subset,
    all fed by a single encoding pass of ``encoder``.
    ``faiss``: dense flat | hnsw[M]; multivector flat | ivf{nlist},pq{m} | hnsw[M].
    ``tokenizer_workers`` / ``length_bucket``: ``workers`` / ``bucket`` of
    :func:`~pyserini_moe.encode.pipeline.encode_stream`.
    ``quantization``: impact weights are stored as round(w * factor) (recorded in the index).
    ``compression``: multivector ``none`` | ``pq{m}`` (residual codes, see index.residual).
    ``doc_max_terms``: impact passages keep their heaviest terms only (recorded in the index).
    ``options``: the model's encode-time options (SB-MoE's ``inference``).
    ``zero_shot``: pooling / normalize / query_prefix / passage_prefix of a backbone used
    zero-shot (see ``load_encoder``; recorded in the index, so its searches encode alike).
    """

    corpus: str
    encoder: str
    outputs: dict[str, str | os.PathLike]
    batch_size: int = 32
    max_length: int = 256
    faiss: str = "flat"
    tokenizer_workers: int = 1
    length_bucket: int = 1
    quantization: int = 100
    threads: int = 1
    device: str | None = None
    precision: str = "fp32"
    compression: str | None = None
    doc_max_terms: int | None = None
    overwrite: bool = False
    progress: bool = True
    options: dict[str, Any] | None = None
    shard: Shard | None = None
    zero_shot: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check_types(self)
        for name in _COUNTS:
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            if value < 1:
                raise UserError(f"{flag} must be >= 1")
            if value > JAVA_INT_MAX:  # Lucene's and Faiss's counts are Java / C ints
                raise UserError(f"{flag} must be <= {JAVA_INT_MAX} (a Java int)")
        check_parallelism("--tokenizer-workers", self.tokenizer_workers, processes=True)
        check_parallelism("--threads", self.threads)
        unknown = sorted(set(self.outputs) - set(KINDS))
        if unknown or not self.outputs:
            raise UserError(f"index kinds {unknown or '(none)'}: choose from {KINDS}")
        folders = sorted(Path(p).resolve() for p in self.outputs.values())
        if any(a == b or a in b.parents for a, b in itertools.combinations(folders, 2)):
            raise UserError("each index kind needs its own output folder, none inside another")
        if "dense" in self.outputs:
            check_dense_faiss(self.faiss)
        problem = unread_problem(self._given(), list(self.outputs), READERS)
        if problem:
            raise UserError(problem)
        if "multivector" in self.outputs:

            faiss_factory_string(self.faiss)
            if self.compressed and self.shard is not None:
                raise UserError("--compression applies to whole indexes, not to shards (merged "
                                "indexes are float16)")

    def _given(self) -> list[str]:
        """The :data:`BUILD_KIND_SETTINGS` set away from their defaults (``compression``
        ``none`` is the default spelt out)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return [name for name in BUILD_KIND_SETTINGS
                if (self.compressed if name == "compression"
                    else getattr(self, name) != defaults[name])]

    @property
    def compressed(self) -> bool:
        return (self.compression or "none").lower() != "none"


def build_indexes(settings: BuildSettings) -> list[Path]:
    """Index the corpus (or one shard of it) into one folder per kind of ``settings.outputs``
    from a single encoding pass of the encoder; returns the folders."""

    s = settings
    max_length, shard = s.max_length, s.shard
    folders = {kind: Path(path) for kind, path in s.outputs.items()}
    for folder in folders.values():
        refuse_to_rebuild(folder, s.overwrite, META_FILE)
    collection = open_corpus(s.corpus)
    if shard is not None and shard.num > collection.num_docs():  # some shards would be empty
        raise UserError(f"--shard-num {shard.num} is more shards than the "
                        f"{collection.num_docs()} documents of collection {collection.name}: "
                        f"use at most {collection.num_docs()}")
    model = load_encoder(s.encoder, s.device, options=s.options, precision=s.precision,
                         **(s.zero_shot or {}))
    adapters = {"dense": lambda: DensePassageEncoder(model, max_length=max_length),
                "impact": lambda: ImpactPassageEncoder(model, max_length=max_length,
                                                        quantization=s.quantization,
                                                        max_terms=s.doc_max_terms),
                "multivector": lambda: MultiVectorPassageEncoder(model, max_length=max_length)}
    sinks = {"dense": _DenseSink, "impact": _ImpactSink, "multivector": _MultiVectorSink}
    built = {kind: adapters[kind]() for kind in folders}  # each checks the model can do its kind
    # One representation: the model computes only it; several: everything it produces.
    only = built[next(iter(built))].representation if len(built) == 1 else None
    fields = {"collection": collection.name, "max_length": max_length,
              **_corpus_fields(shard, collection), **describe(model, s.encoder)}
    # a compressed multi-vector build sizes its codec by the corpus (one count)
    docs = collection.num_docs() if "multivector" in folders and s.compressed else None
    with contextlib.ExitStack() as stack:
        active = []
        for kind, folder in folders.items():
            out = folder if kind == "multivector" else stack.enter_context(
                atomic_path(folder, directory=True, overwrite=s.overwrite))
            active.append(sinks[kind](out, built[kind], fields, stack, s, docs))
        seen = 0
        used = {adapter.representation for adapter in built.values()}
        # the next batches are read and tokenized in a background thread while this one encodes
        stream = encode_stream(model, batches(collection, s.batch_size, "+".join(folders),
                                              s.progress, shard),
                               Side.PASSAGE, max_length, only=only,
                               texts=lambda docs: [d.contents for d in docs],
                               workers=s.tokenizer_workers, bucket=s.length_bucket)
        for batch, out in stream:
            _refuse_non_finite(out, used, batch, list(folders.values()))
            for sink in active:
                sink.add(batch, out)
            seen += len(batch)
        if not seen:
            raise UserError(f"nothing to index: {_what(shard, collection)} holds no documents")
        for sink in active:
            sink.finish()
    return list(folders.values())


def _refuse_non_finite(out: Encoded, used: set[Representation], docs: list[Document],
                       folders: list[Path]) -> None:
    """Refused at the first such document, before anything is renamed into place (see
    :func:`~pyserini_moe.encode.common.first_non_finite`)."""

    row = first_non_finite(out, used)
    if row is not None:
        raise UserError(f"{', '.join(map(str, folders))}: document {docs[row].id!r} encodes to NaN "
                        "or infinite values (the model's weights are broken: a diverged "
                        "training?); no index was written")


def build_dense_index(corpus: str, encoder: str, index_dir: str | os.PathLike,
                      **kwargs: Any) -> Path:
    """A Faiss index of one model's dense vectors (``kwargs``: :class:`BuildSettings`' fields)."""
    return build_indexes(BuildSettings(corpus, encoder, {"dense": index_dir}, **kwargs))[0]


def build_impact_index(corpus: str, encoder: str, index_dir: str | os.PathLike,
                       **kwargs: Any) -> Path:
    """A Lucene impact index of one model's term weights (``kwargs``: :class:`BuildSettings`' fields)."""
    return build_indexes(BuildSettings(corpus, encoder, {"impact": index_dir}, **kwargs))[0]


def build_multivector_index(corpus: str, encoder: str, index_dir: str | os.PathLike,
                            **kwargs: Any) -> Path:
    """A multi-vector index of one model's token vectors (``kwargs``: :class:`BuildSettings`' fields)."""
    return build_indexes(BuildSettings(corpus, encoder, {"multivector": index_dir}, **kwargs))[0]


def lucene_impact_index(vectors_dir: str | os.PathLike, out: Path, threads: int = 1) -> int:
    """Anserini's IndexCollection over a folder of ``JsonVectorCollection`` files, and the same
    vectors as ``doc_vectors/`` for exact re-scoring: Lucene stores the docids only, so a
    1,000-hit search (ours or Pyserini's ``LuceneImpactSearcher``) loads no vector. Returns the
    number of postings (terms over all documents)."""

    run_index_collection([
        "-collection", "JsonVectorCollection", "-input", str(vectors_dir), "-index", str(out),
        "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
        "-impact", "-pretokenized", "-quiet",
    ])
    return write_doc_vectors(sorted(Path(vectors_dir).glob("*.jsonl")), out / DOC_VECTORS)[1]


def _what(shard: Shard | None, collection: Corpus) -> str:
    if shard is None:
        return f"collection {collection.name}"
    return f"shard {shard.id} of {shard.num} ({collection.num_docs()} documents in all)"


def _corpus_fields(shard: Shard | None, collection: Corpus) -> dict[str, Any]:
    """The corpus the index was built from (:func:`corpus_identity`) and, for a shard, which
    slice of it the shard holds: merging checks both."""
    fields = {"corpus": corpus_identity(collection)}
    if shard is not None:
        fields["shard"] = shard.describe(collection.num_docs())
    return fields


BUILDERS = {"dense": build_dense_index, "impact": build_impact_index,
            "multivector": build_multivector_index}
