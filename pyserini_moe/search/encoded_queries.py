"""Topics encoded ahead of time, in the forms Pyserini's own command lines read, so a model of
ours can be searched with ``python -m pyserini.search.faiss --encoded-queries`` (dense) or
``python -m pyserini.search.lucene --impact --encoder <file>.jsonl`` (impact) and give the runs
``python -m pyserini_moe.search`` gives:

* dense: a folder with ``embedding.pkl``, a pandas DataFrame of columns ``text`` and
  ``embedding`` (Pyserini's ``QueryEncoder`` looks each query up by its text);
* impact: a JSON-lines file of ``{"id", "contents", "vector": {token: weight}}``, Pyserini's
  ``CachedDataQueryEncoder`` form, with the weights quantised as the index's documents were.

The query encoder is the one the index records, checked against it as a search checks it.
:func:`read_encoded_queries` reads either form back (ours or Pyserini's) for ``search
--encoded-queries``: each query's vector by its text, as Pyserini looks them up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, read_dataframe_pickle
from pyserini_moe.search.encoded import open_searcher

KINDS = ("dense", "impact")
EMBEDDING_FILE = "embedding.pkl"


def encode_queries(index: str | os.PathLike, kind: str, topics: dict[str, str],
                   output: str | os.PathLike, encoder: str | None = None,
                   device: str | None = None, query_max_length: int | None = None,
                   batch_size: int = 64, overwrite: bool = False,
                   precision: str = "fp32") -> Path:
    """Encode ``topics`` with the query encoder of ``index`` into ``output`` (atomically)."""
    if kind not in KINDS:
        raise UserError(f"Pyserini reads pre-encoded queries for dense and impact indexes, not "
                        f"{kind!r}")
    output = Path(output)
    _check_output(output, kind, overwrite)
    searcher = open_searcher(kind, index, encoder, device, query_max_length,
                             precision=precision)
    qids = list(topics)
    vectors = []
    for start in range(0, len(qids), batch_size):
        texts = [topics[q] for q in qids[start:start + batch_size]]
        vectors.extend(searcher.query_encoder.encode_batch(texts))
    if kind == "dense":

        frame = pd.DataFrame({"text": [topics[q] for q in qids],
                              "embedding": [v.astype("float32") for v in vectors]})
        with atomic_path(output, directory=True, overwrite=overwrite) as tmp:
            frame.to_pickle(tmp / EMBEDDING_FILE)
    else:
        with atomic_path(output, overwrite=overwrite) as tmp, tmp.open("w") as f:
            for qid, vector in zip(qids, vectors):
                f.write(json.dumps({"id": qid, "contents": topics[qid], "vector": vector}) + "\n")
    return output


def _check_output(output: Path, kind: str, overwrite: bool) -> None:
    """Before any encoding: what is at ``output`` must be what this writes for ``kind`` (a
    dense index's queries are a folder, ``embedding.pkl`` inside; an impact index's a file), and
    ``overwrite`` replaces only queries written before, never an index, a model or a folder of
    the user's files (a dense output folder was once refused as "a directory: name a file")."""
    if not output.exists():
        return
    if kind == "impact" and output.is_dir():
        raise IsADirectoryError(f"{output} is a directory: an impact index's queries are a "
                                "JSON-lines file; name a file to write")
    if kind == "dense" and not output.is_dir():
        raise FileExistsError(f"{output} is a file: a dense index's queries are a folder "
                              f"({EMBEDDING_FILE} inside); name a folder to write")
    if kind == "dense" and any(output.iterdir()) and not (output / EMBEDDING_FILE).is_file():
        raise FileExistsError(f"{output} holds no {EMBEDDING_FILE}: it is not encoded queries, "
                              "and --overwrite replaces only those; name another folder")
    if not overwrite:
        raise FileExistsError(f"{output} already exists; pass --overwrite to replace it")


def read_encoded_queries(path: str | os.PathLike, kind: str) -> dict[str, Any]:
    """Queries encoded ahead of time, by their text (stripped, as Pyserini keys them): a dense
    folder's ``embedding.pkl`` (float32 vectors; a pickle that would build anything but a table
    is refused unrun) or an impact JSON-lines file (``{token: weight}``). Every problem is one
    line naming the file."""
    if kind not in KINDS:
        raise UserError(f"--encoded-queries applies to dense and impact searches, not {kind!r}")
    path = Path(path)
    file = path / EMBEDDING_FILE if kind == "dense" and path.is_dir() else path
    if not file.is_file():
        form = f"a folder with {EMBEDDING_FILE}" if kind == "dense" else "a JSON-lines file"
        raise FileNotFoundError(f"encoded queries not found: {file} (expected {form}, as "
                                "`python -m pyserini_moe.encode_queries` writes)")
    vectors = _read_dense(file) if kind == "dense" else _read_impact(file)
    if not vectors:
        raise UserError(f"{file} holds no encoded query")
    return vectors


def _read_dense(file: Path) -> dict[str, Any]:

    frame = read_dataframe_pickle(file)
    columns = list(getattr(frame, "columns", []))
    if "text" not in columns or "embedding" not in columns:
        raise UserError(f"{file}: expected a table with columns 'text' and 'embedding' "
                        f"(Pyserini's encoded queries), found {columns or type(frame).__name__}")
    vectors = {}
    for text, embedding in zip(frame["text"], frame["embedding"]):
        vector = np.asarray(embedding, dtype=np.float32)
        if vector.ndim != 1 or not np.isfinite(vector).all():
            raise UserError(f"{file}: the query {str(text)[:60]!r} has no finite vector")
        vectors[str(text).strip()] = vector
    if len({v.shape for v in vectors.values()}) > 1:
        raise UserError(f"{file}: the query vectors differ in length")
    return vectors


def _read_impact(file: Path) -> dict[str, dict[str, float]]:
    vectors = {}
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text, vector = record["contents"], record["vector"]
                ok = isinstance(text, str) and isinstance(vector, dict) and all(
                    isinstance(w, (int, float)) and not isinstance(w, bool)
                    for w in vector.values())
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                raise UserError(f"{file}, line {number}: expected {{\"contents\": text, "
                                "\"vector\": {token: weight}}")
            vectors[text.strip()] = vector
    return vectors
