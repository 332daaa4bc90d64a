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
import math
import os
import zlib
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from pyserini_moe.errors import UserError
from pyserini_moe.io import (
    atomic_path,
    iter_lines,
    open_binary,
    open_text_output,
    read_dataframe_pickle,
    refuse_special_output,
)
from pyserini_moe.modeling.folder import fingerprint
from pyserini_moe.outputs import refuse_foreign_folder
from pyserini_moe.runs import JAVA_INT_MAX
from pyserini_moe.search.encoded import open_searcher

KINDS = ("dense", "impact")
EMBEDDING_FILE = "embedding.pkl"
# Suffixes that name a file: a dense output named with one is refused (a folder is written).
_FILE_SUFFIXES = (".jsonl", ".json", ".pkl", ".tsv", ".txt", ".trec", ".gz")
# Which encoder made the queries (modeling.folder.fingerprint): a dense table's ``attrs`` entry,
# each impact record's key. Pyserini reads the columns / keys it knows and ignores it; search
# --encoded-queries compares it with the index's, as it compares an --encoder's.
FINGERPRINT = "encoder_fingerprint"
# How the queries were encoded ({"query_max_length": n} and, impact, "query_max_terms" and the
# "quantization" of the weights): the table's ``attrs`` entry, each impact record's key. search
# --encoded-queries refuses another quantisation than the index's (scores on another scale) and
# says where the cut differs from what a search with the encoder would make.
ENCODING = "encoding"


def encode_queries(index: str | os.PathLike, kind: str, topics: dict[str, str],
                   output: str | os.PathLike, encoder: str | None = None,
                   device: str | None = None, query_max_length: int | None = None,
                   batch_size: int = 64, overwrite: bool = False,
                   precision: str = "fp32", query_max_terms: int | None = None) -> Path:
    """Encode ``topics`` with the query encoder of ``index`` into ``output`` (atomically),
    recording the encoder and how they were encoded (the cut, impact's quantisation) with them."""
    if kind not in KINDS:
        raise UserError(f"Pyserini reads pre-encoded queries for dense and impact indexes, not "
                        f"{kind!r}")
    output = Path(output)
    _check_output(output, kind, overwrite)
    searcher = open_searcher(kind, index, encoder, device, query_max_length, query_max_terms,
                             precision=precision)
    qids = list(topics)
    vectors = []
    batches = ([topics[q] for q in qids[start:start + batch_size]]
               for start in range(0, len(qids), batch_size))
    for batch_vectors in searcher.query_encoder.encode_batches(batches):
        vectors.extend(batch_vectors)
    made_by = fingerprint(searcher.query_encoder.model)
    encoding = {"query_max_length": searcher.query_encoder.max_length}
    if kind == "impact":
        encoding.update(query_max_terms=searcher.query_max_terms,
                        quantization=searcher.meta.quantization)
    if kind == "dense":
        frame = pd.DataFrame({"text": [topics[q] for q in qids],
                              "embedding": [v.astype("float32") for v in vectors]})
        frame.attrs.update({FINGERPRINT: made_by, ENCODING: encoding})  # pickled with the table
        with atomic_path(output, directory=True, overwrite=overwrite) as tmp:
            frame.to_pickle(tmp / EMBEDDING_FILE)
    else:  # gzipped when the name ends in .gz, as every reader here expects
        with atomic_path(output, overwrite=overwrite) as tmp, \
                open_text_output(tmp, output) as f:
            for qid, vector in zip(qids, vectors):
                f.write(json.dumps({"id": qid, "contents": topics[qid], "vector": vector,
                                    FINGERPRINT: made_by, ENCODING: encoding}) + "\n")
    return output


def _check_output(output: Path, kind: str, overwrite: bool) -> None:
    """Before any encoding: what is at ``output`` must be what this writes for ``kind`` (a
    dense index's queries are a folder, ``embedding.pkl`` inside; an impact index's a file), and
    ``overwrite`` replaces only queries written before, never an index, a model or a folder of
    the user's files, nor queries the user put files beside; a dense output is a folder, not
    "a directory: name a file". A FIFO or device is refused
    before anything reads it (a read of a FIFO would wait for a writer)."""
    refuse_special_output(output)
    if kind == "dense":
        _refuse_file_name_for_folder(output)
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
    if kind == "impact" and not _holds_impact_queries(output):
        raise FileExistsError(f"{output} is not impact encoded queries (its first line is no "
                              f"{{{', '.join(map(repr, _IMPACT_KEYS))}}} record, as this writes): "
                              "--overwrite replaces only those; name another file")
    if not overwrite:
        raise FileExistsError(f"{output} already exists; pass --overwrite to replace it")
    if kind == "dense":  # encoded queries and nothing else: a user's notes put beside survive
        refuse_foreign_folder(output, EMBEDDING_FILE)


def _refuse_file_name_for_folder(output: Path) -> None:
    """A dense output named like a file (``x.jsonl``, ``q.pkl.gz``) would be written as a folder
    of that name, which neither the user nor a reader of files expects: refuse it and offer the
    name without its file suffixes."""
    suffix = output.suffix.lower()
    if suffix not in _FILE_SUFFIXES:
        return
    stem = output.name
    while Path(stem).suffix.lower() in _FILE_SUFFIXES:
        stem = Path(stem).stem
    raise UserError(f"--output {output}: a dense index's queries are a folder holding "
                    f"{EMBEDDING_FILE} (Pyserini's encoded-queries layout), not a {suffix} "
                    f"file: name it without the suffix, e.g. {output.with_name(stem)}")


_IMPACT_KEYS = ("id", "contents", "vector")  # one impact query's record, as encode_queries writes it
# ... the same with the encoder's fingerprint, and with how the queries were encoded: the three
# record forms files written by this toolkit hold, oldest first
_IMPACT_FORMS = (sorted(_IMPACT_KEYS), sorted([*_IMPACT_KEYS, FINGERPRINT]),
                 sorted([*_IMPACT_KEYS, FINGERPRINT, ENCODING]))
_FIRST_LINE_LIMIT = 1 << 24  # bytes: a query of every term of a large vocabulary fits


def _holds_impact_queries(file: Path) -> bool:
    """Whether ``file`` is empty or starts with an impact query's record: ``--overwrite`` then
    replaces queries written before, never a collection's corpus, a run or any other file (a
    ``corpus.jsonl`` named by mistake stays whole). The first line alone is read, so
    a large file of something else costs nothing to refuse. A ``.gz`` file is read gunzipped,
    as it was written."""
    try:
        with open_binary(file) as f:
            line = f.readline(_FIRST_LINE_LIMIT)
    except (OSError, EOFError, zlib.error):  # not gzip after all, or a broken stream
        return False
    if not line:  # an empty file: nothing to lose
        return True
    try:
        record = json.loads(line)
    except ValueError:  # not JSON, not UTF-8, or a line cut at the limit
        return False
    return (isinstance(record, dict) and sorted(record) in _IMPACT_FORMS
            and isinstance(record["contents"], str) and isinstance(record["vector"], dict))


class EncodedQueries(NamedTuple):
    """Queries encoded ahead of time: the vectors by query text, the fingerprint of the encoder
    that made them and how they were encoded (``{"query_max_length": n, "query_max_terms": m,
    "quantization": q}``); None where they record none (Pyserini's, or ours written before these
    were recorded)."""

    vectors: dict[str, Any]
    made_by: str | None
    encoding: dict[str, int] | None


def read_encoded_queries(path: str | os.PathLike, kind: str) -> dict[str, Any]:
    """Queries encoded ahead of time, by their text: see :func:`read_encoded_queries_made_by`."""
    return read_encoded_queries_made_by(path, kind).vectors


def read_encoded_queries_made_by(path: str | os.PathLike, kind: str) -> EncodedQueries:
    """Queries encoded ahead of time, by their text (stripped, as Pyserini keys them): a dense
    folder's ``embedding.pkl`` (float32 vectors; a pickle that would build anything but a table
    is refused unrun) or an impact JSON-lines file (``{token: weight}``, gzipped when named
    ``.gz``), with what they record of their encoder and encoding. Every problem is one line naming
    the file."""
    if kind not in KINDS:
        raise UserError(f"--encoded-queries applies to dense and impact searches, not {kind!r}")
    path = Path(path)
    file = path / EMBEDDING_FILE if kind == "dense" and path.is_dir() else path
    if not file.is_file():
        form = f"a folder with {EMBEDDING_FILE}" if kind == "dense" else "a JSON-lines file"
        what = "not found" if not file.exists() else (
            "dense encoded queries, but the index is an impact index"
            if (file / EMBEDDING_FILE).is_file() else "a folder, not a file")
        raise FileNotFoundError(f"encoded queries {file}: {what} (expected {form}, as "
                                "`python -m pyserini_moe.encode_queries` writes for the "
                                "index's kind)")
    read = _read_dense(file) if kind == "dense" else _read_impact(file)
    if not read.vectors:
        raise UserError(f"{file} holds no encoded query")
    return read


def _read_dense(file: Path) -> EncodedQueries:
    """Every row's vector checked as it is read (:func:`_dense_vector`), so a damaged table is
    one line naming the file and the query, never numpy's traceback or warning; and the
    encoder's fingerprint the table's ``attrs`` record."""
    frame = read_dataframe_pickle(file)
    columns = list(getattr(frame, "columns", []))
    if "text" not in columns or "embedding" not in columns:
        raise UserError(f"{file}: expected a table with columns 'text' and 'embedding' "
                        f"(Pyserini's encoded queries), found {columns or type(frame).__name__}")
    vectors = {}
    for text, embedding in zip(frame["text"], frame["embedding"]):
        problem, vector = _dense_vector(embedding)
        if problem:
            raise UserError(f"{file}: the query {str(text)[:60]!r} {problem}")
        _keep_once(vectors, str(text).strip(), vector, file)
    if len({v.shape for v in vectors.values()}) > 1:
        raise UserError(f"{file}: the query vectors differ in length")
    attrs = getattr(frame, "attrs", {})
    made_by, encoding = attrs.get(FINGERPRINT), attrs.get(ENCODING)
    return EncodedQueries(vectors, made_by if isinstance(made_by, str) else None,
                          _encoding(encoding))


def _keep_once(vectors: dict[str, Any], text: str, vector: Any, file: Path) -> None:
    """A query text's vector; the same text twice must hold the same vector (a search looks
    vectors up by text: with two, one would win in silence)."""
    if text in vectors:
        same = vectors[text] == vector if isinstance(vector, dict) else (
            vectors[text].shape == vector.shape and np.array_equal(vectors[text], vector))
        if not same:
            raise UserError(f"{file}: the query {text[:60]!r} is there twice with two different "
                            "vectors; a search looks them up by text: encode the topics again "
                            "(python -m pyserini_moe.encode_queries)")
    vectors[text] = vector


def _encoding(value: Any) -> dict[str, int] | None:
    """A recorded encoding, or None where it is missing or not one (nothing to check then)."""
    if isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
        return value
    return None


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _dense_vector(embedding: Any) -> tuple[str | None, np.ndarray]:
    """``(problem, float32 vector)``: the problem (None when fine) says what the row holds
    instead of a vector of numbers. Values are checked in float64 before the cast, since numpy
    would turn a value beyond float32 into infinity with a warning and no word of the file."""
    try:
        values = np.asarray(embedding)
    except (ValueError, TypeError):  # ragged nested lists
        return f"has no vector of numbers (got {_describe(embedding)})", _EMPTY
    if values.dtype.kind not in "iuf":  # strings, objects, booleans, None
        return f"has no vector of numbers (got {_describe(embedding)})", _EMPTY
    values = values.astype(np.float64)
    if values.ndim != 1 or values.size == 0:
        return f"has no one-dimensional vector (got shape {list(values.shape)})", _EMPTY
    if not np.isfinite(values).all():
        return "has a vector with NaN or infinite values", _EMPTY
    if np.abs(values).max() > _FLOAT32_MAX:
        return (f"has values that overflow float32 (e.g. {np.abs(values).max():.3g}; at most "
                f"{_FLOAT32_MAX:.3g}): query vectors are float32"), _EMPTY
    return None, values.astype(np.float32)


_EMPTY = np.zeros(0, dtype=np.float32)


def _describe(value: Any, limit: int = 40) -> str:
    """``str '1,2,3'``: a value's type and a short repr, for an error line."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= limit else text[:limit - 3] + '...'}"


def _read_impact(file: Path) -> EncodedQueries:
    """Every line checked as it is read: a record of ``contents`` and a ``vector`` of integer
    weights, each one line naming the file and line (and the query) when it is not; lines are
    read by :func:`~pyserini_moe.io.iter_lines` (gunzipped for a ``.gz`` name, a line that is
    not UTF-8 one error line, never a traceback). The fingerprint is the one the records name;
    a file whose records name two encoders (two files put together) is refused."""
    vectors, made_by, encodings = {}, set(), set()
    for number, line in iter_lines(file):
        where = f"{file}, line {number}"
        text, vector, fingerprint_, encoding = _impact_record(line, where)
        _keep_once(vectors, text.strip(), _impact_weights(vector, f"{where} (query {text[:60]!r})"),
                   file)
        made_by.add(fingerprint_)
        encodings.add(json.dumps(encoding, sort_keys=True))
    made_by.discard(None)
    if len(made_by) > 1:
        raise UserError(f"{file} holds queries encoded by {len(made_by)} different encoders "
                        f"(fingerprints {', '.join(sorted(made_by))}): encode the topics again "
                        "with the index's encoder (python -m pyserini_moe.encode_queries)")
    if len(encodings) > 1:  # files put together: their scales may differ
        raise UserError(f"{file} holds queries encoded {len(encodings)} different ways (query "
                        "length, terms or quantisation): encode the topics again in one call "
                        "(python -m pyserini_moe.encode_queries)")
    return EncodedQueries(vectors, next(iter(made_by), None), _encoding(json.loads(encodings.pop())))


def _impact_record(line: str, where: str) -> tuple[str, dict[str, Any], str | None, Any]:
    """The line's ``(contents, vector, encoder fingerprint or None, encoding or None)``, or one error
    line naming ``where``."""
    try:
        record = json.loads(line)
        text, vector = record["contents"], record["vector"]
    except (ValueError, KeyError, TypeError):
        text, vector, record = None, None, {}
    if not isinstance(text, str) or not isinstance(vector, dict):
        raise UserError(f"{where}: expected {{\"contents\": text, \"vector\": {{token: "
                        "weight}}")
    made_by = record.get(FINGERPRINT)
    return text, vector, made_by if isinstance(made_by, str) else None, record.get(ENCODING)


def _impact_weights(vector: dict[str, Any], where: str) -> dict[str, int]:
    """The weights as ints. Lucene takes each as a Java int: Pyserini's ``JInt(weight)``
    truncates a float (0.35 becomes 0, every score 0, exit 0) and fails on NaN or a huge value,
    so anything but a non-negative whole number within Java's int range (35 or 35.0) is
    refused here: the weights must be quantised already, as ``encode_queries`` writes them."""
    weights = {}
    for token, weight in vector.items():
        whole = _whole_number(weight)
        if whole is None or not 0 <= whole <= JAVA_INT_MAX:
            raise UserError(
                f"{where}: the weight of {str(token)[:40]!r} is {_describe(weight)}: impact "
                f"weights must be integers from 0 to {JAVA_INT_MAX}, already quantised as the "
                "index's were (as `python -m pyserini_moe.encode_queries` writes them)")
        weights[token] = whole
    return weights


def _whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (35, or 35.0 as some writers put it),
    else None (a bool, a string, NaN, infinity, 0.35)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None
