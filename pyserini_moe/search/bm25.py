"""BM25 through Pyserini's ``LuceneSearcher``."""

from __future__ import annotations

import os
from pathlib import Path

from pyserini_moe import _java
from pyserini_moe.index.meta import check_kind
from pyserini_moe.runs import Run
from pyserini_moe.search.base import batched_search, open_lucene


class Bm25Searcher:
    """Batched BM25 over a Lucene index (ours, any Pyserini index folder, or a prebuilt name)."""

    def __init__(self, index: str | os.PathLike, k1: float = 0.9, b: float = 0.4) -> None:
        _java.bootstrap()
        from pyserini.search.lucene import LuceneSearcher  # noqa: PLC0415

        if Path(index).is_dir():
            check_kind(index, "bm25")
            self.searcher = open_lucene(lambda: LuceneSearcher(str(index)), Path(index))
        else:
            try:
                self.searcher = LuceneSearcher.from_prebuilt_index(str(index))
            except Exception as e:  # noqa: BLE001 - pyserini raises bare ValueError/IOError here
                raise FileNotFoundError(
                    f"{index} is neither an index folder nor a Pyserini prebuilt index that could "
                    f"be loaded ({e})") from None
            if self.searcher is None:
                raise FileNotFoundError(f"{index} is neither an index folder nor a prebuilt index")
        self.searcher.set_bm25(k1, b)

    def search(self, topics: dict[str, str], hits: int = 1000, threads: int = 1,
               batch_size: int = 64, progress: bool = True) -> Run:
        """Search every topic; returns ``{qid: {docid: score}}`` in input order."""
        return batched_search(
            topics, lambda texts, qids: self.searcher.batch_search(texts, qids, k=hits, threads=threads),
            batch_size, "bm25", progress)

