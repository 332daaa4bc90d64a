"""Indexes built from a model's encodings: dense (Faiss), impact (Lucene), multi-vector (ours).

Each builder streams the corpus through the matching Pyserini adapter in batches, writes into a
temporary folder and renames it at the end (an interrupted build leaves nothing that looks
complete), and records the encoder's identity in ``pyserini_moe.json``.
"""

from __future__ import annotations

import itertools
import json
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


def batches(collection: BeirCollection, batch_size: int, desc: str,
            progress: bool = True) -> Iterator[list[Document]]:
    """The corpus in lists of ``batch_size`` documents, with a progress bar."""
    docs = collection.corpus()
    with tqdm(total=collection.num_docs(), desc=desc, unit="doc", disable=not progress) as bar:
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
                      progress: bool = True, options: dict[str, Any] | None = None) -> Path:
    """Faiss index in Pyserini's layout (``index`` + ``docid``), readable by ``FaissSearcher``."""
    import faiss as _faiss  # noqa: PLC0415

    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.dense import DenseDocumentEncoder  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = DenseDocumentEncoder(load_encoder(encoder, device, options=options),
                                       max_length=max_length)
    index = None
    with atomic_path(index_dir, directory=True) as out, open(out / "docid", "w") as ids:
        for batch in batches(collection, batch_size, "dense", progress):
            vectors = doc_encoder.encode([d.contents for d in batch])
            if index is None:
                index = faiss_index(vectors.shape[1], faiss)
                if not index.is_trained:
                    raise ValueError(f"faiss index {faiss!r} needs training; not supported here")
            index.add(vectors)
            ids.writelines(f"{d.id}\n" for d in batch)
        ids.flush()
        _faiss.write_index(index, str(out / "index"))
        write_meta(out, "dense", collection=collection.name, num_docs=index.ntotal,
                   dim=index.d, faiss=faiss, max_length=max_length,
                   **describe(doc_encoder.model, encoder))
    return index_dir


def build_impact_index(corpus: str, encoder: str, index_dir: str | os.PathLike, *,
                       batch_size: int = 32, max_length: int = 256, quantization: int = 100,
                       threads: int = 1, device: str | None = None, overwrite: bool = False,
                       progress: bool = True, options: dict[str, Any] | None = None) -> Path:
    """``JsonVectorCollection`` of quantised term weights -> Lucene impact index (Anserini); the
    raw vectors are stored too, for exact re-scoring of fused candidates."""
    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.impact import ImpactDocumentEncoder  # noqa: PLC0415
    from pyserini_moe.index.lucene import run_index_collection  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = ImpactDocumentEncoder(load_encoder(encoder, device, options=options),
                                        max_length=max_length, quantization=quantization)
    with tempfile.TemporaryDirectory(prefix="pyserini-moe-vectors-") as tmp:
        with open(Path(tmp) / "vectors.jsonl", "w") as f:
            for batch in batches(collection, batch_size, "impact", progress):
                for doc, vector in zip(batch, doc_encoder.encode([d.contents for d in batch])):
                    f.write(json.dumps({"id": doc.id, "contents": "", "vector": vector}) + "\n")
        with atomic_path(index_dir, directory=True) as out:
            run_index_collection([
                "-collection", "JsonVectorCollection", "-input", tmp, "-index", str(out),
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
                "-impact", "-pretokenized", "-storeRaw", "-quiet",
            ])
            write_meta(out, "impact", collection=collection.name, num_docs=collection.num_docs(),
                       quantization=quantization, max_length=max_length,
                       **describe(doc_encoder.model, encoder))
    return index_dir


def build_multivector_index(corpus: str, encoder: str, index_dir: str | os.PathLike, *,
                            batch_size: int = 32, max_length: int = 256, faiss: str = "flat",
                            device: str | None = None, overwrite: bool = False,
                            progress: bool = True, options: dict[str, Any] | None = None) -> Path:
    """Token vectors (fp16, memory-mapped) + a Faiss token index for late-interaction search."""
    from pyserini_moe.encode.common import describe  # noqa: PLC0415
    from pyserini_moe.encode.multivector import MultiVectorDocumentEncoder  # noqa: PLC0415
    from pyserini_moe.index.multivector import MultiVectorIndexWriter  # noqa: PLC0415

    index_dir, collection = _prepare(index_dir, overwrite, corpus)
    doc_encoder = MultiVectorDocumentEncoder(load_encoder(encoder, device, options=options),
                                             max_length=max_length)
    dim = int(doc_encoder.encode(["dimension probe"])[0].shape[1])
    meta = {**describe(doc_encoder.model, encoder), "collection": collection.name,
            "max_length": max_length}
    with MultiVectorIndexWriter(index_dir, dim, meta, faiss_index=faiss,
                                progress=progress) as writer:
        for batch in batches(collection, batch_size, "multivector", progress):
            writer.add_batch([d.id for d in batch], doc_encoder.encode([d.contents for d in batch]))
    return index_dir


BUILDERS = {"dense": build_dense_index, "impact": build_impact_index,
            "multivector": build_multivector_index}
