"""The one place that turns a user's ``--topics`` / ``--qrels`` argument into data.

A spec is, in this order: an existing file; ``COLLECTION:SPLIT`` (a local collection name, a
directory or a public BEIR name, e.g. ``scifact:test``); or a Pyserini topics/qrels name (e.g.
``beir-v1.0.0-scifact-test``, ``dl19-passage``). Ids are always ``str``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from pathlib import Path

from pyserini_moe.data.beir import (
    QRELS_HEADER,
    BeirCollection,
    add_judgment,
    cache_root,
    check_id,
    first_line,
    local_collections,
    read_beir_qrels,
    read_queries,
)
from pyserini_moe.data.export import write_trec_qrels
from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.io import is_stream, iter_lines, read_once
from pyserini_moe.paths import shared_data_root

log = logging.getLogger(__name__)

TOPICS_FORMS = (
    "accepted forms: COLLECTION:SPLIT (a local collection name or directory, or a public BEIR name; "
    "e.g. scifact:test), a topics file (TSV 'qid<TAB>text', optionally .gz, or JSONL with "
    '{"_id", "text"}), or a Pyserini topics name (e.g. beir-v1.0.0-scifact-test, dl19-passage, '
    "msmarco-passage-dev-subset)")
QRELS_FORMS = (
    "accepted forms: COLLECTION:SPLIT (e.g. scifact:test), a qrels file (TREC 'qid iter docid rel' "
    "or BEIR TSV with a 'query-id<TAB>corpus-id<TAB>score' header), or a Pyserini qrels name "
    "(e.g. beir-v1.0.0-scifact-test, dl19-passage, msmarco-passage-dev-subset)")
_FILE_SUFFIXES = (".tsv", ".txt", ".jsonl", ".json", ".gz", ".qrels")


# Pyserini's names of BEIR topics and qrels: beir-v1.0.0-<collection>-<split>, a CQADupStack
# forum as cqadupstack-<forum>.
_PYSERINI_BEIR = re.compile(r"^beir-v1\.0\.0-(?P<name>.+)-(?P<split>test|dev|train)$")


def _as_local_beir(spec: str) -> str:
    """A Pyserini BEIR name (``beir-v1.0.0-arguana-test``) as ``arguana:test`` where that
    collection is a local one (under ``../shared/data`` or ``$PYSERINI_MOE_DATA``): the same
    topics and qrels, offline, so Pyserini's 2CR commands work here as written; any other
    spec unchanged."""
    match = _PYSERINI_BEIR.match(spec)
    if match is None:
        return spec
    name = match["name"].replace("cqadupstack-", "cqadupstack/", 1)
    return f"{name}:{match['split']}" if name in local_collections() else spec


def _collection_split(spec: str) -> tuple[str, str] | None:
    """``(collection, split)`` for ``COLLECTION:SPLIT``, else None. A value that reads as a
    file's path (``topics:v2.tsv``, ``q.tsv:v2``, ``/data/topics:v2``) is one only if its
    collection part is a folder: a missing file with a colon in its name is reported as a missing
    file, not as an unknown collection."""
    collection, sep, split = spec.rpartition(":")
    if not (sep and collection and split) or os.sep in split:
        return None
    if _names_a_file(collection, split) and not Path(collection).expanduser().is_dir():
        return None
    return collection, split


def _names_a_file(collection: str, split: str) -> bool:
    """A file's suffix on either side of the colon, or an explicit path before it: collection
    names (local or BEIR, ``cqadupstack/android``) are bare and splits have no suffix."""
    return (split.endswith(_FILE_SUFFIXES) or collection.endswith(_FILE_SUFFIXES)
            or collection.startswith((os.sep, "~", ".")))


def _looks_like_path(spec: str) -> bool:
    """A missing file should say so rather than be looked up as a Pyserini name."""
    return (os.sep in spec or spec.startswith(("~", ".")) or spec.endswith(_FILE_SUFFIXES)
            or spec.rpartition(":")[0].endswith(_FILE_SUFFIXES))


def _not_found(what: str, spec: str) -> Exception:
    """``what`` file not found; with a colon in it, the ``COLLECTION:SPLIT`` reading is ruled
    out too (``/data/corpus:test`` whose collection folder is missing). A collection's folder
    given without its split is named as such, with the split to add."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return _a_folder(what, spec, folder)
    collection, _, split = spec.rpartition(":")
    also = f" (nor is {collection} a collection folder)" \
        if collection and split and os.sep not in split else ""
    return FileNotFoundError(f"{what} file not found: {spec}{also}")


def _a_folder(what: str, spec: str, folder: Path) -> UserError:
    """A folder given for a topics or qrels file: a collection's (or its ``qrels/``) is named
    with the ``COLLECTION:SPLIT`` to give instead, any other as a folder."""
    collection = folder.parent if folder.name == "qrels" else folder
    splits = sorted(p.stem for p in (collection / "qrels").glob("*.tsv"))
    if not splits:
        return UserError(f"{what} {spec} is a folder, not a {what} file: give the file, or a "
                         "collection's COLLECTION:SPLIT")
    shown = str(collection) if collection != folder else spec.rstrip(os.sep)
    return UserError(f"{what} {spec} is a folder, not a {what} file: for a collection's {what} "
                     f"give COLLECTION:SPLIT, e.g. {shown}:{splits[0]} (its splits: "
                     f"{', '.join(splits)})")


def _first_error_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# --------------------------------------------------------------------------- topics


def read_topics_file(path: Path) -> dict[str, str]:
    """Topics from a TSV (``qid<TAB>text``, gz allowed) or BEIR-style JSONL file, in file order."""
    head = first_line(path)
    if head is None:
        raise DataFormatError(path, "no topics (the file is empty)")
    if head.lstrip().startswith("{"):
        return read_queries(path)
    if head.lstrip().lower().startswith("<top"):  # <top> (SGML), <topics>/<topic> (XML)
        raise DataFormatError(path, "TREC topics in SGML or XML (<top>, <topic>) are not "
                                    "read; write them as qid<TAB>text lines (.tsv) or JSONL "
                                    '{"_id", "text"}, or give the Pyserini topics name')
    topics: dict[str, str] = {}
    lines: dict[str, int] = {}
    for lineno, line in iter_lines(path):
        cols = line.split("\t")
        if not lines and _is_header(cols):
            names = ", ".join(c.strip() for c in cols)
            print(f"note: {path}:{lineno}: the line '{names}' names the columns: skipped as a "
                  "header, not searched as a query", file=sys.stderr)
            continue
        if len(cols) != 2:
            raise DataFormatError(path, f"expected 2 tab-separated columns (qid, text), "
                                        f"found {len(cols)}", lineno)
        qid = check_id(path, lineno, cols[0].strip(), "query")
        text = cols[1].strip()
        if qid in lines:
            raise DataFormatError(path, f"duplicate query id {qid!r} (first seen at line {lines[qid]})",
                                  lineno)
        if not text:
            raise DataFormatError(path, f"empty text for query {qid!r}", lineno)
        topics[qid] = text
        lines[qid] = lineno
    if not topics:
        raise DataFormatError(path, "no topics (a header line alone)")
    return topics


# A topics TSV's header line, as pandas or a spreadsheet writes one: the first column named
# as an id, the second as a text. Only both together (case-insensitive) make a header, so a
# real query is never dropped: one whose id is ``qid`` and text ``text`` is no query anyone has.
_HEADER_IDS = frozenset({"qid", "query_id", "query-id", "queryid", "id", "_id", "topic_id",
                         "topic-id", "topicid"})
_HEADER_TEXTS = frozenset({"text", "query", "query_text", "query-text", "question", "title",
                           "topic"})


def _is_header(cols: list[str]) -> bool:
    """Whether a first line of two columns names them instead of holding a query."""
    return (len(cols) == 2 and cols[0].strip().lower() in _HEADER_IDS
            and cols[1].strip().lower() in _HEADER_TEXTS)


def _pyserini_topics(name: str) -> dict[str, str]:
    from pyserini_moe._java import bootstrap  # noqa: PLC0415 - starts a JVM; only when needed

    bootstrap()
    from pyserini.search import get_topics

    try:
        raw = get_topics(name)
    except ValueError as e:
        raise UserError(f"unknown topics {name!r}: not a file, not COLLECTION:SPLIT and not a "
                        f"Pyserini topics name; {TOPICS_FORMS}") from e
    except Exception as e:  # jnius.JavaException: Anserini could not download the topics
        raise UserError(f"Pyserini could not load topics {name!r} ({_first_error_line(e)}); "
                        "offline, pass a topics file or COLLECTION:SPLIT instead") from e
    topics: dict[str, str] = {}
    for qid, fields in raw.items():
        title = fields.get("title") or ""
        if not title.strip():
            raise UserError(f"Pyserini topics {name!r}: topic {qid} has no title "
                            f"(fields: {', '.join(fields) or 'none'})")
        topics[str(qid)] = title
    if not topics:
        raise UserError(f"Pyserini topics {name!r} are empty")
    return topics


def _say_if_also_a_split(text: str, path: Path) -> None:
    """A file whose name is also a local collection's split (``scifact:test`` in the current
    folder) is read as the file, and that choice is said."""
    pair = _collection_split(text)
    if pair is None or not path.is_file():
        return
    root = shared_data_root()
    folder = Path(pair[0]).expanduser()
    if folder.is_dir() or (root is not None and (root / pair[0]).is_dir()):
        log.warning("%s is a file here and also collection %s's %s split: reading the file "
                    "(give the collection's folder, or ./%s, to say which)", text, pair[0],
                    pair[1], text)


def load_topics(spec: str | os.PathLike) -> dict[str, str]:
    """``{qid: query text}`` for a topics spec (file, ``COLLECTION:SPLIT`` or Pyserini name)."""
    text = _as_local_beir(str(spec))
    path = Path(text).expanduser()
    _say_if_also_a_split(text, path)
    if path.is_file() or is_stream(path):
        with read_once(path) as readable:
            return read_topics_file(readable)
    pair = _collection_split(text)
    if pair is not None:
        return BeirCollection.load(pair[0]).topics(pair[1])
    if path.is_dir() or _looks_like_path(text):
        raise _not_found("topics", text)
    return _pyserini_topics(text)


# --------------------------------------------------------------------------- qrels


def read_trec_qrels(path: Path) -> dict[str, dict[str, int]]:
    """TREC qrels (``qid iter docid rel``) as ``{qid: {docid: rel}}``, queries in file order."""
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in iter_lines(path):
        cols = line.split()
        if len(cols) == 3 and lineno == 1:  # a BEIR TSV whose header line is missing
            raise DataFormatError(path, "3 columns: a BEIR qrels TSV starts with its header "
                                        f"line '{'<TAB>'.join(QRELS_HEADER)}'; TREC qrels have 4 "
                                        "(qid iter docid rel)", lineno)
        if len(cols) != 4:
            raise DataFormatError(path, f"expected 4 whitespace-separated columns "
                                        f"(qid iter docid rel), found {len(cols)}", lineno)
        add_judgment(qrels, path, lineno, cols[0], cols[2], cols[3])
    if not qrels:
        raise DataFormatError(path, "no judgments")
    return qrels


def _is_beir_tsv(path: Path) -> bool:
    head = first_line(path)
    return head is not None and tuple(c.strip() for c in head.split("\t")) == QRELS_HEADER


def read_qrels_file(path: Path) -> dict[str, dict[str, int]]:
    """A qrels file in either format: BEIR TSV (recognised by its header) or TREC."""
    return read_beir_qrels(path) if _is_beir_tsv(path) else read_trec_qrels(path)


def _pyserini_qrels_path(name: str) -> Path:
    from pyserini_moe._java import bootstrap  # noqa: PLC0415 - starts a JVM; only when needed

    bootstrap()
    from pyserini.search import get_qrels_file

    try:
        return Path(get_qrels_file(name))
    except FileNotFoundError as e:
        raise UserError(f"unknown qrels {name!r}: not a file, not COLLECTION:SPLIT and not a "
                        f"Pyserini qrels name; {QRELS_FORMS}") from e
    except Exception as e:  # jnius.JavaException: Anserini could not download the qrels
        raise UserError(f"Pyserini could not load qrels {name!r} ({_first_error_line(e)}); "
                        "offline, pass a qrels file or COLLECTION:SPLIT instead") from e


def load_qrels(spec: str | os.PathLike) -> dict[str, dict[str, int]]:
    """``{qid: {docid: grade}}`` for a qrels spec (file, ``COLLECTION:SPLIT`` or Pyserini name)."""
    text = _as_local_beir(str(spec))
    path = Path(text).expanduser()
    _say_if_also_a_split(text, path)
    if path.is_file() or is_stream(path):
        with read_once(path) as readable:
            return read_qrels_file(readable)
    pair = _collection_split(text)
    if pair is not None:
        return BeirCollection.load(pair[0]).qrels(pair[1])
    if _looks_like_path(text):
        raise _not_found("qrels", text)
    return read_trec_qrels(_pyserini_qrels_path(text))


def qrels_file(spec: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Path:
    """A TREC-format qrels file for ``spec``, for trec_eval.

    A TREC file or a Pyserini name gives the existing file; a BEIR TSV file or ``COLLECTION:SPLIT``
    is converted into ``workdir`` (default: ``<cache>/qrels``). The converted file is rewritten on
    every call, so it can never be stale; its name carries a hash of the source's location so two
    collections with the same name do not overwrite each other.
    """
    text = _as_local_beir(str(spec))
    path = Path(text).expanduser()
    pair = _collection_split(text)
    if path.is_file():
        if not _is_beir_tsv(path):
            read_trec_qrels(path)  # fail here, readably, rather than inside trec_eval
            return path
        qrels = read_beir_qrels(path)
        label, source = path.name.removesuffix(".tsv"), str(path.resolve())
    elif pair is not None:
        collection = BeirCollection.load(pair[0])
        qrels = collection.qrels(pair[1])
        label, source = f"{collection.name}.{pair[1]}", f"{collection.root.resolve()}:{pair[1]}"
    elif _looks_like_path(text):
        raise _not_found("qrels", text)
    else:
        return _pyserini_qrels_path(text)
    digest = hashlib.sha1(source.encode()).hexdigest()[:8]
    target_dir = Path(workdir) if workdir is not None else cache_root() / "qrels"
    return write_trec_qrels(qrels, target_dir / f"qrels.{label}.{digest}.txt")
