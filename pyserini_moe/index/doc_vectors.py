"""An impact index's document vectors, kept beside Lucene for exact re-scoring.

Fusing experts (CAME's ``exact`` fusion) needs each candidate's quantised term weights. They used
to sit in Lucene's stored fields (``-storeRaw``), but Anserini loads every hit's stored document,
so each 1,000-hit search read 1,000 JSON vectors: Pyserini's own ``LuceneImpactSearcher`` did not
finish Cranfield at 1,000 hits. Lucene now stores the document id only, and the vectors live in
``<index>/doc_vectors/`` as one compressed sparse-row matrix, written in one streaming pass and
memory-mapped when read:

* ``docids.txt``: one docid per line, row order;
* ``vocab.json``: the terms, a list (term id = position);
* ``indptr.i64``: row ``i`` spans ``[indptr[i], indptr[i + 1])`` of the next two files;
* ``terms.i32`` / ``weights.i32``: term ids and quantised weights, little-endian.

Scores are integer dot products (int64) of the quantised vectors: the model's own score in
Lucene's units. (Pyserini's ``LuceneImpactSearcher`` also drops query terms whose idf is not
above ``min_idf``, e.g. a term in every document; exact re-scoring keeps them.)
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import IndexMismatchError, check_unique_ids
from pyserini_moe.io import read_json, reading

DOC_VECTORS = "doc_vectors"
_FLUSH = 1 << 20  # term entries buffered before they are appended to disk


def write_doc_vectors(files: Iterable[Path], out: Path) -> tuple[int, int]:
    """Write the vectors of ``JsonVectorCollection`` ``files`` (in order) to ``out``; returns
    (documents, terms). Memory stays bounded by the vocabulary and one buffer."""
    out.mkdir(parents=True, exist_ok=False)
    vocab: dict[str, int] = {}
    terms, weights, indptr = array("i"), array("i"), array("q", [0])
    total = total_docs = 0
    with open(out / "docids.txt", "w", encoding="utf-8") as ids, \
            open(out / "terms.i32", "wb") as tf, open(out / "weights.i32", "wb") as wf:
        for path in files:
            for docid, vector in _read_vectors(path):
                ids.write(f"{docid}\n")
                for term, weight in vector.items():
                    terms.append(vocab.setdefault(term, len(vocab)))
                    weights.append(weight)
                total += len(vector)
                indptr.append(total)
                total_docs += 1
                if len(terms) >= _FLUSH:
                    _append(terms, tf, "<i4")
                    _append(weights, wf, "<i4")
        _append(terms, tf, "<i4")
        _append(weights, wf, "<i4")
    with open(out / "indptr.i64", "wb") as f:
        _append(indptr, f, "<i8")
    (out / "vocab.json").write_text(json.dumps(list(vocab)), encoding="utf-8")
    return total_docs, total


def _read_vectors(path: Path) -> Iterator[tuple[str, dict[str, int]]]:
    """``(docid, {term: weight})`` per line of a ``JsonVectorCollection`` file. A damaged line
    (a shard's ``vectors.jsonl`` cut short by an interrupted copy) is one error naming the file
    (through a merge's links: the shard's own) and the line, not a JSON traceback."""
    with open(path, encoding="utf-8") as f:
        try:
            for lineno, line in enumerate(f, 1):
                yield _vector_line(line, f"{path.resolve()}:{lineno}")
        except UnicodeDecodeError as e:
            raise UserError(f"{path.resolve()}: not UTF-8 text ({e.reason}); the vectors file "
                            "is damaged: rebuild the index (or shard)") from None


def _vector_line(line: str, where: str) -> tuple[str, dict[str, int]]:
    """One ``{"id": ..., "vector": {term: weight}}`` line, checked (``where``: file:line)."""
    try:
        doc = json.loads(line)
        docid, vector = doc["id"], doc["vector"]
        weights = {str(term): int(weight) for term, weight in vector.items()}
    except (json.JSONDecodeError, TypeError, KeyError, AttributeError, ValueError) as e:
        raise UserError(f"{where}: not a vector line {{\"id\", \"vector\": {{term: weight}}}} "
                        f"({type(e).__name__}: {e}); the vectors file is damaged (an "
                        "interrupted copy?): rebuild the index (or shard)") from None
    if not isinstance(docid, str) or not docid or "\n" in docid or "\r" in docid:
        raise UserError(f"{where}: docid must be non-empty and on one line, got {docid!r}")
    return docid, weights


def _append(values: array, f: BinaryIO, dtype: str) -> None:
    """Append ``values`` to ``f`` as little-endian ``dtype`` and empty the buffer."""
    np.asarray(values, dtype=dtype).tofile(f)
    del values[:]


class DocVectors:
    """Read side of :func:`write_doc_vectors`: ``score(query, docids)`` for exact re-scoring."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with reading(folder / "docids.txt", "index's docid list", "rebuild the index"):
            docids = (folder / "docids.txt").read_text(encoding="utf-8").split("\n")[:-1]
        check_unique_ids(folder / "docids.txt", docids)
        self.rows = {d: i for i, d in enumerate(docids)}
        vocab = read_json(folder / "vocab.json", "index's vocabulary")
        if not isinstance(vocab, list):
            raise IndexMismatchError(f"{folder / 'vocab.json'}: not a list of terms; the index "
                                     "is damaged: rebuild it")
        self.vocab = {t: i for i, t in enumerate(vocab)}
        self.indptr = _map(folder / "indptr.i64", "<i8")
        if len(self.indptr) != len(docids) + 1:
            raise IndexMismatchError(f"{folder}: {len(docids)} docids for "
                                     f"{len(self.indptr) - 1} vectors; rebuild the index")
        self.terms = _map(folder / "terms.i32", "<i4")
        self.weights = _map(folder / "weights.i32", "<i4")
        self._check_postings(folder)

    def _check_postings(self, folder: Path) -> None:
        """Offsets that start at 0 and never fall, and as many terms and weights as they end at:
        a truncated or overwritten file would otherwise score silently wrong (short slices) or
        fail deep in a matrix product. (Term numbers are checked as documents are scored: a scan
        of every posting at open would cost minutes on a large index.)"""
        indptr, postings = self.indptr, int(self.indptr[-1])
        if indptr[0] != 0 or bool(np.any(np.diff(indptr) < 0)):
            raise IndexMismatchError(f"{folder / 'indptr.i64'}: offsets out of order; the index "
                                     "is damaged: rebuild it")
        for name, values in (("terms.i32", self.terms), ("weights.i32", self.weights)):
            if len(values) != postings:
                raise IndexMismatchError(f"{folder / name}: {len(values)} entries where "
                                         f"indptr.i64 ends at {postings}; the index is damaged: "
                                         "rebuild it")

    def __contains__(self, docid: str) -> bool:
        return docid in self.rows

    def score(self, query: dict[str, int], docids: list[str]) -> dict[str, int]:
        """Integer dot products of one quantised query with each document of ``docids``
        (every one must be in the index)."""
        dense = np.zeros(len(self.vocab), dtype=np.int64)
        for term, weight in query.items():
            if term in self.vocab:
                dense[self.vocab[term]] = weight
        scores = {}
        for docid in docids:
            row = self.rows[docid]
            start, stop = int(self.indptr[row]), int(self.indptr[row + 1])
            terms = self.terms[start:stop]
            if len(terms) and not 0 <= int(terms.min()) <= int(terms.max()) < len(dense):
                raise IndexMismatchError(f"{self.folder / 'terms.i32'}: document {docid!r} has "
                                         f"term numbers outside the {len(dense)}-term "
                                         "vocabulary; the index is damaged: rebuild it")
            scores[docid] = int(dense[terms] @ self.weights[start:stop])
        return scores


def _map(path: Path, dtype: str) -> np.ndarray:
    """A read-only memory map (an empty file maps to an empty array; mmap refuses size 0)."""
    with reading(path, "index's document vectors", "rebuild the index"):
        if path.stat().st_size == 0:
            return np.zeros(0, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r")
