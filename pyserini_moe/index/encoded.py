"""Indexes built from a model's encodings: dense (Faiss), impact (Lucene), multi-vector (ours).

Each builder streams the corpus through the matching Pyserini adapter in batches, writes into a
temporary folder and renames it at the end (an interrupted build leaves nothing that looks
complete), and records the encoder's identity in ``pyserini_moe.json``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pyserini_moe.data.beir import BeirCollection, Document
from pyserini_moe.index.meta import write_meta
from pyserini_moe.io import atomic_path
from pyserini_moe.modeling.auto import load_encoder

KINDS = ("dense", "impact", "multivector")
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
            raise ValueError(f"shard {self.id} of {self.num}: need 0 <= --shard-id < --shard-num")

    def span(self, n_docs: int) -> tuple[int, int]:
        """[start, stop) document numbers of this shard in a corpus of ``n_docs``."""
        size = math.ceil(n_docs / self.num)
        start = min(n_docs, self.id * size)
        return start, min(n_docs, start + size)

    def describe(self, n_docs: int) -> dict[str, int]:
        start, stop = self.span(n_docs)
        return {"id": self.id, "num": self.num, "start": start, "stop": stop}


def batches(collection: BeirCollection, batch_size: int, desc: str, progress: bool = True,
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
    import faiss  # noqa: PLC0415

    if spec == "flat":
        return faiss.IndexFlatIP(dim)
    if spec.startswith("hnsw"):
        m = int(spec[4:] or 32)
        return faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
    raise ValueError(f"unknown faiss index {spec!r}: use 'flat' or 'hnsw[M]' (e.g. hnsw32)")


def _prepare(index_dir: str | os.PathLike, overwrite: bool, corpus: str) -> tuple[Path, BeirCollection]:
    index_dir = Path(index_dir)
    if index_dir.exists() and not overwrite:
        raise FileExistsError(f"{index_dir} already exists; pass --overwrite to rebuild it")
    return index_dir, BeirCollection.load(corpus)


def build_dense_index(corpus: str, encoder: str, index_dir: str | os.PathLike, *,
                      batch_size: int = 32, max_length: int = 256, faiss: str = "flat",
                      device: str | None = None, overwrite: bool = False,
                      progress: bool = True, options: dict[str, Any] | None = None,
                      shard: Shard | None = None) -> Path:
    """Faiss index in Pyserini's layout (``index`` + ``docid``), readable by ``FaissSearcher``;
    of one ``shard`` of the corpus if given (see :mod:`pyserini_moe.index.merge`)."""
    import faiss as _faiss  # noqa: PLC0415

    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.dense import DenseDocumentEncoder  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = DenseDocumentEncoder(load_encoder(encoder, device, options=options),
                                       max_length=max_length)
    index = None
    with atomic_path(index_dir, directory=True) as out, open(out / "docid", "w") as ids:
        for batch in batches(collection, batch_size, "dense", progress, shard):
            vectors = doc_encoder.encode([d.contents for d in batch])
            if index is None:
                index = faiss_index(vectors.shape[1], faiss)
                if not index.is_trained:
                    raise ValueError(f"faiss index {faiss!r} needs training; not supported here")
            index.add(vectors)
            ids.writelines(f"{d.id}\n" for d in batch)
        if index is None:
            raise ValueError(f"nothing to index: {_what(shard, collection)} holds no documents")
        ids.flush()
        _faiss.write_index(index, str(out / "index"))
        write_meta(out, "dense", collection=collection.name, num_docs=index.ntotal,
                   dim=index.d, faiss=faiss, max_length=max_length,
                   **_shard_field(shard, collection), **describe(doc_encoder.model, encoder))
    return index_dir


def build_impact_index(corpus: str, encoder: str, index_dir: str | os.PathLike, *,
                       batch_size: int = 32, max_length: int = 256, quantization: int = 100,
                       threads: int = 1, device: str | None = None, overwrite: bool = False,
                       progress: bool = True, options: dict[str, Any] | None = None,
                       shard: Shard | None = None) -> Path:
    """``JsonVectorCollection`` of quantised term weights -> Lucene impact index (Anserini); the
    raw vectors are stored too, for exact re-scoring of fused candidates.

    A ``shard`` writes only its ``vectors.jsonl`` (kind ``impact-shard``): Lucene indexes all
    shards' vector files at once when they are merged (:mod:`pyserini_moe.index.merge`).
    """
    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.impact import ImpactDocumentEncoder  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = ImpactDocumentEncoder(load_encoder(encoder, device, options=options),
                                        max_length=max_length, quantization=quantization)
    meta = {"collection": collection.name, "quantization": quantization,
            "max_length": max_length, **describe(doc_encoder.model, encoder)}

    def write_vectors(folder: Path) -> int:
        count = terms = 0
        with open(folder / IMPACT_VECTORS, "w") as f:
            for batch in batches(collection, batch_size, "impact", progress, shard):
                for doc, vector in zip(batch, doc_encoder.encode([d.contents for d in batch])):
                    f.write(json.dumps({"id": doc.id, "contents": "", "vector": vector}) + "\n")
                    count += 1
                    terms += len(vector)
        if count and not terms and shard is None:
            raise ValueError(f"every document's term weights round to 0 at --quantization "
                             f"{quantization}: the index would hold no term (raise the factor, or "
                             "check that the model is trained)")
        return count

    if shard is not None:
        with atomic_path(index_dir, directory=True) as out:
            count = write_vectors(out)
            write_meta(out, IMPACT_SHARD, num_docs=count, **_shard_field(shard, collection),
                       **meta)
        return index_dir
    with tempfile.TemporaryDirectory(prefix="pyserini-moe-vectors-") as tmp:
        count = write_vectors(Path(tmp))
        with atomic_path(index_dir, directory=True) as out:
            lucene_impact_index(tmp, out, threads)
            write_meta(out, "impact", num_docs=count, **meta)
    return index_dir


def lucene_impact_index(vectors_dir: str | os.PathLike, out: Path, threads: int = 1) -> None:
    """Anserini's IndexCollection over a folder of ``JsonVectorCollection`` files."""
    from pyserini_moe.index.lucene import run_index_collection  # noqa: PLC0415

    run_index_collection([
        "-collection", "JsonVectorCollection", "-input", str(vectors_dir), "-index", str(out),
        "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
        "-impact", "-pretokenized", "-storeRaw", "-quiet",
    ])


def _what(shard: Shard | None, collection: BeirCollection) -> str:
    if shard is None:
        return f"collection {collection.name}"
    return f"shard {shard.id} of {shard.num} ({collection.num_docs()} documents in all)"


def _shard_field(shard: Shard | None, collection: BeirCollection) -> dict[str, Any]:
    return {} if shard is None else {"shard": shard.describe(collection.num_docs())}


def build_multivector_index(corpus: str, encoder: str, index_dir: str | os.PathLike, *,
                            batch_size: int = 32, max_length: int = 256, faiss: str = "flat",
                            device: str | None = None, overwrite: bool = False,
                            progress: bool = True, options: dict[str, Any] | None = None,
                            shard: Shard | None = None) -> Path:
    """Token vectors (fp16, memory-mapped) + a Faiss token index for late-interaction search;
    of one ``shard`` of the corpus if given."""
    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.multivector import MultiVectorDocumentEncoder  # noqa: PLC0415
    from pyserini_moe.index.multivector import MultiVectorIndexWriter  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = MultiVectorDocumentEncoder(load_encoder(encoder, device, options=options),
                                             max_length=max_length)
    dim = int(doc_encoder.encode(["dimension probe"])[0].shape[1])
    meta = {**describe(doc_encoder.model, encoder), "collection": collection.name,
            "max_length": max_length, **_shard_field(shard, collection)}
    with MultiVectorIndexWriter(index_dir, dim, meta, faiss_index=faiss,
                                progress=progress) as writer:
        for batch in batches(collection, batch_size, "multivector", progress, shard):
            writer.add_batch([d.id for d in batch], doc_encoder.encode([d.contents for d in batch]))
    return index_dir


BUILDERS = {"dense": build_dense_index, "impact": build_impact_index,
            "multivector": build_multivector_index}
