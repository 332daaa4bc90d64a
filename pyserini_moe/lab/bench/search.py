"""Search: single-query latency and batched throughput of every retriever, multi-vector storage
and overlap with exact MaxSim, approximate indexes against exact ones."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from pyserini_moe.data import load_topics
from pyserini_moe.index import read_meta
from pyserini_moe.lab.bench.corpora import subset
from pyserini_moe.lab.bench.processes import Indexes, folder_mb, onnx_export
from pyserini_moe.lab.bench.report import Report, percentile
from pyserini_moe.search import SEARCHERS, ExpertFusionSearcher, SearchSettings, hybrid_fusion, open_any


def bench_latency(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                  args: Any) -> None:
    """Single-query latency and batched throughput of every retriever on a corpus slice."""

    corpus = str(subset(args.corpus, args.latency_docs, work / f"corpus-{args.latency_docs}"))
    came = ("lexical", "local", "global")
    # The impact model through its fastest backend (int8 changes its vectors: another index);
    # only this section builds it, so it is not in retriever_builds.
    paths = {**paths, "cotmote-int8": onnx_export(paths["cotmote"], work / "cotmote-onnx-int8",
                                                  int8=True)}
    builds = {**retriever_builds(args), "impact-int8": (("impact",), "cotmote-int8", ())}
    built: dict[str, Path] = {}
    for name, (kinds, model, extra) in builds.items():
        names = [f"latency-came-{e}" for e in came] if name == "came" else [f"latency-{name}"]
        folders, build = indexes.build(kinds, corpus, model and paths[model], names, *extra)
        built.update(zip(names, folders))
        report.add("memory and size", what=f"{name} index{'es' if len(kinds) > 1 else ''}, "
                   f"{args.latency_docs} docs", build_s=round(build.seconds, 1),
                   build_peak_mb=round(build.peak_mb),
                   index_mb=round(sum(folder_mb(f) for f in folders), 1))
    topics = load_topics(args.topics)
    opened = {name: open_index(name, built[f"latency-{name}"], args.device)
              for name in ("bm25", "dense", "impact", "multivector", "multivector-compressed")}
    # The same impact index with each query cut to its heaviest terms, as a sparse model at the
    # target would send them (the bench's untrained model sends hundreds).
    impact_cut, int8_cut = f"impact-q{TARGET_QUERY_TERMS}", f"impact-int8-q{TARGET_QUERY_TERMS}"
    opened[impact_cut] = open_index("impact", built["latency-impact"], args.device,
                                    query_max_terms=TARGET_QUERY_TERMS)
    opened[int8_cut] = open_index("impact", built["latency-impact-int8"], args.device,
                                  query_max_terms=TARGET_QUERY_TERMS)
    searchers: dict[str, Callable[[dict[str, str], int], Any]] = {
        kind: lambda t, b, s=searcher: s.search(t, hits=100, batch_size=b, progress=False)
        for kind, searcher in opened.items()}
    searchers["dense+bm25"] = lambda t, b: hybrid_fusion(searchers["dense"](t, b),
                                                  searchers["bm25"](t, b), 1.0, True, k=100)
    fused = ExpertFusionSearcher([built[f"latency-came-{e}"] for e in came], device=args.device)
    searchers["came-fused"] = lambda t, b: fused.search(t, hits=100, candidates=100,
                                                        batch_size=b, progress=False)[0]
    singles = dict(list(topics.items())[:args.latency_queries])
    batched = dict(list(topics.items())[:args.batched_queries])
    p50: dict[str, float] = {}
    for name, search in searchers.items():
        times = single_query_times(search, singles)
        start = time.perf_counter()
        search(batched, 64)
        qps = len(batched) / (time.perf_counter() - start)
        p50[name] = statistics.median(times) * 1000
        report.add("latency", retriever=name, p50_ms=round(p50[name], 1),
                   p95_ms=round(percentile(times, 0.95) * 1000, 1),
                   batched_q_per_s=round(qps, 1), vs_bm25_p50=round(p50[name] / p50["bm25"], 2))
    metas = {index: read_meta(built[f"latency-{index}"]) for index in ("impact", "impact-int8")}
    for name, index in (("impact", "impact"), (impact_cut, "impact"), (int8_cut, "impact-int8")):
        impact_meta = metas[index]  # int8 encodes its own passages
        encoder = opened[name].query_encoder
        report.add("sparsity", index=f"{name} (CoT-MoTE's sparse side)",
                   terms_per_passage=impact_meta.terms_per_doc,
                   terms_per_query=round(encoder.terms / max(1, encoder.queries), 1),
                   postings=round(impact_meta.terms_per_doc * impact_meta.num_docs))
    for name, limit in (("dense", 3.0), ("impact", 2.0), (impact_cut, 2.0), (int8_cut, 2.0),
                        ("multivector-compressed", 5.0)):
        report.target(f"{name} single-query latency within {limit:g}x BM25's",
                      p50[name] / p50["bm25"], limit, higher=False)
    exact = opened["multivector"].search(topics, hits=100, progress=False, exhaustive=True)
    for name in ("multivector", "multivector-compressed"):
        report.target(f"{name} top-100 overlap with exact MaxSim >= 0.99",
                      _overlap(opened[name].search(topics, hits=100, progress=False), exact),
                      0.99, unit="")
    per_token = {name: folder_mb(built[f"latency-{name}"]) * 2 ** 20
                 / read_meta(built[f"latency-{name}"]).n_tokens
                 for name in ("multivector", "multivector-compressed")}
    for name, size in per_token.items():  # all files (codebooks, lists, Faiss) vs the vectors
        meta = read_meta(built[f"latency-{name}"])
        report.add("multivector storage", index=name, bytes_per_token=round(size, 1),
                   vector_bytes_per_token=meta.bytes_per_token or 2 * meta.dim)
    report.target(f"multivector {args.multivector_compression} bytes per token <= 1/6 of the "
                  "float16 index's", per_token["multivector-compressed"] / per_token["multivector"],
                  1 / 6, higher=False)


def _overlap(run: dict[str, dict[str, float]], exact: dict[str, dict[str, float]]) -> float:
    """Mean share of each query's exact top hits that ``run`` also returns."""
    return statistics.mean(len(set(run.get(q, {})) & set(hits)) / max(1, len(hits))
                           for q, hits in exact.items())


def _multivector_overlap(searcher: Any, topics: dict[str, str], k: int = 100) -> float:
    run = searcher.search(topics, hits=k, progress=False)
    return _overlap(run, searcher.search(topics, hits=k, progress=False, exhaustive=True))


# What each retriever indexes, with which of the bench's models and which extra index arguments
# (CAME: its three indexes from one encoding pass).
def retriever_builds(args: Any) -> dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...]]]:
    compressed = ("--compression", args.multivector_compression)
    return {"bm25": (("bm25",), None, ()), "dense": (("dense",), "siamese", ()),
            "impact": (("impact",), "cotmote", ()),
            "multivector": (("multivector",), "colbert", ()),
            "multivector-compressed": (("multivector",), "colbert", compressed),
            "came": (("impact", "multivector", "dense"), "came", ())}


# The query terms an impact query keeps at the sparse target's operating point (<= 64 a query).
TARGET_QUERY_TERMS = 64


def open_index(name: str, index: Path, device: str, **settings: Any) -> Any:
    """The searcher of a bench index (``multivector-compressed`` is a multivector index);
    ``settings``: more of the search command's settings (``query_max_terms``)."""

    return open_any(SearchSettings(name.split("-")[0], str(index), device=device, **settings))


def single_query_times(search: Callable[[dict[str, str], int], Any],
                        queries: dict[str, str]) -> list[float]:
    """Seconds of each query searched alone (encoding included), after a warm-up pass over the
    same queries: one short batch looked too little when Lucene searches first in a run (BM25 on
    1,000 documents, one CPU: 13.4 ms p50 after it, 10.0 after this pass). Expect
    spread between runs all the same: BM25 on 100,000 documents took 11.1-17.6 ms p50 in four."""
    for qid, text in queries.items():  # warm-up: JIT, caches
        search({qid: text}, 1)
    times = []
    for qid, text in queries.items():
        start = time.perf_counter()
        search({qid: text}, 1)
        times.append(time.perf_counter() - start)
    return times


def bench_approximate(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                      args: Any) -> None:
    """Approximate indexes against exact search: recall of the true top-100."""

    from pyserini_moe.encode import DenseQueryEncoder  # noqa: PLC0415 - starts the JVM

    [dense], _ = indexes.build(("dense",), args.corpus, paths["siamese"],
                               [f"{Path(args.corpus).name}-pytorch"])
    flat = faiss.read_index(str(dense / "index"))
    vectors = flat.reconstruct_n(0, flat.ntotal)
    topics = load_topics(args.topics)
    encoder = DenseQueryEncoder(paths["siamese"], device=args.device)
    queries = np.concatenate([encoder.encode_batch(list(topics.values())[i:i + 64])
                              for i in range(0, len(topics), 64)])
    k = min(100, flat.ntotal)
    _, exact = flat.search(queries, k)
    hnsw = faiss.IndexHNSWFlat(flat.d, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    for ef in (64, 256):
        hnsw.hnsw.efSearch = ef
        _, found = hnsw.search(queries, k)
        recall = statistics.mean(len(set(a) & set(b)) / k for a, b in zip(exact, found))
        report.add("approximate", index=f"dense hnsw32 efSearch={ef}", docs=flat.ntotal,
                   recall_at_100=round(recall, 4))
    corpus = str(subset(args.corpus, args.latency_docs, work / f"corpus-{args.latency_docs}"))
    [index], _ = indexes.build(("multivector",), corpus, paths["colbert"],
                               ["latency-multivector-ivfpq"], "--faiss", args.multivector_faiss)
    for params in ("nprobe=4", "nprobe=16"):
        searcher = SEARCHERS["multivector"](index, device=args.device, faiss_params=params)
        report.add("approximate", index=f"multivector {args.multivector_faiss} {params}",
                   docs=args.latency_docs,
                   recall_at_100=round(_multivector_overlap(searcher, topics), 4))
