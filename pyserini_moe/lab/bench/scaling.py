"""How each retriever's cost grows with the corpus, and what that projects for MS MARCO."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.data import load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.lab.bench.corpora import num_docs, pooled_corpus, subset
from pyserini_moe.lab.bench.processes import Indexes, folder_mb
from pyserini_moe.lab.bench.report import Report, cpu_description

# MS MARCO passage's size, the paper-scale files' corpus; and their disk estimate where they make
# one (regressions/came-paper.yaml: every token vector in float16).
MSMARCO_PASSAGES = 8_841_823
PAPER_FILES_ESTIMATE = {"multivector-compressed": "float16 multivector: ~170 GB "
                                                  "(regressions/came-paper.yaml)"}
SCALED = ("bm25", "dense", "impact", "multivector-compressed")
METRICS = ("index_s", "index_mb", "build_peak_mb", "p50_ms")
# An earlier run's CPU and its scaling points: (retriever, documents, {metric: value}).
Earlier = tuple[str, list[tuple[str, int, dict[str, float]]]]


def bench_scaling(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                  args: Any, earlier: dict[Path, Earlier],
                  on_point: Callable[[], object] = lambda: None) -> None:
    """Index time, peak memory, size, peak disk (index and scratch) and single-query latency of
    each retriever against corpus size, a fixed plus per-document cost fitted to each but the
    disk and its projection to MS MARCO.

    The corpora are the first n documents of ``--corpus`` then of ``--scaling-pool`` (perturbed
    copies past the pool's end), or ``--corpus`` whole (``all``); the 1k point is the latency
    section's corpus and ``all`` the onnx section's, so their indexes are reused with their
    measurements. ``earlier`` holds the runs of ``--scaling-from`` by file (:func:`earlier_scaling`):
    their rows join the fit where this run did not measure their size, so the largest points can
    be run in a sitting of their own. ``on_point`` is called after each point (the command writes its
    files then, so a long sitting cut short keeps what it measured)."""

    # imported here: the search layer needs Faiss, which a GPU node that runs only the pipeline
    # section may lack (cli.bench imports this module for its flags)
    from pyserini_moe.lab.bench.search import open_index, retriever_builds, single_query_times  # noqa: PLC0415

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
        for name in args.scaling_retrievers:
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
            # the disk a build filled at its peak (index and scratch): reported, not fitted
            report.add("scaling", retriever=name, docs=docs,
                       **{k: float(f"{v:.3g}") for k, v in row.items()},
                       build_peak_disk_mb=float(f"{build.peak_disk_mb:.3g}"))
            on_point()
    other_cpus = join_earlier(report, points, earlier)
    for name, rows in points.items():
        if len({docs for docs, _ in rows}) >= 2:
            fit = scaling_fit(name, rows)
            if other_cpus:
                fit["note"] = "; ".join(filter(None, [fit["note"], "points from another CPU: "
                                                      + ", ".join(sorted(other_cpus))]))
            report.add("scaling fit", **fit)


def join_earlier(report: Report, points: dict[str, list[tuple[int, dict[str, float]]]],
                 earlier: dict[Path, Earlier]) -> set[str]:
    """Add the earlier runs' points at sizes ``points`` does not have yet (this run's measurement
    wins; the first file wins among files) to ``points`` and to the report's scaling table, each
    row naming its file. Returns the CPUs of those points that are not this machine's."""
    here, other_cpus = cpu_description(), set()
    for path, (cpu, rows) in earlier.items():
        for name, docs, row in rows:
            if name in points and docs not in {n for n, _ in points[name]}:
                points[name].append((docs, row))
                report.add("scaling", retriever=name, docs=docs, **row, measured_in=str(path))
                other_cpus |= {cpu} - {here}
    return other_cpus


def earlier_scaling(path: Path) -> Earlier:
    """The CPU and the scaling rows (retriever, documents, measurements) of an earlier run's
    ``bench.json``; rows an earlier run itself took from a file are left out (that file can be
    named instead), so a point is never counted twice."""

    try:
        sections = json.loads(Path(path).read_text())["sections"]
        rows = [(row["retriever"], int(row["docs"]), {k: float(row[k]) for k in METRICS})
                for row in sections.get("scaling", []) if "measured_in" not in row]
        cpu = next((row.get("cpu", "unknown") for row in sections.get("run", [])), "unknown")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"--scaling-from {path}: not a readable bench.json ({exc!r})") from None
    if not rows:
        raise UserError(f"--scaling-from {path}: the file has no scaling rows")
    return cpu, rows


def scaling_fit(name: str, rows: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    """One report row: each metric's fixed and per-document cost and their MS MARCO projection.
    A latency that does not grow across the measured sizes (its per-document cost is below the
    noise of a few thousand documents) is flagged: an exhaustive search does grow with the
    corpus, so its projection is a floor, not an estimate."""
    fit: dict[str, Any] = {"retriever": name, "points": len(rows)}
    for metric, unit, scale in (("index_s", "h", 1 / 3600), ("index_mb", "GB", 1 / 1024),
                                ("p50_ms", "ms", 1.0)):
        fixed, per_doc = affine(rows, metric)
        fit[f"{metric}_fixed"] = float(f"{fixed:.3g}")
        fit[f"{metric}_per_1k_docs"] = float(f"{per_doc * 1000:.3g}")
        projected = (fixed + per_doc * MSMARCO_PASSAGES) * scale
        fit[f"msmarco_{metric.split('_')[0]}_{unit}"] = float(f"{projected:.3g}")
    fit["note"] = ("latency flat at these sizes: its projection is a floor"
                   if fit["p50_ms_per_1k_docs"] == 0 else "")
    fit["paper_files_estimate"] = PAPER_FILES_ESTIMATE.get(name, "")
    return fit


def scaling_size(text: str) -> int | None:
    """A ``--scaling-sizes`` value: a document count, or ``all`` (the whole ``--corpus``)."""
    if text == "all":
        return None
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def affine(rows: list[tuple[int, dict[str, float]]], metric: str) -> tuple[float, float]:
    """(fixed, per_document) of y = fixed + per_document * n, least squares over the points.

    Not a power law: with two or three points a log-log fit folds the fixed cost of a run (loading
    a model, starting the JVM) into its exponent and projects a sublinear growth that the
    per-document work does not have (dense index time: exponent 0.88 at 1k and 5k, 18.5 h for
    MS MARCO, where the per-document rate gives ~42 h). A per-document cost below zero is noise
    around a flat cost: it is clamped to zero and the fixed cost is then the mean."""
    xs = [float(docs) for docs, _ in rows]
    ys = [row[metric] for _, row in rows]
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope < 0:
        return statistics.fmean(ys), 0.0
    return intercept, slope
