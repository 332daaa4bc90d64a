"""The batching loop every searcher shares: topics in, ``{qid: {docid: score}}`` out."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tqdm import tqdm

from pyserini_moe.runs import Run

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
