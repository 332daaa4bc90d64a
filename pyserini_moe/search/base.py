"""What every searcher is (the :class:`Searcher` protocol) and the batching loop they share:
topics in, ``{qid: {docid: score}}`` out."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from tqdm import tqdm

from pyserini_moe.index.meta import IndexMismatchError
from pyserini_moe.runs import JAVA_INT_MAX, Run, ranked

T = TypeVar("T")



class Hit(NamedTuple):
    """One retrieved document, as Pyserini's searchers give it (``hit.docid``, ``hit.score``)."""

    docid: str
    score: float


@runtime_checkable
class Searcher(Protocol):
    """One index searched for a set of topics: BM25 (:class:`~pyserini_moe.search.bm25.Bm25Searcher`)
    and the dense, impact and multi-vector searchers of :mod:`pyserini_moe.search.encoded`. A
    searcher may take more keywords (the multi-vector one's ``exhaustive``); fusing several
    indexes is :class:`~pyserini_moe.search.experts.ExpertFusionSearcher`, which returns the
    expert runs too."""

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True) -> Run: ...


# (texts, qids) -> {qid: hits}, each hit having .docid and .score (Pyserini's result objects)
BatchFn = Callable[[list[str], list[str]], dict[str, Iterable]]


def batched_search(topics: dict[str, str], batch_fn: BatchFn, batch_size: int, desc: str,
                   progress: bool = True) -> Run:
    """Run ``batch_fn`` over the topics in batches, keeping the topics' order."""
    qids = list(topics)
    run: Run = {}
    with tqdm(total=len(qids), desc=desc, unit="q", disable=not progress) as bar:
        for start in range(0, len(qids), batch_size):
            batch = qids[start:start + batch_size]
            results = batch_fn([topics[q] for q in batch], batch)
            for qid in batch:
                run[qid] = {str(h.docid): float(h.score) for h in results.get(qid, [])}
            bar.update(len(batch))
    return run


def open_lucene(make: Callable[[str], T], index: Path) -> T:
    """``make(path)``: a Pyserini searcher over the Lucene index folder ``index``, or one error
    line: not an index at all (a collection folder, an empty folder) or a damaged one (segments
    missing or truncated)."""
    from jnius import JavaException  # after pyserini: the JVM is running

    if not any(p.name.startswith("segments") for p in index.iterdir()):
        raise IndexMismatchError(f"{index} is not a Lucene index{_looks_like(index)}: no segments "
                                 "file")
    try:  # absolute: the JVM resolves a relative path against the folder it started in
        return make(str(index.absolute()))
    except JavaException as e:
        reason = (e.classname or "Java error").rsplit(".", 1)[-1]
        raise IndexMismatchError(f"{index}: Lucene cannot open the index ({reason}); it is "
                                 "damaged: build it again") from None


def _looks_like(folder: Path) -> str:
    """What a folder that is no Lucene index seems to be, as a hint: a collection, or a Faiss
    index without our metadata (Pyserini's encoder writes ``index`` + ``docid``), which
    ``search`` without ``--retriever`` takes for BM25."""
    if (folder / "corpus.jsonl").is_file() or (folder / "corpus.jsonl.gz").is_file():
        return " (it looks like a collection)"
    if (folder / "pyserini_moe.json").is_file() or (folder / "config.json").is_file():
        return (" (it looks like a model: build an index with it first, python -m "
                "pyserini_moe.index --encoder MODEL)")
    if (folder / "index").is_file() and (folder / "docid").is_file():
        return (" (it looks like a Faiss index: search it with --retriever dense --encoder "
                "MODEL)")
    return ""


def self_hits(run: Run) -> tuple[int, int]:
    """(queries with a hit whose docid is the query's own id, how many of those at rank 1): what
    ``--remove-query`` is about to drop. In ArguAna the query is that document and comes first;
    in Cranfield or CISI the ids only coincide (query 1, document 1) and the hits fall anywhere."""
    found = first = 0
    for qid, docs in run.items():
        if qid in docs:
            found += 1
            first += max(docs.values()) == docs[qid]
    return found, first


def remove_query_notice(found: int, first: int, queries: int) -> str:
    """One line saying what ``--remove-query`` drops (:func:`self_hits`' counts: ``found`` of
    ``queries`` retrieved their own id, ``first`` of them at rank 1)."""
    if not found:
        return "note: --remove-query dropped nothing: no query retrieved a document of its own id"
    line = (f"note: --remove-query dropped the document of the query's own id for {found} of "
            f"{queries} queries ({first} of them ranked first)")
    if first * 2 < found:
        line += ("; mostly not ranked first, so these look like other documents that share a "
                 "query's id (as in Cranfield or CISI), not the query itself: search without "
                 "--remove-query")
    return line


def no_hits_notice(empty: int, queries: int, example: tuple[str, str] | None) -> str | None:
    """A warning counting the queries that retrieved nothing (a BM25 query of stopwords only),
    which evaluation counts as 0, with one ``(qid, text)`` as the example; None when every
    query has hits."""
    if not empty or example is None:
        return None
    qid, text = example
    return (f"warning: {empty} of {queries} queries retrieved nothing (e.g. {qid}: "
            f"{text[:60]!r}); the run has no line for them and evaluation counts them as 0")


def depth_for_remove_query(hits: int) -> int:
    """How deep to search so that ``hits`` remain once the query's own id is dropped: one more,
    within what a Java int holds (Lucene's limit; a search that deep returns the collection)."""
    return min(hits + 1, JAVA_INT_MAX)


def max_passage(run: Run, delimiter: str = "#", hits: int = 100) -> Run:
    """Passage hits ranked as documents (Pyserini's ``--max-passage``): a passage id is
    ``<docid><delimiter><anything>``, each document takes its best passage's score and rank, and
    the best ``hits`` documents are kept. A corpus split into passages (MS MARCO documents, long
    BEIR texts) is so judged by document."""
    documents: Run = {}
    for qid, docs in run.items():
        best: dict[str, float] = {}
        for docid, score in ranked(docs):
            best.setdefault(docid.split(delimiter, 1)[0], score)
            if len(best) == hits:
                break
        documents[qid] = best
    return documents


def remove_query(run: Run, hits: int | None = None) -> Run:
    """Each query's hits less the document whose docid is the query's own id (Pyserini's
    ``--remove-query``), the best ``hits`` kept (all with None).

    In ArguAna (and Quora) every query is itself a corpus document and retrieves itself first;
    BEIR (``ignore_identical_ids``) and Pyserini's 2CR drop that hit. Search
    ``depth_for_remove_query(hits)`` deep and pass ``hits`` to keep ``hits`` per query. Fusing
    runs that lack the query's own id (``python -m pyserini_moe.fuse``) cannot bring it back:
    fusion only ranks the union.
    """
    return {qid: dict(ranked({d: s for d, s in docs.items() if d != qid})[:hits])
            for qid, docs in run.items()}
