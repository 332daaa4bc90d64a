"""The bench's corpora: slices of a collection, and pools of collections extended with
word-shuffled copies (scaling points larger than the local data)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from pyserini_moe.data import BeirCollection
from pyserini_moe.io import atomic_path


def subset(corpus: str, n: int, out: Path) -> Path:
    """A BEIR-layout copy of ``corpus`` with its first ``n`` documents (queries, qrels kept)."""
    return pooled_corpus([corpus], n, out, copies=False)


def pooled_corpus(pool: list[str], n: int, out: Path, copies: bool = True) -> Path:
    """A BEIR-layout corpus of (up to) ``n`` documents: those of the ``pool`` collections one
    after the other (ids after the first collection's prefixed with its name), then, once the
    pool runs out and ``copies`` allows, copies whose words are shuffled (seeded): a copy costs
    what its original costs to encode, index and store, which is all a scaling point needs.
    Queries and qrels are the first collection's."""

    if out.exists():
        return out
    collections = [BeirCollection.load(name) for name in pool]

    def originals():
        for i, collection in enumerate(collections):
            prefix = f"{Path(pool[i]).name}:" if i else ""
            for doc in collection.corpus():
                yield prefix + doc.id, doc.title, doc.text

    def documents():
        seen = []
        for doc in originals():
            seen.append(doc)
            yield doc
        for copy in itertools.count(1) if copies and seen else ():  # the caller stops at n
            for doc_id, title, text in seen:
                words = f"{title} {text}".split()
                random.Random(f"{copy}:{doc_id}").shuffle(words)
                yield f"{doc_id}~{copy}", "", " ".join(words)

    with atomic_path(out, directory=True) as tmp:
        (tmp / "qrels").mkdir(parents=True)
        with open(tmp / "corpus.jsonl", "w") as f:
            for _, (doc_id, title, text) in zip(range(n), documents()):
                f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
        first = collections[0]
        (tmp / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                   for q, t in first.queries().items()))
        for split in first.splits():
            (tmp / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
                f"{q}\t{d}\t{r}\n" for q, judged in first.qrels(split).items()
                for d, r in judged.items()))
    return out


def num_docs(corpus: str) -> int:

    return BeirCollection.load(corpus).num_docs()
