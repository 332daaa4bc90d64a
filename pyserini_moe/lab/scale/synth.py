"""A synthetic MS MARCO passage collection at full size, in BEIR's layout.

What the training side of a paper file reads is BEIR's ``msmarco/`` folder: ``corpus.jsonl``
(8,841,823 passages), ``queries.jsonl`` (509,962 queries), ``qrels/{train,dev,test}.tsv``. Sizes,
not meanings, decide whether a stage fits a machine, so this writes a folder of that shape:

* counts: :data:`MSMARCO` (train, dev-small and TREC DL 2019 as BEIR's splits);
* passage lengths ~56 words, query lengths ~6 (gamma-distributed, clipped);
* words drawn from a Zipf vocabulary whose head is Lucene's English stop words, so BM25 drops the
  most frequent words as it does in English and its posting lists have English's shape;
* each training query has one judged passage (about 6% have two, MS MARCO's 532,761 judgments
  over 502,939 queries) and is written from that passage's words, so BM25 finds it.

Seeded and reproducible; written once into ``<root>/msmarco`` (renamed into place whole) and
reused while ``shape.json`` matches. ``fraction`` scales every count for toy runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pyserini_moe.io import atomic_path

# Lucene's English stop words (what Pyserini's default analyzer drops), the vocabulary's head.
STOP_WORDS = ("the a and of to in is for that on with as are it be by this was or at an from "
              "not but if into no such their then there these they will").split()
VOCABULARY = 1_000_000
ZIPF_EXPONENT = 1.0
CHUNK = 100_000  # passages generated and written at a time


@dataclasses.dataclass(frozen=True)
class Shape:
    """Counts and mean lengths of one collection."""

    passages: int
    train_queries: int
    train_second_positives: int  # training queries with a second judged passage
    dev_queries: int
    dev_judgments: int
    test_queries: int
    test_judgments: int
    passage_words: float
    query_words: float

    def scaled(self, fraction: float) -> Shape:
        """Every count times ``fraction`` (at least one, and the extra judgments within their
        queries), lengths kept."""
        def n(value: int) -> int:
            return max(1, round(value * fraction))
        train, dev, test = n(self.train_queries), n(self.dev_queries), n(self.test_queries)
        return dataclasses.replace(
            self, passages=max(n(self.passages), train + dev + test), train_queries=train,
            train_second_positives=min(train, n(self.train_second_positives)),
            dev_queries=dev, dev_judgments=max(dev, n(self.dev_judgments)),
            test_queries=test, test_judgments=max(test, n(self.test_judgments)))


# MS MARCO passage as BEIR ships it: 502,939 train queries with 532,761 judgments, dev-small's
# 6,980 queries with 7,437, TREC DL 2019's 43 with 9,260 graded judgments; 509,962 queries in all.
MSMARCO = Shape(passages=8_841_823, train_queries=502_939, train_second_positives=29_822,
                dev_queries=6_980, dev_judgments=7_437, test_queries=43, test_judgments=9_260,
                passage_words=56.0, query_words=6.0)


def vocabulary(rng: np.random.Generator, size: int = VOCABULARY) -> np.ndarray:
    """``size`` distinct lowercase words, the stop words first (the most frequent ranks)."""
    words = list(STOP_WORDS)
    seen = set(words)
    while len(words) < size:
        lengths = rng.integers(3, 11, size=size)
        letters = rng.integers(0, 26, size=(size, 10), dtype=np.uint8) + ord("a")
        for row, length in zip(letters, lengths):
            word = row[:length].tobytes().decode()
            if word not in seen:
                seen.add(word)
                words.append(word)
                if len(words) == size:
                    break
    return np.array(words, dtype=object)


def _zipf_cdf(size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1) ** ZIPF_EXPONENT
    return np.cumsum(weights) / weights.sum()


def _lengths(rng: np.random.Generator, n: int, mean: float, low: int, high: int) -> np.ndarray:
    """Gamma-distributed word counts with ``mean`` (shape 4: a right-skewed spread as real
    passages and queries have), clipped to [low, high]."""
    return np.clip(np.rint(rng.gamma(4.0, mean / 4.0, size=n)), low, high).astype(np.int64)


@dataclasses.dataclass
class _Queries:
    """Judged passages (by index) of each split and the words their queries are written from."""

    judged: dict[str, np.ndarray]  # split -> passage index per query (first judgment)
    words: dict[int, np.ndarray]  # passage index -> the passage's word ids (judged ones only)


def generate(root: Path, fraction: float = 1.0, seed: int = 0, progress: bool = True) -> Path:
    """Write (or reuse) ``root/msmarco`` at ``MSMARCO.scaled(fraction)``; returns the folder."""
    shape = MSMARCO.scaled(fraction)
    folder = Path(root) / "msmarco"
    stamp = {"shape": dataclasses.asdict(shape), "seed": seed, "vocabulary": VOCABULARY}
    marker = folder / "shape.json"
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return folder
    if folder.exists():
        if not marker.is_file():
            raise FileExistsError(f"{folder} exists and is not a synthetic collection (no "
                                  "shape.json): name another root")
        shutil.rmtree(folder)  # another shape or seed: written again
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng)
    cdf = _zipf_cdf(len(vocab))
    counts = {"train": shape.train_queries, "dev": shape.dev_queries, "test": shape.test_queries}
    chosen = rng.choice(shape.passages, size=sum(counts.values()), replace=False)
    judged, start = {}, 0
    for split, count in counts.items():
        judged[split] = chosen[start:start + count]
        start += count
    queries = _Queries(judged, {})
    wanted = set(chosen.tolist())
    with atomic_path(folder, directory=True) as tmp:
        with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as out:
            for first in range(0, shape.passages, CHUNK):
                out.writelines(_passages(rng, vocab, cdf, first,
                                         min(CHUNK, shape.passages - first), shape,
                                         wanted, queries.words))
                if progress:
                    done = min(first + CHUNK, shape.passages)
                    print(f"\r{done:,} / {shape.passages:,} passages", end="", file=sys.stderr)
        if progress:
            print(file=sys.stderr)
        _write_queries_and_qrels(tmp, rng, vocab, cdf, shape, queries)
        (tmp / "shape.json").write_text(json.dumps(stamp, indent=1) + "\n")
    return folder


def _passages(rng: np.random.Generator, vocab: np.ndarray, cdf: np.ndarray, first: int,
              count: int, shape: Shape, wanted: set[int],
              judged_words: dict[int, np.ndarray]) -> Iterator[str]:
    lengths = _lengths(rng, count, shape.passage_words, 3, 250)
    ids = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum()))), len(vocab) - 1)
    ends = np.cumsum(lengths)
    words = vocab[ids]
    start = 0
    for offset, end in enumerate(ends.tolist()):
        index = first + offset
        if index in wanted:
            judged_words[index] = ids[start:end].copy()
        yield f'{{"_id": "{index}", "title": "", "text": "{" ".join(words[start:end])}"}}\n'
        start = end


def _query_text(rng: np.random.Generator, vocab: np.ndarray, cdf: np.ndarray,
                passage: np.ndarray, length: int) -> str:
    """Mostly content words of the judged passage, the rest Zipf draws (as real queries share
    some but not all of their words with their answer)."""
    content = passage[passage >= len(STOP_WORDS)]
    own = min(len(content), max(1, round(0.7 * length)))
    picked = list(rng.choice(content, size=own, replace=False)) if own else []
    extra = np.searchsorted(cdf, rng.random(length - own))
    return " ".join(vocab[np.concatenate([np.array(picked, dtype=np.int64), extra])])


def _write_queries_and_qrels(folder: Path, rng: np.random.Generator, vocab: np.ndarray,
                             cdf: np.ndarray, shape: Shape, queries: _Queries) -> None:
    """queries.jsonl (train, dev, test ids in one numbering, as BEIR's msmarco) and one qrels
    file per split; extra judgments go to random passages (a second positive for train and dev,
    graded pool judgments for test)."""
    (folder / "qrels").mkdir()
    extra = {"train": shape.train_second_positives,
             "dev": shape.dev_judgments - shape.dev_queries,
             "test": shape.test_judgments - shape.test_queries}
    qid = 0
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as out:
        for split, passages in queries.judged.items():
            lengths = _lengths(rng, len(passages), shape.query_words, 2, 30)
            qids = list(range(qid, qid + len(passages)))
            qid += len(passages)
            for q, passage, length in zip(qids, passages.tolist(), lengths.tolist()):
                text = _query_text(rng, vocab, cdf, queries.words[passage], length)
                out.write(f'{{"_id": "{q}", "text": "{text}"}}\n')
            lines = [f"{q}\t{p}\t{2 if split == 'test' else 1}"
                     for q, p in zip(qids, passages.tolist())]
            owners = rng.choice(len(qids), size=extra[split], replace=extra[split] > len(qids))
            others = rng.integers(0, shape.passages, size=extra[split])
            grades = rng.integers(0, 4, size=extra[split]) if split == "test" else None
            for i, (owner, doc) in enumerate(zip(owners.tolist(), others.tolist())):
                grade = int(grades[i]) if grades is not None else 1
                lines.append(f"{qids[owner]}\t{doc}\t{grade}")
            with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as qrels:
                qrels.write("query-id\tcorpus-id\tscore\n")
                qrels.writelines(line + "\n" for line in lines)


PSEUDO_QUERIES_PER_PASSAGE = 5  # the CoT-MoTE paper's docT5query count (cotmote-paper.yaml)


def write_pseudo_queries(target: Path, passages: int,
                         per_passage: int = PSEUDO_QUERIES_PER_PASSAGE, seed: int = 0) -> Path:
    """docT5query's shape for the first ``passages`` passages: ``docid<TAB>query`` lines,
    ``per_passage`` a passage, queries of ~6 Zipf words (what the pre-training reads; their
    words need not come from the passage). Written once, renamed into place."""
    if target.is_file():
        return target
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng)
    cdf = _zipf_cdf(len(vocab))
    with atomic_path(target) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for first in range(0, passages, CHUNK):
            count = min(CHUNK, passages - first) * per_passage
            lengths = _lengths(rng, count, MSMARCO.query_words, 2, 30)
            words = vocab[np.searchsorted(cdf, rng.random(int(lengths.sum())))]
            ends = np.cumsum(lengths).tolist()
            start = 0
            for i, end in enumerate(ends):
                out.write(f"{first + i // per_passage}\t{' '.join(words[start:end])}\n")
                start = end
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.lab.scale.synth",
        description="Write a synthetic MS MARCO passage collection of full size (or --fraction "
                    "of it) in BEIR's layout into ROOT/msmarco; reused while its shape matches.")
    parser.add_argument("--root", required=True, type=Path, help="scratch folder")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="scale every count (default 1: 8,841,823 passages)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error("--fraction must be in (0, 1]")
    print(generate(args.root, args.fraction, args.seed, progress=not args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
