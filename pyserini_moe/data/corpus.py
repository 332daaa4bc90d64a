"""What ``--corpus`` accepts, for indexing and encoding.

* a BEIR collection: a local name (``scifact``), a folder holding ``corpus.jsonl[.gz]``, or a
  public BEIR name (:class:`~pyserini_moe.data.beir.BeirCollection`);
* Pyserini's ``JsonCollection``: one ``.json`` / ``.jsonl[.gz]`` file, or a folder of them, with
  records ``{"id": ..., "contents": ...}`` (JSON lines, or one JSON array per file), what
  ``python -m pyserini.index.lucene --collection JsonCollection`` indexes;
* a TREC CAR paragraphs file (``*.cbor``, :mod:`pyserini_moe.data.car`).

The two document-only forms have no queries or judgments: they can be indexed and searched with
topics from anywhere, not trained on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyserini_moe.data.beir import BeirCollection, Document, check_id
from pyserini_moe.data.car import read_car_paragraphs
from pyserini_moe.errors import DataFormatError
from pyserini_moe.io import iter_lines, json_record, sha256_of_files
from pyserini_moe.representation import INDEX_META_FILE

JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
BEIR_CORPUS = ("corpus.jsonl", "corpus.jsonl.gz")
FORMS = ("a BEIR collection (name or folder with corpus.jsonl), Pyserini's JsonCollection (a "
         '.json/.jsonl file or a folder of them, records {"id", "contents"}) or a TREC CAR '
         "paragraphs file (.cbor)")


class DocumentFiles:
    """A corpus without queries or judgments, read by ``reader`` in file order."""

    def __init__(self, root: Path, reader: Callable[[], Iterator[Document]],
                 files: list[Path] | None = None) -> None:
        self.root = root
        self.files = files or [root]  # what ``reader`` reads, in its order
        self.name = root.name.split(".")[0] if root.is_file() else root.name
        self._reader = reader
        self._count: int | None = None

    def __repr__(self) -> str:
        return f"DocumentFiles({str(self.root)!r})"

    def corpus(self) -> Iterator[Document]:
        return self._reader()

    def num_docs(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self.corpus())
        return self._count


Corpus = BeirCollection | DocumentFiles


def open_corpus(spec: str | os.PathLike) -> Corpus:
    """The collection ``spec`` names, in any of the forms above."""
    path = Path(spec).expanduser()
    if path.is_file():
        if path.name.endswith(".cbor"):

            return DocumentFiles(path, lambda: read_car_paragraphs(path))
        if path.name.endswith(JSON_SUFFIXES):
            return DocumentFiles(path, lambda: read_json_collection([path]))
        raise DataFormatError(path, f"not a corpus: --corpus takes {FORMS}")
    if path.is_dir() and (path / INDEX_META_FILE).is_file():
        raise DataFormatError(path, "an index, not a collection: --corpus takes the collection "
                                    "it was built from")
    if path.is_dir() and not any((path / f).is_file() for f in BEIR_CORPUS):
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(JSON_SUFFIXES))
        if not files:
            raise DataFormatError(path, f"not a corpus: --corpus takes {FORMS}")
        return DocumentFiles(path, lambda: read_json_collection(files), files)
    return BeirCollection.load(spec)


def corpus_identity(collection: Corpus) -> dict[str, Any]:
    """What identifies a corpus exactly, recorded by every index built from it: its resolved
    path (for the reader), its document count and the SHA-256 of its files' bytes, in reading
    order (for a one-file corpus, what ``sha256sum`` prints). Two corpora can share a name
    (``/a/scifact``, ``/b/scifact``): merging shards and searching indexes together compare the
    digest. Hashing reads the files once, seconds per GB, next to any index build."""
    files = [collection.corpus_path] if isinstance(collection, BeirCollection) else collection.files
    return {"path": str(collection.root.resolve()), "documents": collection.num_docs(),
            "sha256": sha256_of_files(files)}


def read_json_collection(files: list[Path]) -> Iterator[Document]:
    """Documents of JsonCollection ``files`` in order; ids unique across files."""
    seen: dict[str, str] = {}
    for path in files:
        for where, record in _records(path):
            if not isinstance(record, dict):
                raise DataFormatError(path, "expected a JSON object", where)
            if "id" not in record or "contents" not in record:
                beir = "_id" in record and "text" in record
                hint = (f" (this is a BEIR record, \"_id\" and \"text\": give --corpus "
                        f"{path.parent}, the BEIR folder)") if beir else ""
                raise DataFormatError(path, 'a JsonCollection record needs "id" and '
                                            f'"contents"{hint}', where)
            doc_id = check_id(path, where, record["id"], "document")
            if doc_id in seen:
                raise DataFormatError(path, f"duplicate document id {doc_id!r} (first in "
                                            f"{seen[doc_id]})", where)
            seen[doc_id] = f"{path.name}:{where}"
            if not isinstance(record["contents"], str):
                raise DataFormatError(path, '"contents" must be a string', where)
            yield Document(doc_id, "", record["contents"])
    if not seen:
        raise DataFormatError(files[0] if len(files) == 1 else files[0].parent, "no documents")


def _records(path: Path) -> Iterator[tuple[int, object]]:
    """(line, record) of a JSON-lines file, or (record number, record) of a JSON array file."""
    lines = iter_lines(path)
    first = next(lines, None)
    if first is None:
        return
    if first[1].lstrip().startswith("["):
        records = json_record(path, None, "\n".join([first[1], *(line for _, line in lines)]))
        yield from enumerate(records, 1)
        return
    for lineno, line in [first, *lines]:
        yield lineno, json_record(path, lineno, line)
