"""One search, whatever the retriever: the library form of ``python -m pyserini_moe.search``.

:func:`search_topics` opens the searcher a :class:`SearchSettings` names (BM25, a model's dense /
impact / multi-vector index, or several indexes of one model fused) and, with ``bm25_index``,
fuses the model's run with BM25's (Pyserini's hybrid). The command line and the benchmark both
call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyserini_moe.encode import QUERIES_CUT_AT, QUERY_ENCODER_LOG
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import IndexMeta, IndexMismatchError, read_meta
from pyserini_moe.representation import INDEX_KINDS
from pyserini_moe.runs import Run
from pyserini_moe.search.base import (
    JAVA_INT_MAX,
    Searcher,
    depth_for_remove_query,
    max_passage,
    no_hits_notice,
    remove_query,
    remove_query_notice,
    self_hits,
)
from pyserini_moe.search.bm25 import Bm25Searcher
from pyserini_moe.search.fusion import FUSIONS
from pyserini_moe.search.hybrid import PYSERINI_ALPHA, hybrid_fusion
from pyserini_moe.validate import check_types

if TYPE_CHECKING:
    from pyserini_moe.search.experts import ExpertFusionSearcher

RETRIEVERS = ("bm25", *INDEX_KINDS, "fused")
# "exact": every expert re-scores the union of the candidates with the model's own score.
SEARCH_FUSIONS = ("exact", *FUSIONS)
WEIGHTED_FUSIONS = ("linear", "wsum")  # the fusions that read --fusion-weights
# Settings that count something (hits, queries, tokens, terms, threads): at least one, and no
# more than a Java int holds.
_COUNTS = ("hits", "batch_size", "threads", "query_max_length", "query_max_terms", "candidates",
           "ef_search", "max_passage_hits")


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What ``python -m pyserini_moe.search`` takes, flag for flag (see its ``--help``). Settings
    that cannot work together are refused when the object is made, one line naming the flags,
    so the command line, the benchmark and the analyses share one set of checks."""

    retriever: str
    index: str | list[str]  # a list for ``fused`` only
    encoder: str | None = None
    device: str | None = None
    backend: str = "torch"  # the query encoder's runtime: torch, onnx, onnx-int8 (see cli.args)
    precision: str = "fp32"
    query_max_length: int | None = None
    query_max_terms: int | None = 1024
    faiss_params: str | None = None
    ef_search: int | None = None
    hits: int = 1000
    candidates: int = 1000
    threads: int = 1
    batch_size: int = 64
    exhaustive: bool = False
    fusion: str = "came_sum"
    fusion_weights: list[float] | None = None
    bm25_index: str | None = None
    alpha: float = PYSERINI_ALPHA
    hybrid_normalize: bool = False
    weight_on_dense: bool = False
    k1: float = 0.9  # Pyserini's BEIR BM25 (the problems below compare with these)
    b: float = 0.4
    # Pyserini's query expansion and scoring of a BM25 search, at Pyserini's own parameters
    rm3: bool = False  # RM3 pseudo-relevance feedback (10 terms of the top 10 documents, 0.5)
    rocchio: bool = False  # Rocchio feedback (Pyserini's defaults)
    qld: bool = False  # query likelihood with Dirichlet smoothing (mu 1000) instead of BM25
    fields: dict[str, float] | None = None  # BM25: Pyserini's --fields (a multifield index)
    remove_query: bool = False  # Pyserini's --remove-query: drop the hit that is the query itself
    # Pyserini's --max-passage: passages "<doc><delimiter><n>" ranked as their documents, each
    # document at its best passage's score, max_passage_hits documents kept
    max_passage: bool = False
    max_passage_hits: int = 100
    max_passage_delimiter: str = "#"
    # Pyserini's --encoded-queries: dense / impact queries encoded ahead of time (no model)
    encoded_queries: str | None = None
    quiet: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        for problem in (self._retriever_problem(), self._count_problem(),
                        self._model_problem(), self._bm25_problem(), self._fusion_problem(),
                        self._ignored_problem(), self._max_passage_problem()):
            if problem:
                raise UserError(problem)
        if self.threads is not None:
            from pyserini_moe.modeling.device import check_parallelism  # noqa: PLC0415 - torch: not at `search --help`

            check_parallelism("--threads", self.threads)

    def _max_passage_problem(self) -> str | None:
        if not self.max_passage:
            given = [name for name in ("max_passage_hits", "max_passage_delimiter")
                     if getattr(self, name) != _DEFAULTS[name]]
            return f"{_flags(given)}: not used without --max-passage; leave out or add it" \
                if given else None
        if not self.max_passage_delimiter:
            return "--max-passage-delimiter must not be empty"
        return None

    def _retriever_problem(self) -> str | None:
        if self.retriever not in RETRIEVERS:
            return f"--retriever {self.retriever!r}: choose from {', '.join(RETRIEVERS)}"
        if self.retriever != "fused" and not isinstance(self.index, str):
            return (f"--retriever {self.retriever} searches one --index; several indexes of one "
                    "model are searched with --retriever fused")
        if self.exhaustive and (self.retriever != "multivector" or self.bm25_index):
            return "--exhaustive applies to a plain multivector search"
        return None

    def _count_problem(self) -> str | None:
        for name in _COUNTS:
            value, flag = getattr(self, name), "--" + name.replace("_", "-")
            if value is not None and value < 1:
                return f"{flag} must be >= 1"
            if value is not None and value > JAVA_INT_MAX:
                return f"{flag} must be <= {JAVA_INT_MAX} (a Java int)"
        return None

    def _model_problem(self) -> str | None:
        if self.precision != "fp32" and self.retriever == "bm25":
            return f"--{self.precision} applies to model encoders; BM25 has none"
        if self.bm25_index and self.retriever == "bm25":
            return "--bm25-index fuses a model's run with BM25; use a model --retriever"
        if self.encoded_queries and self.retriever not in ("dense", "impact"):
            return ("--encoded-queries applies to a dense or impact search (Pyserini reads "
                    "encoded queries for those two)")
        if self.encoded_queries and (self.encoder or self.precision != "fp32"
                                     or self.query_max_length or self.backend != "torch"
                                     or self.device not in (None, "auto")
                                     or self.query_max_terms != _DEFAULTS["query_max_terms"]):
            return ("--encoded-queries replaces the query encoder: --encoder, --backend, "
                    "--device, --fp16 / --bf16, --query-max-length and --query-max-terms (the "
                    "encoder's cut) do not apply")
        return None

    def refuse_unread_device(self) -> None:
        """``--device`` given to a BM25 search, which loads no model: refused by
        :func:`search_topics` once the index is open, so that a mistyped index folder, a
        prebuilt index name or a dense index named with ``--retriever bm25`` is named first (the
        device is then not what is wrong). Not when the settings are made: the bench passes one
        device to every retriever it opens, BM25 included."""
        if self.retriever == "bm25" and self.device not in (None, "auto"):  # None: the default
            raise UserError("--device: not used by a BM25 search (it loads no model); leave it "
                            "out")

    def _bm25_problem(self) -> str | None:
        if self.fields and self.retriever != "bm25" and not self.bm25_index:
            return ("--fields searches fields of a BM25 index (--retriever bm25, or the BM25 "
                    "side of a hybrid)")
        if not 0 <= self.alpha < math.inf:
            return (f"--alpha must be >= 0 and finite (the weight of the BM25 scores), "
                    f"got {self.alpha}")
        if not 0 <= self.k1 < math.inf or not 0 <= self.b <= 1:
            return (f"BM25 needs --k1 >= 0 and --b in [0, 1] (finite numbers), got k1 "
                    f"{self.k1}, b {self.b}")
        if self.fields and not all(0 <= w < math.inf for w in self.fields.values()):
            return f"--fields weights must be >= 0 and finite, got {self.fields}"
        if self.fields and not any(self.fields.values()):  # every field's score times 0
            given = " ".join(f"{name}={weight:g}" for name, weight in self.fields.items())
            return (f"--fields {given}: every weight is 0, so every document would score 0: "
                    "give at least one field a weight above 0")
        if self.rm3 and self.rocchio:
            return "--rm3 and --rocchio are two query expansions: choose one"
        if self.qld and (self.k1, self.b) != (_BM25_K1, _BM25_B):
            return "--k1 and --b are BM25's: --qld scores by query likelihood instead"
        return None

    def _ignored_problem(self) -> str | None:
        """Settings this search would silently not use (``fuse`` refuses such settings too):
        a model's on BM25, BM25's or a hybrid's without ``--bm25-index``, the fusion's outside a
        fused search, the candidate depth outside a fusion, the settings of an index kind the
        search has none of (the impact query cut, Faiss's parameters). The message says "without
        --bm25-index" only of the settings that flag would make read."""
        unread = [name for name in self._unread(bool(self.bm25_index))
                  if getattr(self, name) != _DEFAULTS[name]]
        if not unread:
            return None
        hybrid_reads = set(unread) - set(self._unread(True)) if self.retriever != "bm25" \
            else set()
        never = [name for name in unread if name not in hybrid_reads]
        alone = [name for name in unread if name in hybrid_reads]
        search = self._search_name()
        parts = [f"{_flags(never)}: not used by {search}"] if never else []
        if alone:
            parts.append(f"{_flags(alone)}: not used by {search} without --bm25-index")
        return f"{'; '.join(parts)}; leave {'it' if len(unread) == 1 else 'them'} out"

    def _search_name(self) -> str:
        """``a BM25 search``, ``an impact search``, ``a fused search of multivector and dense
        indexes`` (the kinds when the indexes record them: they say why a setting is unread),
        each "with its BM25 hybrid" when ``--bm25-index`` is given."""
        if self.retriever == "bm25":
            return "a BM25 search"
        kinds = self._fused_kinds() if self.retriever == "fused" else None
        if kinds:
            name = f"a fused search of {' and '.join(kinds)} indexes"
        else:
            name = f"{'an' if self.retriever[0] in 'aeiou' else 'a'} {self.retriever} search"
        # with --bm25-index it is a hybrid, whose BM25 side is weighed by --alpha
        return f"{name} with its BM25 hybrid (--bm25-index, weighed by --alpha)" \
            if self.bm25_index else name

    def _unread(self, with_bm25: bool) -> list[str]:
        """The settings this search does not read (``with_bm25``: were it a hybrid)."""
        if self.retriever == "bm25":
            names = [*_MODEL_SETTINGS, *_HYBRID_SETTINGS]
        else:
            names = [] if with_bm25 else [*_BM25_SETTINGS, *_HYBRID_SETTINGS]
        if self.retriever != "fused":
            names += ["fusion", "fusion_weights"] + ([] if with_bm25 else ["candidates"])
        return names + self._unread_by_kind()

    def _unread_by_kind(self) -> list[str]:
        """The settings of index kinds this search has none of: the impact query cut, the
        multi-vector token index's Faiss parameters, a dense HNSW index's efSearch. A fused
        search reads them as its indexes' kinds say (their metadata); its dense expert is
        opened without --ef-search (a multi-vector one takes --faiss-params efSearch=N)."""
        if self.retriever != "fused":
            return [name for name, kind in _KIND_SETTINGS.items() if kind != self.retriever]
        given = [name for name in ("query_max_terms", "faiss_params")
                 if getattr(self, name) != _DEFAULTS[name]]
        kinds = self._fused_kinds() if given else None  # no metadata read when none is given
        return ["ef_search"] + ([] if kinds is None else [
            name for name in given if _KIND_SETTINGS[name] not in kinds])

    def _fused_kinds(self) -> list[str] | None:
        """The kinds a fused search's indexes record, in order; None when one records none (not
        an index of ours, or not there: the search refuses it when it opens it)."""
        kinds = []
        for index in [self.index] if isinstance(self.index, str) else self.index:
            meta = read_meta(index) if os.path.isdir(index) else None
            if meta is None or meta.kind not in INDEX_KINDS:
                return None
            kinds.append(meta.kind)
        return kinds

    def _fusion_problem(self) -> str | None:
        if self.fusion not in SEARCH_FUSIONS:
            return f"--fusion {self.fusion!r}: choose from {', '.join(SEARCH_FUSIONS)}"
        if self.fusion_weights and (not all(0 <= w < math.inf for w in self.fusion_weights)
                                    or not any(self.fusion_weights)):
            return ("--fusion-weights must be finite numbers >= 0, not all 0 (every document "
                    f"would score 0), got {self.fusion_weights}")
        weighted = self.fusion in WEIGHTED_FUSIONS
        if self.retriever == "fused" and self.fusion_weights and not weighted:
            return (f"--fusion-weights: --fusion {self.fusion} does not weigh the indexes (only "
                    f"{' and '.join(WEIGHTED_FUSIONS)} do); leave them out or pick one of those")
        needs_weights = self.retriever == "fused" and weighted
        if needs_weights and (not self.fusion_weights
                              or len(self.fusion_weights) != len(self.index)):
            return (f"--fusion {self.fusion} needs --fusion-weights, one per index "
                    f"({len(self.index)}); tune them on a dev split with "
                    "`python -m pyserini_moe.fuse --dev-runs ...`")
        return None


_BM25_K1, _BM25_B = 0.9, 0.4  # Pyserini's BEIR BM25
# Settings only a BM25 search reads (alone or as a hybrid's BM25 side).
_BM25_SETTINGS = ("k1", "b", "rm3", "rocchio", "qld")
# Settings only a model's search reads, and those only a hybrid with BM25 reads.
_MODEL_SETTINGS = ("encoder", "encoded_queries", "query_max_length", "backend")
_HYBRID_SETTINGS = ("alpha", "hybrid_normalize", "weight_on_dense")
# Settings only one kind of index reads: the impact query cut, the multi-vector token index's
# Faiss parameters, a dense HNSW index's search breadth.
_KIND_SETTINGS = {"query_max_terms": "impact", "faiss_params": "multivector",
                  "ef_search": "dense"}
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SearchSettings)}


def _flags(names: list[str]) -> str:
    """``--query-max-terms, --faiss-params``: the flags of these settings."""
    return ", ".join("--" + name.replace("_", "-") for name in names)


# Queries searched at a time by :meth:`TopicSearcher.search_parts` (the search command): a mining
# search of 500k training queries 1000 deep (500M hits) holds one part's run, not the whole.
SEARCH_PART = 10_000


@dataclasses.dataclass
class Findings:
    """What a search found that its user must hear, kept as counts that add up over the parts of
    a topic set searched a part at a time (:meth:`TopicSearcher.search_parts`: a mining search of
    500k queries never holds its whole run), so the lines read the same either way; built once,
    by :attr:`notices`."""

    queries: int = 0
    empty: int = 0  # queries that retrieved nothing
    empty_example: tuple[str, str] | None = None  # (qid, text) of the first of them
    self_hits: tuple[int, int] | None = None  # --remove-query: own id found, of those at rank 1
    silent: list[str] | None = None  # a fusion's experts that retrieved nothing for any query
    cut_lengths: set[int] = dataclasses.field(default_factory=set)  # query encoders' cuts
    capacity: str | None = None  # hits asked beyond the index's documents: said first
    short_hybrid: str | None = None  # a hybrid's candidates fewer than its hits
    unsplit: str | None = None  # --max-passage's delimiter, where no hit's id holds it

    def __add__(self, other: Findings) -> Findings:
        def pair_sum(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
            return b if a is None else a if b is None else (a[0] + b[0], a[1] + b[1])

        silent = (other.silent if self.silent is None else self.silent if other.silent is None
                  else [e for e in self.silent if e in other.silent])
        # unsplit in the whole only if in every part searched
        unsplit = (other.unsplit if not self.queries else self.unsplit if not other.queries
                   else self.unsplit if self.unsplit and other.unsplit else None)
        return Findings(self.queries + other.queries, self.empty + other.empty,
                        self.empty_example or other.empty_example,
                        pair_sum(self.self_hits, other.self_hits), silent,
                        self.cut_lengths | other.cut_lengths, self.capacity or other.capacity,
                        self.short_hybrid or other.short_hybrid, unsplit)

    @property
    def notices(self) -> list[str]:
        silent = (f"warning: the {' and the '.join(self.silent)} retrieved nothing for any "
                  "query: the fused run comes from the other indexes alone") if self.silent \
            else None
        removed = (remove_query_notice(*self.self_hits, self.queries)
                   if self.self_hits is not None else None)
        unsplit = (f"warning: --max-passage: no hit's id holds {self.unsplit!r}, so each hit is "
                   "a document of its own and the run is as searched (--max-passage-delimiter?)"
                   ) if self.unsplit else None
        return [n for n in [self.capacity, silent, self.short_hybrid,
                            query_cut_notice(self.cut_lengths), removed, unsplit,
                            no_hits_notice(self.empty, self.queries, self.empty_example)] if n]


@dataclasses.dataclass
class SearchOutcome:
    """A search's run, each index's own run (``fused`` only) and where the time went: opening
    the searchers (loading the model, reading the index) vs searching."""

    run: Run
    expert_runs: dict[str, Run]
    open_seconds: float
    search_seconds: float
    query_terms: float | None = None  # impact searches: mean terms per query sent to Lucene
    findings: Findings = dataclasses.field(default_factory=Findings)

    @property
    def notices(self) -> list[str]:
        """What a user must hear about (:class:`Findings`)."""
        return self.findings.notices


class TopicSearcher:
    """The searchers a :class:`SearchSettings` names (and BM25's for a hybrid), opened once for
    any number of topic sets: the command line searches one, the Python API's searcher many."""

    def __init__(self, s: SearchSettings) -> None:
        clock = time.perf_counter()
        self.settings = s
        self.main, self.bm25 = _open(s)
        s.refuse_unread_device()
        self.num_docs = _num_docs(s)
        self.open_seconds = time.perf_counter() - clock

    def search(self, topics: dict[str, str], hits: int | None = None) -> SearchOutcome:
        """The run of ``topics`` (``hits`` per query, the settings' by default), and for
        ``fused`` each index's own run (``candidates`` deep).

        With ``remove_query`` every searcher is asked for one hit more (each side of a hybrid,
        each expert of a fusion: one more candidate) and the query's own id is dropped from
        every run (the fused one, each expert's, a hybrid's), so ``hits`` and ``candidates``
        remain where the index holds that many documents.
        """
        s = self.settings if hits is None else dataclasses.replace(self.settings, hits=hits)
        asked = s.hits
        capped = self.num_docs is not None and s.hits > self.num_docs
        if capped:  # Faiss sizes its result arrays by the hits asked for, not by the index
            reads_candidates = bool(s.bm25_index) or s.retriever == "fused"
            s = dataclasses.replace(s, hits=self.num_docs, **(
                {"candidates": min(s.candidates, self.num_docs)} if reads_candidates else {}))
        main, bm25 = self.main, self.bm25
        clock = time.perf_counter()
        hits = depth_for_remove_query(s.hits) if s.remove_query else s.hits
        candidates = depth_for_remove_query(s.candidates) if s.remove_query else s.candidates
        findings = Findings(queries=len(topics))
        with held_query_cuts() as cut_lengths:
            run, expert_runs = _search_main(s, main, topics, candidates if s.bm25_index
                                            else hits, candidates)
            if expert_runs:
                findings.silent = silent_experts(main, expert_runs)
            if bm25 is not None:
                bm25_run = bm25.search(topics, hits=candidates, threads=s.threads,
                                       batch_size=s.batch_size, progress=not s.quiet)
                run = hybrid_fusion(run, bm25_run, s.alpha, s.hybrid_normalize, s.weight_on_dense,
                                    k=hits)
                findings.short_hybrid = short_hybrid_notice(s.candidates, s.hits)
        findings.cut_lengths = set(cut_lengths)
        if s.remove_query:
            findings.self_hits = self_hits(run)
            run = remove_query(run, s.hits)
            expert_runs = {kind: remove_query(r, s.candidates) for kind, r in expert_runs.items()}
        if s.max_passage:
            if not any(s.max_passage_delimiter in docid for hits in run.values() for docid in hits):
                findings.unsplit = s.max_passage_delimiter
            run = max_passage(run, s.max_passage_delimiter, s.max_passage_hits)
        encoder = getattr(main, "query_encoder", None)
        terms = encoder.terms / encoder.queries if getattr(encoder, "queries", 0) else None
        if capped and asked != _DEFAULTS["hits"]:  # said of a depth asked for, not the default
            findings.capacity = (f"note: the index holds {self.num_docs} documents: at most "
                                 f"{self.num_docs} hits a query (--hits {asked})")
        empty = [qid for qid in topics if not run.get(qid)]
        findings.empty = len(empty)
        findings.empty_example = (empty[0], topics[empty[0]]) if empty else None
        return SearchOutcome(run, expert_runs, self.open_seconds,
                             time.perf_counter() - clock, terms, findings)

    def search_parts(self, topics: dict[str, str], part: int | None = None
                     ) -> Iterator[SearchOutcome]:
        """:meth:`search` of ``part`` queries at a time, in the topics' order: a caller writes
        each part's run and drops it, so memory holds one part (500k training queries mined
        1000 deep are 500M hits); the parts' :class:`Findings` add up to the whole's."""
        part = part or SEARCH_PART
        qids = list(topics)
        for start in range(0, len(qids), part):
            yield self.search({qid: topics[qid] for qid in qids[start:start + part]})


def _num_docs(s: SearchSettings) -> int | None:
    """How many documents the searched indexes hold, as their metadata records it (the most of
    a fusion's; None where one records none: a Pyserini-built index, where Lucene caps the hits
    itself)."""
    counts = []
    for index in [s.index] if isinstance(s.index, str) else s.index:
        meta = read_meta(index) if os.path.isdir(index) else None
        if meta is None or not meta.num_docs:
            return None
        counts.append(meta.num_docs)
    return max(counts)


def search_topics(s: SearchSettings, topics: dict[str, str]) -> SearchOutcome:
    """The searchers ``s`` names, opened, and the run of ``topics`` (see
    :meth:`TopicSearcher.search`)."""
    return TopicSearcher(s).search(topics)


def _search_main(s: SearchSettings, main: Searcher | ExpertFusionSearcher,
                 topics: dict[str, str], depth: int, candidates: int
                 ) -> tuple[Run, dict[str, Run]]:
    """The model's (or BM25's) run ``depth`` deep, and a fusion's expert runs (``candidates``
    deep; none for one index)."""
    if s.retriever == "fused":
        params = {"weights": s.fusion_weights} if s.fusion_weights else None
        return main.search(topics, hits=depth, candidates=candidates, method=s.fusion,
                           params=params, threads=s.threads, batch_size=s.batch_size,
                           progress=not s.quiet)
    if s.exhaustive:
        return main.search(topics, hits=depth, batch_size=s.batch_size, progress=not s.quiet,
                           exhaustive=True), {}
    return main.search(topics, hits=depth, threads=s.threads, batch_size=s.batch_size,
                       progress=not s.quiet), {}


def silent_experts(main: ExpertFusionSearcher, expert_runs: dict[str, Run]) -> list[str]:
    """The experts of a fusion that retrieved nothing for any query (an impact query cut to
    terms no document holds), by kind and index: the fused run is the other experts' alone."""
    return [f"{searcher.kind} index {searcher.index}" for searcher in main.searchers
            if not any(expert_runs.get(searcher.kind, {}).values())]


class _QueryCuts(logging.Filter):
    """Holds back the query encoders' cut-queries warning, noting the length: a fused search
    has one encoder per expert, and each logged it (a timestamped logging line apiece); analyze
    checkpoints searches one snapshot after another."""

    def __init__(self) -> None:
        super().__init__()
        self.lengths: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        cut_at = getattr(record, QUERIES_CUT_AT, None)
        if cut_at is not None:
            self.lengths.add(cut_at)
        return cut_at is None


@contextlib.contextmanager
def held_query_cuts() -> Iterator[set[int]]:
    """While a search runs, the cut-queries warnings are held back; the lengths they name are
    in the set yielded, for :func:`query_cut_notice`."""
    cuts = _QueryCuts()
    logger = logging.getLogger(QUERY_ENCODER_LOG)
    logger.addFilter(cuts)
    try:
        yield cuts.lengths
    finally:
        logger.removeFilter(cuts)


def query_cut_notice(lengths: set[int]) -> str | None:
    """One warning line for the queries cut at ``lengths`` tokens (None when none was)."""
    if not lengths:
        return None
    return (f"warning: queries longer than {' or '.join(map(str, sorted(lengths)))} tokens are "
            "cut (--query-max-length)")


def short_hybrid_notice(candidates: int, hits: int) -> str | None:
    """A hybrid fuses two top-``candidates`` lists (appendix D's K'): below ``hits`` / 2 the
    union cannot fill ``hits`` a query, a shorter run than asked for; None otherwise."""
    if 2 * candidates >= hits:
        return None
    return (f"warning: the hybrid fuses BM25's and the model's top {candidates} (--candidates): "
            f"at most {2 * candidates} hits a query, not --hits {hits}")


def recorded_retriever(indexes: list[str]) -> str:
    """The retriever ``--index`` calls for when ``--retriever`` is left out: ``fused`` for several
    indexes (the only retriever that takes them), else the kind the index records in its
    metadata; an index without ours (Pyserini's own Lucene index, a prebuilt index name) is
    searched with BM25, as when ``--retriever`` defaulted to bm25."""

    if len(indexes) > 1:
        return "fused"
    index = indexes[0]
    meta = read_meta(index) if os.path.isdir(index) else None
    if meta is None:
        return "bm25"
    kind = meta.kind
    if kind in ("bm25", *INDEX_KINDS):
        return kind
    merge = " (a shard: merge the shards first, python -m pyserini_moe.merge)" \
        if "shard" in str(kind) else ""
    raise IndexMismatchError(f"{index} records kind {kind!r}, which no --retriever searches{merge}")


def _open(s: SearchSettings) -> tuple[Searcher | ExpertFusionSearcher, Searcher | None]:
    """The searcher the settings name, and BM25's for a hybrid (else None)."""
    _refuse_mixed_collections([*([s.index] if isinstance(s.index, str) else s.index),
                               *([s.bm25_index] if s.bm25_index else [])])
    meta = read_meta(s.bm25_index) if s.bm25_index else None
    if meta is not None and meta.kind != "bm25":  # said of the flag, not of a BM25 "retriever"
        raise IndexMismatchError(f"--bm25-index {s.bm25_index} is {meta.kind_phrase}: the "
                                 "hybrid's BM25 side needs a BM25 index (python -m "
                                 "pyserini_moe.index --retriever bm25)")
    if s.retriever == "fused":
        main = _fusion_searcher(s)
    else:
        main = open_any(s)
    if not s.bm25_index:
        return main, None
    return main, Bm25Searcher(s.bm25_index, k1=s.k1, b=s.b, fields=s.fields, rm3=s.rm3,
                              rocchio=s.rocchio, qld=s.qld)


def _refuse_mixed_collections(indexes: list[str]) -> None:
    """A hybrid or a fusion merges runs over one corpus: indexes of different corpora would mix
    another corpus's documents into the run, silently. Two corpora can share a name
    (``/a/scifact``, ``/b/scifact``), so indexes are compared by the corpus digest they record,
    and by name and document count where one records no digest (older indexes); indexes that
    record nothing (built elsewhere, prebuilt names) are not compared."""
    recorded = {index: meta for index in indexes
                if (meta := read_meta(index) if os.path.isdir(index) else None) is not None}
    for a, b in itertools.combinations(recorded, 2):
        if not _one_corpus(recorded[a], recorded[b]):
            listed = "; ".join(f"{index} ({_corpus_phrase(recorded[index])})"
                               for index in (a, b))
            raise UserError(f"these indexes hold different collections: {listed}; a hybrid or "
                            "fused search needs indexes of one corpus")


def _one_corpus(a: IndexMeta, b: IndexMeta) -> bool:
    digests = [(m.corpus or {}).get("sha256") for m in (a, b)]
    if all(digests):
        return digests[0] == digests[1]
    return all(x is None or y is None or x == y
               for x, y in ((a.collection, b.collection), (a.num_docs, b.num_docs)))


def _corpus_phrase(meta: IndexMeta) -> str:
    digest = (meta.corpus or {}).get("sha256")
    return ", ".join(str(part) for part in (
        meta.collection or "no collection recorded",
        f"{meta.num_docs} documents" if meta.num_docs is not None else None,
        f"sha256 {digest[:12]}" if digest else None) if part)


def open_any(s: SearchSettings) -> Searcher:
    """The searcher of one index (any retriever but ``fused``)."""
    if s.retriever == "bm25":

        return Bm25Searcher(s.index, k1=s.k1, b=s.b, fields=s.fields, rm3=s.rm3,
                            rocchio=s.rocchio, qld=s.qld)
    from pyserini_moe.search.encoded import open_searcher  # noqa: PLC0415 - torch: `search --help` stays light

    return open_searcher(s.retriever, s.index, s.encoder, s.device, s.query_max_length,
                         s.query_max_terms, s.faiss_params, s.ef_search, s.precision,
                         s.encoded_queries)


def _fusion_searcher(s: SearchSettings) -> ExpertFusionSearcher:
    """One searcher per index of one model, fused (``--retriever fused``)."""
    from pyserini_moe.search.experts import ExpertFusionSearcher  # noqa: PLC0415 - torch: `search --help` stays light

    return ExpertFusionSearcher(s.index, s.encoder, device=s.device, precision=s.precision,
                                query_max_length=s.query_max_length,
                                query_max_terms=s.query_max_terms, faiss_params=s.faiss_params)
