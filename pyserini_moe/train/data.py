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
and on-the-fly sampling need; fine for BEIR-sized corpora.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from pyserini_moe.data.beir import BeirCollection, cache_root
from pyserini_moe.errors import UserError
from pyserini_moe.index.lucene import build_bm25_index
from pyserini_moe.runs import Run, ranked, read_trec_run, write_trec_run
from pyserini_moe.search.bm25 import Bm25Searcher
from pyserini_moe.train.config import DataConfig

log = logging.getLogger(__name__)

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
    candidates: dict[str, list[str]]  # qid -> ranked hard-negative candidates (no positives)
    num_negatives: int
    seed: int  # the training seed: batch order and negatives of every epoch
    num_random_filled: int = 0  # queries whose candidates were topped up with random passages
    sample_positives: bool = False  # one pair per query per epoch, drawn by the epoch's seed
    split_seed: int | None = None  # the held-out split's seed (default ``seed``): it also fixes
    # the validation batches, so every training seed of a recipe validates on the same batches

    def __post_init__(self) -> None:
        self._doc_ids = sorted(self.passages)

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
        return len(_pack(self._epoch_pairs(self.train_pairs, epoch), self._rng(epoch), batch_size))

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
        return [[self._example(qid, pos, batch, rng) for qid, pos in batch]
                for batch in _pack(pairs, rng, batch_size)]

    def _example(self, qid: str, positive: str, batch: list[tuple[str, str]],
                 rng: random.Random) -> Example:
        excluded = set().union(*(self.positives[q] for q, _ in batch))
        pool = [d for d in self.candidates.get(qid, []) if d not in excluded]
        if len(pool) >= self.num_negatives:
            chosen = rng.sample(pool, self.num_negatives)
        else:
            chosen = pool + _random_docs(self._doc_ids, self.num_negatives - len(pool),
                                         excluded | set(pool), rng)
        return Example(self.queries[qid], self.passages[positive],
                       tuple(self.passages[d] for d in chosen))


def _pack(pairs: list[tuple[str, str]], rng: random.Random,
          batch_size: int) -> list[list[tuple[str, str]]]:
    """Shuffle, then fill batches in order, deferring a pair whose query or positive is already
    in the batch being filled (it goes into a later batch)."""
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
        pending = deferred + pending
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
    ordered = _judged_positives(qrels, passages, f"{collection.name}:{config.split}")
    positives = {qid: frozenset(docs) for qid, docs in ordered.items()}
    if not positives:
        raise UserError(f"{collection.name}:{config.split} has no positive judgments to train on")
    queries = {qid: text for qid, text in collection.queries().items() if qid in positives}
    train_qids, validation_qids = split_queries(list(positives), config.validation_fraction,
                                                config.seed)

    mined = Path(workdir) / NEGATIVES_RUN
    source = mined  # the file a problem with the candidates names: the user's run, if given
    if config.num_negatives == 0:  # in-batch negatives only: nothing to mine (BM25 over
        run: Run = {}  # MS MARCO's 500k training queries, for no negative drawn)
    elif reuse_mined and mined.is_file():
        run = read_trec_run(mined)
    else:
        run = mine_candidates(config, collection, queries, Path(workdir), progress)
        write_trec_run(run, mined, tag=f"negatives-{config.negatives.source}")
        if config.negatives.source == "run":
            source = Path(config.negatives.run)
    candidates, filled = _candidates(run, positives, passages, config, source)

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
                        sample_positives=config.positives == "sample", split_seed=config.seed)


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


def _candidates(run: Run, positives: dict[str, frozenset[str]], passages: dict[str, str],
                config: DataConfig, source: Path) -> tuple[dict[str, list[str]], int]:
    """Ranked candidates per query: ranks skip_top+1..depth of the run, positives removed."""
    negatives = config.negatives
    if config.num_negatives == 0:
        return {qid: [] for qid in positives}, 0
    if not any(qid in run for qid in positives):
        example = next(iter(positives))
        raise UserError(f"{source}: ranks none of the {len(positives)} training queries of "
                        f"{config.collection!r} (e.g. {example!r}): wrong run for this "
                        "collection or split?")
    candidates = {}
    filled = 0
    for qid in positives:
        hits = [doc for doc, _ in ranked(run.get(qid, {}))][negatives.skip_top:negatives.depth]
        unknown = [doc for doc in hits if doc not in passages]
        if unknown:
            raise UserError(f"{source}: query {qid!r} ranks document {unknown[0]!r}, which is not "
                            f"in collection {config.collection!r}: wrong run for this collection?")
        # never the query itself: in ArguAna / Quora a query is a corpus document too
        candidates[qid] = [doc for doc in hits if doc not in positives[qid] and doc != qid]
        filled += len(candidates[qid]) < config.num_negatives
    return candidates, filled


def mine_candidates(config: DataConfig, collection: BeirCollection, queries: dict[str, str],
                    workdir: Path, progress: bool = True) -> Run:
    """The run hard negatives are drawn from (``depth`` hits per query)."""
    negatives = config.negatives
    if negatives.source == "run":
        return read_trec_run(negatives.run)
    if negatives.source == "bm25":

        index = bm25_index_dir(collection)
        if not index.is_dir():
            try:
                build_bm25_index(str(collection.root), index)
            except FileExistsError:
                # Another training (a second queue) built the shared cache meanwhile; builds are
                # renamed into place whole, so a folder there is a complete index.
                if not index.is_dir():
                    raise
        return Bm25Searcher(index).search(queries, hits=negatives.depth, progress=progress)

    # imported here: training from BM25 or a run needs no Faiss (a bare GPU node has none)
    from pyserini_moe.search.mining import retrieve  # noqa: PLC0415

    return retrieve(encoder=negatives.model, corpus=str(collection.root), topics=queries,
                    kind=negatives.kind, hits=negatives.depth, workdir=workdir / "mining")


def bm25_index_dir(collection: BeirCollection) -> Path:
    """Cached BM25 index of a collection, shared by every recipe trained on it; keyed by the
    collection's folder so two collections with the same folder name do not collide, and by its
    corpus file's size and modification time so an edited corpus is indexed again (its old
    index once mined negatives from the old text)."""
    stat = collection.corpus_path.stat()
    key = f"{collection.root.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return cache_root() / "bm25-indexes" / f"{collection.name}-{digest}"
