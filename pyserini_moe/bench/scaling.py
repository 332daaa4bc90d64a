"""How each retriever's cost grows with the corpus, and what that projects for MS MARCO."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pyserini_moe.bench.corpora import num_docs, pooled_corpus, subset
from pyserini_moe.bench.processes import Indexes, folder_mb
from pyserini_moe.bench.report import Report
from pyserini_moe.bench.search import open_index, retriever_builds, single_query_times

# MS MARCO passage's size, the paper-scale files' corpus; and their disk estimate where they make
# one (regressions/came-paper.yaml: every token vector in float16).
MSMARCO_PASSAGES = 8_841_823
PAPER_FILES_ESTIMATE = {"multivector-compressed": "float16 multivector: ~170 GB "
                                                  "(regressions/came-paper.yaml)"}
SCALED = ("bm25", "dense", "impact", "multivector-compressed")


def bench_scaling(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                  args: Any) -> None:
    """Index time, peak memory, size and single-query latency of each retriever against corpus
    size, a power law fitted to each (log-log least squares) and its projection to MS MARCO.

    The corpora are the first n documents of ``--corpus`` then of ``--scaling-pool`` (perturbed
    copies past the pool's end), or ``--corpus`` whole (``all``); the 1k point is the latency
    section's corpus and ``all`` the onnx section's, so their indexes are reused with their
    measurements."""
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415

    builds = retriever_builds(args)
    first_size = num_docs(args.corpus)
    queries = dict(list(load_topics(args.topics).items())[:args.latency_queries])
    points: dict[str, list[tuple[int, dict[str, float]]]] = {name: [] for name in SCALED}
    for n in args.scaling_sizes:
        if n is None:  # "all": --corpus itself, so the onnx section's dense index is reused
            corpus, n = args.corpus, first_size
        elif n <= first_size:
            corpus = subset(args.corpus, n, work / f"corpus-{n}")
        else:
            corpus = pooled_corpus([args.corpus, *args.scaling_pool], n, work / f"pool-{n}")
        docs = num_docs(str(corpus))
        for name in SCALED:
            kinds, model, extra = builds[name]
            [index], build = indexes.build(kinds, str(corpus), model and paths[model],
                                           [f"scale-{n}-{name}"], *extra)
            searcher = open_index(name, index, args.device)
            times = single_query_times(
                lambda t, b, s=searcher: s.search(t, hits=100, batch_size=b, progress=False),
                queries)
            row = {"index_s": build.seconds, "index_mb": folder_mb(index),
                   "build_peak_mb": build.peak_mb, "p50_ms": statistics.median(times) * 1000}
            points[name].append((docs, row))
            report.add("scaling", retriever=name, docs=docs,
                       **{k: float(f"{v:.3g}") for k, v in row.items()})
    for name, rows in points.items():
        if len({docs for docs, _ in rows}) < 2:
            continue
        fit = {"retriever": name}
        for metric, unit, scale in (("index_s", "h", 1 / 3600), ("index_mb", "GB", 1 / 1024),
                                    ("p50_ms", "ms", 1.0)):
            exponent, projected = power_law(rows, metric, MSMARCO_PASSAGES)
            fit[f"{metric}_exponent"] = round(exponent, 2)
            fit[f"msmarco_{metric.split('_')[0]}_{unit}"] = float(f"{projected * scale:.3g}")
        fit["paper_files_estimate"] = PAPER_FILES_ESTIMATE.get(name, "")
        report.add("scaling fit", **fit)


def scaling_size(text: str) -> int | None:
    """A ``--scaling-sizes`` value: a document count, or ``all`` (the whole ``--corpus``)."""
    if text == "all":
        return None
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def power_law(rows: list[tuple[int, dict[str, float]]], metric: str,
              at: int) -> tuple[float, float]:
    """(b, y(at)) of y = a n^b fitted to the points by least squares on logarithms, projected
    from the largest point (two or three points: a rough guide, not a model of the cost)."""
    import math  # noqa: PLC0415

    xs = [math.log(docs) for docs, _ in rows]
    ys = [math.log(max(row[metric], 1e-9)) for _, row in rows]
    exponent = statistics.linear_regression(xs, ys).slope
    largest, row = max(rows, key=lambda point: point[0])
    return exponent, row[metric] * (at / largest) ** exponent
