"""A synthetic MS MARCO passage collection at full size, in BEIR's layout (and DPR's Wikipedia
and retriever files, :func:`generate_dpr`).

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


def _written(folder: Path, stamp: dict) -> bool:
    """Whether ``folder`` already holds the data ``stamp`` describes (its ``shape.json``); a
    folder of other synthetic data is removed to be written again, any other folder refused."""
    marker = folder / "shape.json"
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return True
    if folder.exists():
        if not marker.is_file():
            raise FileExistsError(f"{folder} exists and is not synthetic data (no shape.json): "
                                  "name another root")
        shutil.rmtree(folder)  # another shape or seed: written again
    return False


def generate(root: Path, fraction: float = 1.0, seed: int = 0, progress: bool = True) -> Path:
    """Write (or reuse) ``root/msmarco`` at ``MSMARCO.scaled(fraction)``; returns the folder."""
    shape = MSMARCO.scaled(fraction)
    folder = Path(root) / "msmarco"
    stamp = {"shape": dataclasses.asdict(shape), "seed": seed, "vocabulary": VOCABULARY}
    if _written(folder, stamp):
        return folder
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


# ------------------------------------------------------------------- DPR's Wikipedia and QA files
@dataclasses.dataclass(frozen=True)
class DprShape:
    """What taser-paper.yaml's data steps read from DPR: ``psgs_w100.tsv`` and the retriever
    files (``biencoder-<set>-{train,dev}.json``), questions per set and passages per question."""

    passages: int
    train: tuple[tuple[str, int], ...]  # (set, questions) as the file names spell the set
    dev: tuple[tuple[str, int], ...]
    positives: float  # mean positive_ctxs a question (DPR: "multiple", answer-string matches)
    negatives: int  # negative_ctxs: random passages
    hard_negatives: int  # hard_negative_ctxs: from BM25's top 30-50
    passage_words: int
    question_words: float

    def scaled(self, fraction: float) -> DprShape:
        """Passages and every set's questions times ``fraction`` (at least one)."""
        def n(value: int) -> int:
            return max(1, round(value * fraction))
        return dataclasses.replace(self, passages=n(self.passages),
                                   train=tuple((s, n(q)) for s, q in self.train),
                                   dev=tuple((s, n(q)) for s, q in self.dev))


# Questions: DPR's table 1 after its filtering (biencoder-nq-dev.json holds 6,515 of NQ dev's
# 8,757); 50 random and 30 BM25 negatives a question as DPR's maintainers describe the files
# (facebookresearch/DPR issues 42, 91); 3 positives a question is this check's assumption.
DPR = DprShape(passages=21_015_324,
               train=(("nq", 58_880), ("trivia", 60_413), ("webquestions", 2_474),
                      ("curatedtrec", 1_125), ("squad1", 70_096)),
               dev=(("nq", 6_515), ("trivia", 8_837)),
               positives=3.0, negatives=50, hard_negatives=30, passage_words=100,
               question_words=9.0)
TEXT_POOL = 200_000  # distinct passage texts drawn from (far apart beyond gzip's 32 KB window)


def _text_pool(rng: np.random.Generator, vocab: np.ndarray, cdf: np.ndarray, count: int,
               words: int) -> list[str]:
    """``count`` texts of ``words`` Zipf words each (drawing a passage's text from a pool keeps
    21M passages' generation to minutes; sizes, not meanings, are what is measured)."""
    ids = np.minimum(np.searchsorted(cdf, rng.random(count * words)), len(vocab) - 1)
    flat = vocab[ids]
    return [" ".join(flat[i * words:(i + 1) * words]) for i in range(count)]


def generate_dpr(root: Path, passages: int, ids_within: int, seed: int = 0,
                 shape: DprShape = DPR) -> Path:
    """Write (or reuse) ``root/dpr-source``: ``psgs_w100.tsv`` with ``passages`` rows (DPR's
    header and quoting) and every retriever file of ``shape`` at its full question count, their
    passages numbered within the first ``ids_within`` rows (so a slice of the corpus holds every
    judged passage). TriviaQA's files name a passage ``psg_id``, the others ``passage_id``."""
    folder = Path(root) / "dpr-source"
    stamp = {"shape": dataclasses.asdict(shape), "passages": passages, "ids_within": ids_within,
             "seed": seed}
    if _written(folder, stamp):
        return folder
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng)
    cdf = _zipf_cdf(len(vocab))
    texts = _text_pool(rng, vocab, cdf, min(TEXT_POOL, passages), shape.passage_words)
    titles = _text_pool(rng, vocab, cdf, min(TEXT_POOL, passages) // 4 + 1, 2)
    with atomic_path(folder, directory=True) as tmp:
        with open(tmp / "psgs_w100.tsv", "w", encoding="utf-8") as out:
            out.write("id\ttext\ttitle\n")
            for first in range(0, passages, CHUNK):
                n = min(CHUNK, passages - first)
                text_at = rng.integers(0, len(texts), size=n).tolist()
                title_at = rng.integers(0, len(titles), size=n).tolist()
                out.writelines(f'{first + i + 1}\t"{texts[t]}"\t{titles[u]}\n'
                               for i, (t, u) in enumerate(zip(text_at, title_at)))
        for split, sets in (("train", shape.train), ("dev", shape.dev)):
            for name, questions in sets:
                _write_biencoder(tmp / f"biencoder-{name}-{split}.json", rng, vocab, cdf, shape,
                                 questions, ids_within, texts, titles,
                                 "psg_id" if name == "trivia" else "passage_id")
        (tmp / "shape.json").write_text(json.dumps(stamp, indent=1) + "\n")
    return folder


def _write_biencoder(target: Path, rng: np.random.Generator, vocab: np.ndarray, cdf: np.ndarray,
                     shape: DprShape, questions: int, ids_within: int, texts: list[str],
                     titles: list[str], id_key: str) -> None:
    """One retriever file: a JSON array of questions with their answers and contexts."""
    def ctxs(n: int, score: float) -> list[dict]:
        ids = rng.integers(1, ids_within + 1, size=n).tolist()
        return [{"title": titles[i % len(titles)], "text": texts[i % len(texts)],
                 "score": score, "title_score": 0, id_key: str(i)} for i in ids]

    lengths = _lengths(rng, questions, shape.question_words, 3, 30)
    positives = np.maximum(1, rng.poisson(shape.positives, size=questions)).tolist()
    with open(target, "w", encoding="utf-8") as out:
        out.write("[\n")
        for q, (length, n) in enumerate(zip(lengths.tolist(), positives)):
            words = vocab[np.searchsorted(cdf, rng.random(length))]
            example = {"dataset": target.stem, "question": " ".join(words),
                       "answers": [str(words[-1])], "positive_ctxs": ctxs(n, 1000.0),
                       "negative_ctxs": ctxs(shape.negatives, 0.0),
                       "hard_negative_ctxs": ctxs(shape.hard_negatives, 10.0)}
            out.write(("    " if q == 0 else ",\n    ") + json.dumps(example, indent=None))
        out.write("\n]\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.lab.scale.synth",
        description="Write a synthetic MS MARCO passage collection of full size (or --fraction "
                    "of it) in BEIR's layout into ROOT/msmarco; reused while its shape matches.")
    parser.add_argument("--root", required=True, type=Path, help="scratch folder")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="scale every count (default 1: 8,841,823 passages)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dpr", nargs=2, type=int, metavar=("PASSAGES", "IDS_WITHIN"),
                        help="write DPR's psgs_w100.tsv of PASSAGES rows and its retriever files "
                             "(questions times --fraction) into ROOT/dpr-source instead, their "
                             "passages among the first IDS_WITHIN rows")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error("--fraction must be in (0, 1]")
    if args.dpr:
        print(generate_dpr(args.root, *args.dpr, args.seed, DPR.scaled(args.fraction)))
    else:
        print(generate(args.root, args.fraction, args.seed, progress=not args.quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
