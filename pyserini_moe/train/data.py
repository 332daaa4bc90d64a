"""Training examples: (query, positive passage, hard negatives) from the qrels of one split.

* ``positives: all`` (default): one example per judged (query, positive) pair, so a query with
  three positives counts three times per epoch (SciFact train: 809 queries, 919 pairs).
  ``first``: one example per query, its first positive in qrels order: DPR's gold passage, which
  DPR and TASER train on (``python -m pyserini_moe.dpr train`` writes DPR's order).
  ``sample``: one example per query, its positive drawn afresh every epoch (SB-MoE's public code,
  Tevatron). Either way an epoch means what the papers mean by one: one pass over the questions.
* A deterministic, seeded split of QUERIES (not pairs) is held out for the validation loss, so no
  validation query is ever trained on.
* Hard-negative candidates per query: the top ``depth`` of a BM25 search (through Pyserini), of any
  TREC run (how negatives mined by a trained model come back in), or of a retrieval with a model;
  the query's positives removed and the first ``skip_top`` ranks skipped. Every epoch samples
  ``num_negatives`` of them per example. Random passages fill in when a query has too few.
* Batches never hold the same query twice or two examples with the same positive, and a sampled
  negative is never a positive of any query in its batch: with in-batch negatives, either would
  train a relevant passage as a negative.

The whole corpus is held in memory (passage id -> text), which is what random fallback negatives
and on-the-fly sampling need; the candidates are held as 4-byte document numbers, and a mining
is written and read a part at a time (:class:`CandidateBuilder`), so MS MARCO's 500M BM25
candidates fit a GPU node's memory (``make scale-check`` measures it).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import random
import shutil
from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pyserini_moe.data.beir import BeirCollection, cache_root
from pyserini_moe.errors import UserError
from pyserini_moe.index.lucene import build_bm25_index
from pyserini_moe.io import atomic_path
from pyserini_moe.modeling.device import usable_cores
from pyserini_moe.runs import (
    Run,
    RunFormatError,
    is_rank_only,
    iter_run,
    trec_order,
    trec_run_lines,
)
from pyserini_moe.search.bm25 import Bm25Searcher
from pyserini_moe.train.config import DataConfig

log = logging.getLogger(__name__)
_NONE = np.empty(0, dtype=np.int32)  # a query without candidates (shared: never written to)

NEGATIVES_RUN = "negatives.trec"  # the mined candidates, kept in the output folder
VALIDATION_EPOCH = -1  # the epoch number whose sampling fixes the validation batches


@dataclass(frozen=True)
class Example:
    """One training instance, as texts."""

    query: str
    positive: str
    negatives: tuple[str, ...]


@dataclass
class TrainingData:
    """Everything sampling needs; built by :func:`load_training_data`."""

    queries: dict[str, str]  # qid -> text
    passages: dict[str, str]  # docid -> title + " " + text
    positives: dict[str, frozenset[str]]  # qid -> judged relevant docids
    train_pairs: list[tuple[str, str]]  # (qid, positive docid)
    validation_pairs: list[tuple[str, str]]
    candidates: dict[str, np.ndarray]  # qid -> ranked hard-negative candidates (no positives),
    # as positions in doc_ids (CandidateBuilder)
    num_negatives: int
    seed: int  # the training seed: batch order and negatives of every epoch
    num_random_filled: int = 0  # queries whose candidates were topped up with random passages
    sample_positives: bool = False  # one pair per query per epoch, drawn by the epoch's seed
    split_seed: int | None = None  # the held-out split's seed (default ``seed``): it also fixes
    # the validation batches, so every training seed of a recipe validates on the same batches
    doc_ids: list[str] = field(default_factory=list)  # the corpus ids, sorted

    def __post_init__(self) -> None:
        if not self.doc_ids:
            self.doc_ids = sorted(self.passages)

    def candidate_ids(self, qid: str) -> list[str]:
        """``qid``'s hard-negative candidates, best first, as document ids."""
        return [self.doc_ids[i] for i in self.candidates.get(qid, _NONE).tolist()]

    # -- batches ---------------------------------------------------------------------------
    def epoch_batches(self, epoch: int, batch_size: int) -> list[list[Example]]:
        """The training batches of ``epoch``: shuffled, negatives sampled; the same for the same
        (seed, epoch), which is what makes resuming exact."""
        return self._batches(self._epoch_pairs(self.train_pairs, epoch), epoch, batch_size)

    def validation_batches(self, batch_size: int) -> list[list[Example]]:
        """Fixed validation batches (negatives sampled once), so validation losses compare."""
        pairs = self._epoch_pairs(self.validation_pairs, VALIDATION_EPOCH)
        return self._batches(pairs, VALIDATION_EPOCH, batch_size)

    def num_batches(self, epoch: int, batch_size: int) -> int:
        return len(pack_batches(self._epoch_pairs(self.train_pairs, epoch), self._rng(epoch), batch_size))

    def _epoch_pairs(self, pairs: list[tuple[str, str]], epoch: int) -> list[tuple[str, str]]:
        """The pairs of one epoch: all of them, or (``sample_positives``) one per query."""
        if not self.sample_positives:
            return pairs
        by_query: dict[str, list[str]] = {}
        for qid, doc in pairs:
            by_query.setdefault(qid, []).append(doc)
        rng = random.Random(f"{self._seed(epoch)}/{epoch}/positives")
        return [(qid, rng.choice(docs)) for qid, docs in by_query.items()]

    def _seed(self, epoch: int) -> int:
        if epoch == VALIDATION_EPOCH and self.split_seed is not None:
            return self.split_seed
        return self.seed

    def _rng(self, epoch: int) -> random.Random:
        return random.Random(f"{self._seed(epoch)}/{epoch}")

    def _batches(self, pairs: list[tuple[str, str]], epoch: int,
                 batch_size: int) -> list[list[Example]]:
        rng = self._rng(epoch)
        batches = []
        for batch in pack_batches(pairs, rng, batch_size):
            excluded = self.excluded(batch)
            batches.append([self._example(qid, pos, excluded, rng) for qid, pos in batch])
        return batches

    def excluded(self, batch: list[tuple[str, str]]) -> tuple[set[str], set[int]]:
        """The positives of every query of a batch, as ids and as document numbers: no example
        of the batch draws one as a negative."""
        ids = set().union(*(self.positives[q] for q, _ in batch))
        return ids, {bisect.bisect_left(self.doc_ids, d) for d in ids}  # all corpus ids

    def _example(self, qid: str, positive: str, batch_positives: tuple[set[str], set[int]],
                 rng: random.Random) -> Example:
        excluded, numbers = batch_positives
        # the pool as document numbers: only the drawn ones become ids (a query has up to 1000)
        pool = [i for i in self.candidates.get(qid, _NONE).tolist() if i not in numbers]
        if len(pool) >= self.num_negatives:
            chosen = [self.doc_ids[i] for i in rng.sample(pool, self.num_negatives)]
        else:
            names = [self.doc_ids[i] for i in pool]
            chosen = names + _random_docs(self.doc_ids, self.num_negatives - len(pool),
                                          excluded | set(names), rng)
        return Example(self.queries[qid], self.passages[positive],
                       tuple(self.passages[d] for d in chosen))


def pack_batches(pairs: list[tuple[str, str]], rng: random.Random,
          batch_size: int) -> list[list[tuple[str, str]]]:
    """Shuffle, then fill batches in order, deferring a pair whose query or positive is already
    in the batch being filled (it goes first into the next batch)."""
    pending = deque(rng.sample(pairs, len(pairs)))
    batches = []
    while pending:
        batch: list[tuple[str, str]] = []
        queries: set[str] = set()
        docs: set[str] = set()
        deferred = deque()
        while pending and len(batch) < batch_size:
            qid, doc = pair = pending.popleft()
            if qid in queries or doc in docs:
                deferred.append(pair)
            else:
                batch.append(pair)
                queries.add(qid)
                docs.add(doc)
        # back in front of the rest, in their order; `deferred + pending` would copy every
        # pending pair for each batch: quadratic, 110 s an epoch at MS MARCO's 527k pairs
        pending.extendleft(reversed(deferred))
        batches.append(batch)
    return batches


def _random_docs(doc_ids: list[str], k: int, excluded: set[str], rng: random.Random) -> list[str]:
    """``k`` distinct random docids outside ``excluded`` (fewer if the corpus has no more)."""
    k = min(k, len(doc_ids) - len(excluded))  # everything excluded is a corpus id
    chosen: list[str] = []
    seen = set(excluded)
    while len(chosen) < k:
        doc = doc_ids[rng.randrange(len(doc_ids))]
        if doc not in seen:
            seen.add(doc)
            chosen.append(doc)
    return chosen


# -- building the data ---------------------------------------------------------------------

def split_queries(qids: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(training, validation) query ids; validation is ``fraction`` of them (at least one when the
    fraction is > 0), chosen by ``seed`` alone, so every recipe with that seed holds out the same
    queries."""
    if fraction <= 0 or len(qids) < 2:
        return list(qids), []
    size = min(len(qids) - 1, max(1, round(fraction * len(qids))))
    held_out = set(random.Random(seed).sample(sorted(qids), size))
    return [q for q in qids if q not in held_out], [q for q in qids if q in held_out]


def load_training_data(config: DataConfig, workdir: Path, reuse_mined: bool = False,
                       progress: bool = True, sampling_seed: int | None = None) -> TrainingData:
    """Read the split, hold out validation queries, get hard-negative candidates.

    ``config.seed`` chooses the held-out queries; ``sampling_seed`` (the training seed; default
    ``config.seed``) the batch order and the negatives drawn, so the training seeds of one recipe
    share one validation split and differ in everything a training run samples.

    The candidate run is written to ``workdir/negatives.trec`` (provenance, and reused when
    ``reuse_mined``, e.g. on resume, so a resumed run sees the same negatives).
    """
    collection = BeirCollection.load(config.collection)
    qrels = collection.qrels(config.split)
    passages = {doc.id: doc.contents for doc in collection.corpus()}
    if config.num_negatives >= len(passages):  # a step would hold batch x (1 + n) passages
        raise UserError(f"data.num_negatives {config.num_negatives} is not below the "
                        f"{len(passages)} passages of {collection.name}: a query has at most "
                        f"{len(passages) - 1} negatives")
    ordered = _judged_positives(qrels, passages, f"{collection.name}:{config.split}")
    positives = {qid: frozenset(docs) for qid, docs in ordered.items()}
    if not positives:
        raise UserError(f"{collection.name}:{config.split} has no positive judgments to train on")
    queries = {qid: text for qid, text in collection.queries().items() if qid in positives}
    train_qids, validation_qids = split_queries(list(positives), config.validation_fraction,
                                                config.seed)

    doc_ids = sorted(passages)
    if config.num_negatives:
        builder = CandidateBuilder(doc_ids, positives, config)
        _fill_candidates(builder, config, collection, queries, Path(workdir), reuse_mined,
                         progress)
        candidates, filled = builder.candidates, builder.filled
    else:  # in-batch negatives only: nothing to mine (BM25 over MS MARCO's 500k training
        candidates, filled = dict.fromkeys(positives, _NONE), 0  # queries, for no negative)

    def pairs(qids: list[str]) -> list[tuple[str, str]]:
        if config.positives == "first":
            return [(qid, ordered[qid][0]) for qid in qids]
        return [(qid, doc) for qid in qids for doc in sorted(positives[qid])]

    if filled:
        log.warning("%d of %d queries have fewer than %d hard negatives; random passages fill in",
                    filled, len(positives), config.num_negatives)
    return TrainingData(queries, passages, positives, pairs(train_qids), pairs(validation_qids),
                        candidates, config.num_negatives,
                        config.seed if sampling_seed is None else sampling_seed, filled,
                        sample_positives=config.positives == "sample", split_seed=config.seed,
                        doc_ids=doc_ids)


def _judged_positives(qrels: dict[str, dict[str, int]], passages: dict[str, str],
                      split: str) -> dict[str, list[str]]:
    """Each query's relevant documents in qrels order (DPR's gold first), those the corpus
    holds: a judgment of a missing document (BEIR's ArguAna has 5) counts in evaluation but
    cannot be trained on, so it is left out here with one warning."""
    ordered = {qid: [d for d, grade in judged.items() if grade > 0] for qid, judged in qrels.items()}
    missing = [d for docs in ordered.values() for d in docs if d not in passages]
    if missing:
        log.warning("%s: %d judged positive(s) are not in the corpus (e.g. %r); not trained on",
                    split, len(missing), missing[0])
    ordered = {qid: [d for d in docs if d in passages] for qid, docs in ordered.items()}
    return {qid: docs for qid, docs in ordered.items() if docs}


class CandidateBuilder:
    """Each training query's hard-negative candidates, ranked, as document numbers (positions in
    the sorted corpus ids): ranks skip_top+1..depth of a run, the query's positives and the query
    itself removed. Four bytes a candidate rather than a Python string: CAME's 500k MS MARCO
    queries at depth 1000 are 500M candidates (2 GB here; ~100 GB as a run's dicts of strings).
    Queries are added one at a time, from a run file read line by line or a mining in parts."""

    def __init__(self, doc_ids: list[str], positives: dict[str, frozenset[str]],
                 config: DataConfig) -> None:
        self.doc_ids = doc_ids
        self.number = {doc: i for i, doc in enumerate(doc_ids)}
        self.positives = positives
        self.config = config
        self.candidates: dict[str, np.ndarray] = {}
        self.filled = 0  # queries with fewer candidates than the negatives drawn

    def add(self, qid: str, numbers: np.ndarray, scores: np.ndarray, source: Path,
            unknown: list[str] = ()) -> None:
        """One query's hits in any order: document numbers (-1 for a document not in the
        corpus, named in order by ``unknown``) and scores."""
        if qid not in self.positives:
            return
        if unknown:  # rare: rank by the names themselves, as the run's readers do
            names = iter(unknown)
            docs = [self.doc_ids[n] if n >= 0 else next(names) for n in numbers.tolist()]
            order = trec_order(dict(zip(docs, scores.tolist())))
            picked = self._window(order)
            missing = next((d for d in picked if d not in self.number), None)
            if missing is not None:
                raise UserError(f"{source}: query {qid!r} ranks document {missing!r}, which is "
                                f"not in collection {self.config.collection!r}: wrong run for "
                                "this collection?")
            hits = np.array([self.number[d] for d in picked], dtype=np.int64)
        else:
            # descending score, ties by descending document number, which is descending docid
            # (the ids are sorted): the order runs.trec_order gives
            hits = self._window(numbers[np.lexsort((numbers, scores))[::-1]])
        own = [self.number[d] for d in self.positives[qid]]
        if qid in self.number:  # never the query itself: in ArguAna / Quora it is a document too
            own.append(self.number[qid])
        kept = hits[~np.isin(hits, own)].astype(np.int32)
        self.candidates[qid] = kept
        self.filled += len(kept) < self.config.num_negatives

    def _window(self, ranked_hits: np.ndarray | list[str]) -> np.ndarray | list[str]:
        negatives = self.config.negatives
        return ranked_hits[negatives.skip_top:negatives.depth]

    def finish(self, source: Path) -> None:
        """Queries the run did not rank get no candidates (random passages fill in); a run that
        ranks none of them is the wrong run."""
        if not self.candidates:
            example = next(iter(self.positives))
            raise UserError(f"{source}: ranks none of the {len(self.positives)} training queries "
                            f"of {self.config.collection!r} (e.g. {example!r}): wrong run for "
                            "this collection or split?")
        for qid in self.positives:
            if qid not in self.candidates:
                self.candidates[qid] = _NONE
                self.filled += self.config.num_negatives > 0

    def add_run(self, run: Run, source: Path) -> None:
        """Every query of an in-memory run (a part of a mining)."""
        for qid, hits in run.items():
            numbers = [self.number.get(d, -1) for d in hits]
            unknown = [d for d, n in zip(hits, numbers) if n < 0]
            self.add(qid, np.array(numbers, dtype=np.int64),
                     np.fromiter(hits.values(), dtype=np.float64, count=len(hits)), source, unknown)

    def read(self, path: Path) -> None:
        """A run file, line by line (checked as :func:`read_trec_run` checks it), keeping only
        the training queries' hits, as numbers and scores."""
        numbers: dict[str, array] = {}
        scores: dict[str, array] = {}
        unknown: dict[str, list[str]] = {}
        for qid, docid, value, _ in iter_run(path):
            if qid not in self.positives:
                continue
            if qid not in numbers:
                numbers[qid], scores[qid] = array("i"), array("d")
            number = self.number.get(docid, -1)
            if number < 0:
                unknown.setdefault(qid, []).append(docid)
            numbers[qid].append(number)
            scores[qid].append(value)
        rank_only = is_rank_only(path)
        for qid in list(numbers):
            hits = np.frombuffer(numbers.pop(qid), dtype=np.int32)
            values = np.frombuffer(scores.pop(qid), dtype=np.float64)
            _refuse_listed_twice(path, qid, hits, values, unknown.get(qid, []), rank_only,
                                 self.doc_ids)
            self.add(qid, hits, values, path, unknown.get(qid, []))
        self.finish(path)


def _refuse_listed_twice(path: Path, qid: str, numbers: np.ndarray, values: np.ndarray,
                         unknown: list[str], rank_only: bool, doc_ids: list[str]) -> None:
    """What :func:`read_trec_run` refuses across lines: a document (or an MS MARCO rank) given
    twice for one query."""
    known = numbers[numbers >= 0]
    if len(np.unique(known)) < len(known) or len(set(unknown)) < len(unknown):
        values_seen, counts = np.unique(known, return_counts=True)
        twice = [doc_ids[n] for n in values_seen[counts > 1].tolist()] or \
            [d for d in unknown if unknown.count(d) > 1]
        raise RunFormatError(f"{path}: document {twice[0]!r} is listed twice for query {qid!r}")
    if rank_only and len(np.unique(values)) < len(values):
        values_seen, counts = np.unique(values, return_counts=True)
        raise RunFormatError(f"{path}: rank {round(1 / values_seen[counts > 1][0])} is given "
                             f"twice for query {qid!r}: a run ranks each document once (a qrels "
                             "file of query, document and relevance has three columns too)")


MINING_PART = 10_000  # queries mined at a time: a part's run is held, never the whole mining


def _fill_candidates(builder: CandidateBuilder, config: DataConfig, collection: BeirCollection,
                     queries: dict[str, str], workdir: Path, reuse_mined: bool,
                     progress: bool) -> None:
    """The candidates from the mined run kept in ``workdir`` (``reuse_mined``), the recipe's own
    run (copied there), or a new mining written there part by part."""
    mined = workdir / NEGATIVES_RUN
    negatives = config.negatives
    if reuse_mined and mined.is_file():
        builder.read(mined)
        return
    if negatives.source == "run":
        builder.read(Path(negatives.run))
        with atomic_path(mined) as tmp:  # provenance, and what a resumed training reads
            shutil.copyfile(negatives.run, tmp)
        return
    tag = f"negatives-{negatives.source}"
    with atomic_path(mined) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for run in _mined_parts(config, collection, queries, workdir, progress):
            builder.add_run(run, mined)
            out.writelines(trec_run_lines(run, tag))
    builder.finish(mined)


def _mined_parts(config: DataConfig, collection: BeirCollection, queries: dict[str, str],
                 workdir: Path, progress: bool) -> Iterator[Run]:
    """The run hard negatives are drawn from (``depth`` hits per query), a part at a time."""
    negatives = config.negatives
    if negatives.source == "bm25":
        searcher = Bm25Searcher(_bm25_index(collection))
        qids = list(queries)
        with tqdm(total=len(qids), desc="bm25 negatives", unit="q", disable=not progress) as bar:
            for start in range(0, len(qids), MINING_PART):
                part = {q: queries[q] for q in qids[start:start + MINING_PART]}
                yield searcher.search(part, hits=negatives.depth, threads=usable_cores(),
                                      progress=False)
                bar.update(len(part))
        return

    # imported here: training from BM25 or a run needs no Faiss (a bare GPU node has none)
    from pyserini_moe.search.mining import retrieve  # noqa: PLC0415

    yield retrieve(encoder=negatives.model, corpus=str(collection.root), topics=queries,
                   kind=negatives.kind, hits=negatives.depth, workdir=workdir / "mining")


def _bm25_index(collection: BeirCollection) -> Path:
    """The collection's cached BM25 index, built on first use."""
    index = bm25_index_dir(collection)
    if not index.is_dir():
        try:
            build_bm25_index(str(collection.root), index)
        except FileExistsError:
            # Another training (a second queue) built the shared cache meanwhile; builds are
            # renamed into place whole, so a folder there is a complete index.
            if not index.is_dir():
                raise
    return index


def bm25_index_dir(collection: BeirCollection) -> Path:
    """Cached BM25 index of a collection, shared by every recipe trained on it; keyed by the
    collection's folder so two collections with the same folder name do not collide, and by its
    corpus file's size and modification time so an edited corpus is indexed again (its old
    index once mined negatives from the old text)."""
    stat = collection.corpus_path.stat()
    key = f"{collection.root.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return cache_root() / "bm25-indexes" / f"{collection.name}-{digest}"
