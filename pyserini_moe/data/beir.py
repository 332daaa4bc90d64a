"""BEIR-layout collections (corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv), validated.

Every reader fails with a :class:`DataFormatError` naming the file and line of the first problem, so
a broken collection is caught when it is loaded, not as a silently wrong score after indexing.
"""

from __future__ import annotations

import logging
import os
import unicodedata
import urllib.error
import urllib.request
import zipfile
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.io import atomic_path, iter_lines, json_record
from pyserini_moe.paths import shared_data_root

BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
#: BEIR data sets that the UKP server hands out freely.
BEIR_DATASETS = (
    "msmarco", "trec-covid", "nfcorpus", "nq", "hotpotqa", "fiqa", "arguana", "webis-touche2020",
    "cqadupstack", "quora", "dbpedia-entity", "scidocs", "fever", "climate-fever", "scifact",
)
#: BEIR data sets that must be obtained under their own licence and built locally.
BEIR_RESTRICTED = ("bioasq", "signal1m", "trec-news", "robust04")
#: Classic collections kept in the shared data folder in BEIR layout.
CLASSIC_COLLECTIONS = ("cranfield", "cisi", "vaswani")
#: Every collection name the toolkit knows, so a misspelt one can be told from a missing one.
KNOWN_COLLECTIONS = (*BEIR_DATASETS, *BEIR_RESTRICTED, *CLASSIC_COLLECTIONS)
QRELS_HEADER = ("query-id", "corpus-id", "score")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    """One corpus entry."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text joined by a space, as in Pyserini's BEIR "flat" indexes."""
        return f"{self.title} {self.text}".strip()


def cache_root() -> Path:
    """``$PYSERINI_MOE_CACHE``, else ``~/.cache/pyserini_moe``: downloads and derived files."""
    env = os.environ.get("PYSERINI_MOE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pyserini_moe"


# --------------------------------------------------------------------------- line-level readers


def first_line(path: Path) -> str | None:
    """The first non-blank line of ``path`` (None if there is none), used to sniff a format."""
    lines = iter_lines(path)
    try:
        first = next(lines, None)
    finally:
        lines.close()
    return None if first is None else first[1]


def check_id(path: Path, lineno: int, raw: object, kind: str) -> str:
    """A query/document id as ``str``; run and qrels files are whitespace-separated, so no blanks."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise DataFormatError(path, f"{kind} id must be a string or an integer, found {raw!r}", lineno)
    value = str(raw)
    if not value or any(c.isspace() for c in value):
        raise DataFormatError(path, f"invalid {kind} id {value!r}: ids must be non-empty and "
                                    "contain no whitespace", lineno)
    if any(unicodedata.category(c) == "Cc" for c in value):  # NUL, escapes: trec_eval breaks
        raise DataFormatError(path, f"invalid {kind} id {value!r}: ids must contain no control "
                                    "characters (a NUL byte ends the id in trec_eval and Lucene)",
                              lineno)
    return value


def _json_object(path: Path, lineno: int, line: str) -> dict[str, Any]:
    obj = json_record(path, lineno, line)
    if not isinstance(obj, dict):
        raise DataFormatError(path, f"expected a JSON object, found {type(obj).__name__}", lineno)
    return obj


def _record_id(path: Path, lineno: int, obj: dict[str, Any], kind: str) -> str:
    if "_id" not in obj:
        raise DataFormatError(path, f'{kind} has no "_id"', lineno)
    return check_id(path, lineno, obj["_id"], kind)


def _string_field(path: Path, lineno: int, obj: dict[str, Any], key: str, *, required: bool) -> str:
    if key not in obj:
        if required:
            raise DataFormatError(path, f'missing "{key}"', lineno)
        return ""
    value = obj[key]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataFormatError(path, f'"{key}" must be a string, found {type(value).__name__}', lineno)
    return value


def read_queries(path: Path) -> dict[str, str]:
    """BEIR queries JSONL (``{"_id", "text"}``) as ``{qid: text}``; ids are always ``str``."""
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    for lineno, line in iter_lines(path):
        obj = _json_object(path, lineno, line)
        qid = _record_id(path, lineno, obj, "query")
        if qid in lines:
            raise DataFormatError(path, f"duplicate query id {qid!r} (first seen at line {lines[qid]})",
                                  lineno)
        text = _string_field(path, lineno, obj, "text", required=True)
        if not text.strip():
            raise DataFormatError(path, f"empty text for query {qid!r}", lineno)
        queries[qid] = text
        lines[qid] = lineno
    if not queries:
        raise DataFormatError(path, "no queries")
    return queries


MAX_GRADE = 2**31 - 1


def add_judgment(qrels: dict[str, dict[str, int]], path: Path, lineno: int,
                 qid: str, docid: str, score: str) -> None:
    """Validate one qrels row and store it; shared by the BEIR-TSV and TREC qrels readers."""
    qid = check_id(path, lineno, qid, "query")
    docid = check_id(path, lineno, docid, "document")
    try:
        grade = int(score)
    except ValueError:
        raise DataFormatError(path, f"score must be an integer, found {score!r}", lineno) from None
    if abs(grade) > MAX_GRADE:  # trec_eval reads grades as C ints: it fails on the file
        raise DataFormatError(path, f"score {grade} is past what trec_eval reads (a 32-bit "
                                    "integer); relevance grades are small integers", lineno)
    judged = qrels.setdefault(qid, {})
    if judged.get(docid, grade) != grade:
        raise DataFormatError(path, f"conflicting scores for query {qid!r}, document {docid!r}: "
                                    f"{judged[docid]} and {grade}", lineno)
    judged[docid] = grade


def read_beir_qrels(path: Path, query_ids: Collection[str] | None = None,
                    doc_ids: Collection[str] | None = None) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (header ``query-id<TAB>corpus-id<TAB>score``) as ``{qid: {docid: score}}``.

    With ``query_ids`` every row must name a known query: a typo'd query id would otherwise be a
    judged query no run can answer. With ``doc_ids``, judged documents the corpus lacks are kept
    and said once (:func:`warn_unknown_documents`): released collections have them (BEIR's
    ArguAna judges 5 documents its corpus lacks), and trec_eval and BEIR count them in every
    recall denominator, so dropping them would move the published numbers.
    Queries keep their order of first appearance.
    """
    lines = iter_lines(path)
    first = next(lines, None)
    if first is None:
        raise DataFormatError(path, "empty qrels file (expected the header "
                                    "'query-id<TAB>corpus-id<TAB>score')")
    lineno, header = first
    if tuple(c.strip() for c in header.split("\t")) != QRELS_HEADER:
        raise DataFormatError(path, f"bad header {header!r}: expected "
                                    "'query-id<TAB>corpus-id<TAB>score'", lineno)
    qrels: dict[str, dict[str, int]] = {}
    unknown: dict[str, int] = {}  # judged documents the corpus lacks -> first line
    for lineno, line in lines:
        cols = [c.strip() for c in line.split("\t")]
        if len(cols) != 3:
            raise DataFormatError(path, f"expected 3 tab-separated columns (query-id, corpus-id, "
                                        f"score), found {len(cols)}", lineno)
        qid, docid, score = cols
        if query_ids is not None and qid not in query_ids:
            raise DataFormatError(path, f"unknown query id {qid!r} (not in the collection's queries)",
                                  lineno)
        if doc_ids is not None and docid not in doc_ids:
            unknown.setdefault(docid, lineno)
        add_judgment(qrels, path, lineno, qid, docid, score)
    if not qrels:
        raise DataFormatError(path, "no judgments")
    if unknown:
        warn_unknown_documents(path, unknown)
    return qrels


_WARNED: set[Path] = set()  # qrels files whose unknown documents were already said


def warn_unknown_documents(path: Path, unknown: dict[str, int]) -> None:
    """Say, once per qrels file and process, that it judges documents the corpus lacks.

    Not an error: no run can retrieve them, yet they count, as in trec_eval and BEIR (a relevant
    document missing from the corpus lowers recall, exactly as in the published numbers). Said
    rather than silent because a typo'd docid has the same effect.
    """
    if path.resolve() in _WARNED:
        return
    _WARNED.add(path.resolve())
    docid, lineno = next(iter(unknown.items()))
    log.warning("%s: %d judged document%s not in the corpus (e.g. %r, line %d); the judgments "
                "are kept and count in every metric (trec_eval, BEIR), though no run can "
                "retrieve them", path, len(unknown), " is" if len(unknown) == 1 else "s are",
                docid, lineno)


# --------------------------------------------------------------------------- locating collections


def is_collection(folder: Path) -> bool:
    """Whether ``folder`` holds a collection in the BEIR layout (its corpus file)."""
    return folder.is_dir() and any((folder / f).is_file()
                                   for f in ("corpus.jsonl.gz", "corpus.jsonl"))


def local_collections() -> list[str]:
    """Names of the collections under :func:`shared_data_root` (empty if there is none)."""
    root = shared_data_root()
    if root is None:
        return []
    return sorted(p.name for p in root.iterdir() if is_collection(p))


def resolve_collection(spec: str | os.PathLike) -> Path:
    """Directory of a collection: a path, a local collection name, or a public BEIR name (downloaded).

    ``cqadupstack/<forum>`` names one CQADupStack sub-forum.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    name = str(spec)
    root = shared_data_root()
    if root is not None and (root / name).is_dir():
        return root / name
    base = name.split("/", 1)[0]
    if base in BEIR_DATASETS:
        try:
            return download_beir(name)
        except ConnectionError as e:  # say where a local copy was looked for first
            where = (f"not in the local data folder {root}" if root is not None
                     else f"no local data folder found{_env_hint()}")
            raise ConnectionError(f"collection {name!r}: {where}, and {e}") from e
    if base in BEIR_RESTRICTED:
        raise FileNotFoundError(f"BEIR data set {base!r} is not publicly downloadable; build it in "
                                "the BEIR layout yourself and pass its directory")
    available = ", ".join(local_collections()) or f"none (no shared data folder found{_env_hint()})"
    raise FileNotFoundError(
        f"unknown collection {name!r}: it is not a directory, not a local collection "
        f"(available: {available}) and not a public BEIR data set ({', '.join(BEIR_DATASETS)})")


def _env_hint() -> str:
    env = os.environ.get("PYSERINI_MOE_DATA")
    if not env:
        return "; set PYSERINI_MOE_DATA"
    return f"; PYSERINI_MOE_DATA={env} is not a directory" if not Path(env).is_dir() else ""


def download_beir(name: str) -> Path:
    """Folder of public BEIR data set ``name``, downloaded and unzipped into the cache on first use."""
    base, _, sub = name.partition("/")
    datasets = cache_root() / "datasets"
    folder = datasets / base
    if not folder.is_dir():
        archive = datasets / f"{base}.zip"
        if not archive.is_file():
            _download(BEIR_URL.format(name=base), archive)
        _unzip(archive, folder, base)
        archive.unlink()
    target = folder / sub if sub else folder
    if not target.is_dir():
        raise FileNotFoundError(f"{target}: BEIR data set {base!r} has no sub-collection {sub!r}")
    return target


def _download(url: str, target: Path) -> None:
    """Stream ``url`` to ``target`` with a progress bar; nothing appears at ``target`` on failure."""

    try:
        with urllib.request.urlopen(url, timeout=60) as response, atomic_path(target) as tmp:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tmp.open("wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                             unit_divisor=1024, desc=target.name) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
            if total is not None and bar.n != total:
                raise OSError(f"received {bar.n} of {total} bytes")
    except (urllib.error.URLError, OSError) as e:
        raise ConnectionError(
            f"could not download the data set from {url} ({e}); download and unzip it yourself, "
            "or pass a local directory holding corpus.jsonl, queries.jsonl and qrels/") from e


def _unzip(archive: Path, folder: Path, base: str) -> None:
    """Unpack a BEIR zip (one top-level ``<base>/`` folder) so that ``folder`` holds its contents."""
    try:
        with zipfile.ZipFile(archive) as zf, atomic_path(folder, directory=True) as tmp:
            zf.extractall(tmp)
            inner = tmp / base
            if inner.is_dir():
                inner = inner.rename(tmp / ".unpack")
                for child in inner.iterdir():
                    child.rename(tmp / child.name)
                inner.rmdir()
    except zipfile.BadZipFile as e:
        archive.unlink(missing_ok=True)
        raise DataFormatError(archive, f"not a valid zip archive ({e}); it was deleted, "
                                       "so the next attempt downloads it again") from e


# --------------------------------------------------------------------------- the collection


class BeirCollection:
    """A BEIR-layout collection on disk; readers validate and the expensive results are cached."""

    def __init__(self, root: str | os.PathLike, name: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"collection directory not found: {self.root}")
        self.name = name or self.root.name
        self._doc_ids: frozenset[str] | None = None
        self._queries: dict[str, str] | None = None
        self._qrels: dict[str, dict[str, dict[str, int]]] = {}

    @classmethod
    def load(cls, spec: str | os.PathLike) -> BeirCollection:
        """Open a collection by directory, local name or BEIR name (see :func:`resolve_collection`)."""
        root = resolve_collection(spec)
        is_dir = Path(spec).expanduser().is_dir()
        return cls(root, root.name if is_dir else str(spec).replace("/", "-"))

    def __repr__(self) -> str:
        return f"BeirCollection({str(self.root)!r}, {self.name!r})"

    def _file(self, stem: str) -> Path:
        """``<stem>.jsonl`` or ``<stem>.jsonl.gz``; both at once are refused: which one holds the
        collection cannot be told (a partial gzip copy beside the full file was taken in
        silence, 25 of 30 documents left out)."""
        return _one_of(self.root / f"{stem}.jsonl", f"collection {self.name!r}")

    @property
    def corpus_path(self) -> Path:
        return self._file("corpus")

    @property
    def queries_path(self) -> Path:
        return self._file("queries")

    def corpus(self) -> Iterator[Document]:
        """Stream the documents in file order (a missing corpus file fails here, not at iteration)."""
        return self._iter_corpus(self.corpus_path)

    def _iter_corpus(self, path: Path) -> Iterator[Document]:
        seen: dict[str, int] = {}
        for lineno, line in iter_lines(path):
            obj = _json_object(path, lineno, line)
            doc_id = _record_id(path, lineno, obj, "document")
            if doc_id in seen:
                raise DataFormatError(path, f"duplicate document id {doc_id!r} "
                                            f"(first seen at line {seen[doc_id]})", lineno)
            seen[doc_id] = lineno
            yield Document(doc_id, _string_field(path, lineno, obj, "title", required=False),
                           _string_field(path, lineno, obj, "text", required=True))
        if not seen:
            raise DataFormatError(path, "no documents")
        self._doc_ids = frozenset(seen)

    def doc_ids(self) -> frozenset[str]:
        """All document ids (one corpus scan, then cached)."""
        if self._doc_ids is None:
            deque(self.corpus(), maxlen=0)
        assert self._doc_ids is not None
        return self._doc_ids

    def num_docs(self) -> int:
        return len(self.doc_ids())

    def _query_map(self) -> dict[str, str]:
        if self._queries is None:
            self._queries = read_queries(self.queries_path)
        return self._queries

    def queries(self) -> dict[str, str]:
        """Every query, judged or not, as ``{qid: text}``."""
        return dict(self._query_map())

    def splits(self) -> list[str]:
        """Split names, from ``qrels/<split>.tsv`` or ``qrels/<split>.tsv.gz`` (read like the
        corpus and queries, gzipped or not)."""
        qrels_dir = self.root / "qrels"
        if not qrels_dir.is_dir():
            raise FileNotFoundError(f"{qrels_dir}: no qrels directory in collection {self.name!r}")
        return sorted({p.name.removesuffix(".gz")[: -len(".tsv")]
                       for pattern in ("*.tsv", "*.tsv.gz") for p in qrels_dir.glob(pattern)
                       if p.is_file()})

    def qrels_path(self, split: str) -> Path:
        """The file of one split's qrels, ``.tsv`` or ``.tsv.gz`` (both at once are refused)."""
        return _one_of(self.root / "qrels" / f"{split}.tsv", f"collection {self.name!r}")

    def _qrels_map(self, split: str) -> dict[str, dict[str, int]]:
        if split not in self._qrels:
            available = self.splits()
            if split not in available:
                raise UserError(f"unknown split {split!r} for collection {self.name!r} ({self.root}); "
                                f"available splits: {', '.join(available) or 'none'}")
            self._qrels[split] = read_beir_qrels(self.qrels_path(split), self._query_map(),
                                                 self.doc_ids())
        return self._qrels[split]

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        """``{qid: {docid: score}}`` of one split, checked against the queries (judged documents the
        corpus lacks are kept, with a warning: see :func:`read_beir_qrels`)."""
        return {qid: dict(judged) for qid, judged in self._qrels_map(split).items()}

    def topics(self, split: str) -> dict[str, str]:
        """The queries judged in ``split`` (BEIR's test topics), in qrels order of first appearance."""
        queries = self._query_map()
        return {qid: queries[qid] for qid in self._qrels_map(split)}


def _one_of(plain: Path, where: str) -> Path:
    """``plain`` or ``plain.gz``, whichever exists; both at once are refused in one line."""
    packed = plain.with_name(plain.name + ".gz")
    found = [f for f in (plain, packed) if f.is_file()]
    if len(found) == 2:
        raise UserError(f"{plain.parent} holds both {plain.name} and {packed.name}: "
                        "which one is the collection's cannot be told; keep one of them")
    if not found:
        raise FileNotFoundError(f"{plain}(.gz): no such file in {where}")
    return found[0]

