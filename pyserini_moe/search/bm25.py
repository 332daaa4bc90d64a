"""BM25 through Pyserini's ``LuceneSearcher``."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pyserini_moe import _java
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import IndexMeta, IndexMismatchError, check_kind
from pyserini_moe.runs import Run
from pyserini_moe.search.base import batched_search, open_lucene

if TYPE_CHECKING:
    from pyserini.search.lucene import LuceneSearcher


class Bm25Searcher:
    """Batched BM25 over a Lucene index (ours, any Pyserini index folder, or a prebuilt name).

    ``fields`` (Pyserini's ``--fields contents=1.0 title=1.0``) searches several fields of a
    multifield index, each term's BM25 summed over the fields with those weights; without it the
    ``contents`` field alone is searched.

    Long queries: Anserini's bag-of-words query has one clause per distinct analysed term and
    field, and Lucene refuses more than 1024 clauses (Anserini 1.7.1 keeps that limit). ArguAna's
    longest query (868 words) has 383 distinct terms, 766 clauses over two fields, and searches
    as it is; a query past the limit is named in one error line (Pyserini's own search fails on
    it with a Java stack trace).
    """

    def __init__(self, index: str | os.PathLike, k1: float = 0.9, b: float = 0.4,
                 fields: dict[str, float] | None = None, rm3: bool = False,
                 rocchio: bool = False, qld: bool = False) -> None:
        _java.bootstrap()
        from pyserini.search.lucene import LuceneSearcher

        if Path(index).is_dir():
            meta = check_kind(index, "bm25")
            _check_fields(index, meta, fields)
            self.searcher = open_lucene(LuceneSearcher, Path(index))
        else:
            self.searcher = _open_prebuilt(str(index))
        if qld:  # Pyserini's --qld: query likelihood, Dirichlet mu 1000
            self.searcher.set_qld()
        else:
            self.searcher.set_bm25(k1, b)
        if rm3:  # Pyserini's --rm3 / --rocchio, at their defaults (they read doc vectors)
            self.searcher.set_rm3()
        if rocchio:
            self.searcher.set_rocchio()
        self.fields = dict(fields or {})

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True) -> Run:
        """Search every topic; returns ``{qid: {docid: score}}`` in input order."""
        return batched_search(
            topics, lambda texts, qids: self._batch(texts, qids, hits, threads),
            batch_size, "bm25", progress)

    def _batch(self, texts: list[str], qids: list[str], hits: int, threads: int) -> dict:
        """Lucene's batch search; Anserini's batch search reports a failed query only as
        "queryCount = N is not equal to completedTaskCount = M", so a failed batch is searched
        again one query at a time to name the query and Lucene's reason."""
        from jnius import JavaException  # after pyserini: the JVM is running

        try:
            return self.searcher.batch_search(texts, qids, k=hits, threads=threads,
                                              fields=self.fields)
        except JavaException as e:
            if "completedTaskCount" not in str(e):
                raise
        return {qid: self._one(text, qid, hits) for text, qid in zip(texts, qids)}

    def _one(self, text: str, qid: str, hits: int) -> list:
        """One query's hits, or a user error naming it (too many clauses: a long query)."""
        from jnius import JavaException

        try:
            return self.searcher.search(text, k=hits, fields=self.fields)
        except JavaException as e:
            reason = (e.classname or "Java error").rsplit(".", 1)[-1].split("$")[-1]
            raise UserError(f"Lucene refused BM25 query {qid!r} ({reason}: {e.innermessage}): a "
                            "query has one clause per distinct term and field searched; shorten "
                            "it or search fewer --fields") from None


def _open_prebuilt(name: str) -> LuceneSearcher:
    """Pyserini's prebuilt index ``name``, downloaded on first use. A path (a mistyped folder)
    or a name Pyserini does not know is a missing folder, never looked up (Pyserini would print
    "Unrecognized index name" on stdout); a known name that cannot be fetched (offline) says
    so, with the reason Pyserini prints rather than raises."""
    from pyserini.search.lucene import LuceneSearcher

    if Path(name).exists():
        raise NotADirectoryError(f"{name} is a file, not an index folder")
    if os.sep in name or name.startswith("."):
        raise FileNotFoundError(f"index folder not found: {name}")
    if not _is_prebuilt(name):
        raise FileNotFoundError(f"index folder not found: {name} (nor is it a Pyserini "
                                "prebuilt index name)")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            searcher = LuceneSearcher.from_prebuilt_index(name)
    except Exception as e:  # noqa: BLE001 - a network error, a damaged archive, not Lucene
        raise _unavailable(name, "downloaded or opened", str(e)) from None
    if searcher is None:  # Pyserini printed why (offline: no URL answered) and returned None
        raise _unavailable(name, "downloaded", printed.getvalue())
    return searcher


def _unavailable(name: str, what: str, said: str) -> UserError:
    """One line: the prebuilt index could not be ``what``, for the last thing Pyserini said."""
    reason = (said.strip().splitlines() or ["no reason given"])[-1]
    return UserError(f"{name} is a Pyserini prebuilt index that could not be {what} ({reason}); "
                     "offline, download it where there is a network and give its folder, or "
                     "build one with `python -m pyserini_moe.index`")


def _is_prebuilt(name: str) -> bool:
    """Whether Pyserini knows ``name`` as a prebuilt index (the tables its download reads)."""
    from pyserini import prebuilt_index_info as info

    return any(name in table for table in (
        info.TF_INDEX_INFO, info.IMPACT_INDEX_INFO, info.LUCENE_HNSW_INDEX_INFO,
        info.LUCENE_FLAT_INDEX_INFO, info.FAISS_INDEX_INFO))


def _check_fields(index: str | os.PathLike, meta: IndexMeta | None,
                  fields: dict[str, float] | None) -> None:
    """A field the index does not have would score nothing, silently: refused for our indexes
    (which record their fields; Pyserini's own indexes are searched as asked)."""
    if not fields or meta is None:
        return
    have = meta.fields or ["contents"]  # flat indexes built before layouts were recorded
    missing = [f for f in fields if f not in have]
    if missing:
        raise IndexMismatchError(
            f"{index} has no {', '.join(missing)} field (its fields: {', '.join(have)}); build "
            "one with `python -m pyserini_moe.index --retriever bm25 --layout multifield` for "
            "--fields contents=1.0 title=1.0")
