"""``python -m pyserini_moe.bench``: speed, memory and size, each comparison measured side by side
in one run and reported as a ratio, with the project's targets marked met / not met.

Sections (all on the shared corpora; models are untrained instances built from ``--backbone``,
since speed and memory do not depend on training):

* encoding: documents/s of every registered model type against the plain backbone (a Siamese
  bi-encoder), interleaved repeats, best of them; MoE models the rest of the project has or
  adds are picked up from the model registry;
* onnx: PyTorch vs onnxruntime fp32 vs int8 (exports in their own processes), throughput and the
  nDCG@10 each gives on SciFact test (full corpus);
* latency: single-query latency (p50 / p95, encode + search) and batched throughput of BM25,
  dense, impact, multi-vector, dense + BM25 hybrid and CAME's fused search, on the first
  ``--latency-docs`` documents of the corpus; multi-vector candidate overlap with exact MaxSim;
* memory and size: peak resident memory of every index build and search process, index sizes;
* scaling: index time, peak memory, size and single-query latency of BM25, dense, impact and
  compressed multi-vector at ``--scaling-sizes`` documents (1k and 5k; 20k, the local
  collections together, and 100k opt-in), a power law fitted to each and projected to MS
  MARCO's 8.8M passages;
* approximate: HNSW recall@100 against the flat dense index, IVF-PQ multi-vector overlap with
  exact MaxSim.

Every index and timing encodes ``--max-length`` document tokens (128, as the local regressions).
Writes ``bench.json`` and ``bench.md`` into ``--output-dir`` and prints the Markdown.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyserini_moe.cli import HelpFormatter, run_main

# The targets of the performance issue: (description, ratio or value, threshold, higher is better)
MOE_SPEED = {"taser": 0.9, "cotmote": 0.9, "sbmoe": 0.9, "came": 0.55}


@dataclass
class Report:
    """Everything measured, and the targets checked against it."""

    sections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def add(self, section: str, **row: Any) -> None:
        self.sections.setdefault(section, []).append(row)

    def target(self, name: str, value: float, threshold: float, higher: bool = True,
               unit: str = "x") -> None:
        met = value >= threshold if higher else value <= threshold
        gap = (value / threshold if threshold else float("inf")) if higher else \
            (threshold / value if value else float("inf"))
        self.targets.append({"target": name, "measured": round(value, 4), "unit": unit,
                             "threshold": f"{'>=' if higher else '<='} {threshold}",
                             "met": met, "ratio_to_target": round(gap, 3)})

    def markdown(self) -> str:
        lines = ["# pyserini-moe benchmark", ""]
        for section, rows in self.sections.items():
            lines += [f"## {section}", "", _table(rows), ""]
        lines += ["## targets", "", _table([{**t, "met": "met" if t["met"] else
                                             f"NOT met ({t['ratio_to_target']:.2f} of target)"}
                                            for t in self.targets]), ""]
        return "\n".join(lines)


def _table(rows: list[dict[str, Any]]) -> str:
    headers = list(dict.fromkeys(k for row in rows for k in row))
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] +
                     ["| " + " | ".join(fmt(row.get(h, "")) for h in headers) + " |"
                      for row in rows])


# ------------------------------------------------------------------------------- helpers


@dataclass
class Process:
    seconds: float
    peak_mb: float


# Run a module and report its own peak resident memory (VmHWM of the process's memory map) as
# it exits. The kernel's ru_maxrss would also count the parent's pages copied at fork.
_PEAK_WRAPPER = """
import atexit, runpy, sys
def _peak():
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith('VmHWM:'):
                sys.stderr.write('\\n__peak_kb__ ' + line.split()[1] + '\\n')
atexit.register(_peak)
module = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""


def run_process(module: str, args: list[str]) -> Process:
    """Run ``python -m module args`` in a child process: its wall time and peak memory."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, module, *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {module} {shlex.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    peaks = [line.split()[1] for line in proc.stderr.splitlines()
             if line.startswith("__peak_kb__ ")]
    return Process(time.perf_counter() - start, int(peaks[-1]) / 1024 if peaks else float("nan"))


class Indexes:
    """Index builds of this run, each in its own process, keyed by what they encode: a section
    asking for an index another one built gets it back with its time and peak memory."""

    def __init__(self, work: Path, max_length: int, device: str = "cpu") -> None:
        self.work, self.max_length, self.device = work, max_length, device
        self.built: dict[tuple[tuple[str, ...], str, str | None], tuple[list[Path], Process]] = {}

    def build(self, kinds: tuple[str, ...], corpus: str, encoder: str | None,
              names: list[str], *extra: str) -> tuple[list[Path], Process]:
        """Indexes of ``kinds`` (several: one encoding pass) into ``work/<name>``."""
        key = (kinds + extra, corpus, encoder)
        if key not in self.built:
            paths = [self.work / name for name in names]
            args = ["--retriever", *kinds, "--corpus", corpus, "--index", *map(str, paths),
                    "--overwrite", "--quiet", "--max-length", str(self.max_length), *extra]
            if encoder is not None:
                args += ["--encoder", encoder, "--device", self.device]
            self.built[key] = (paths, run_process("pyserini_moe.index", args))
        return self.built[key]


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2 ** 20


def subset(corpus: str, n: int, out: Path) -> Path:
    """A BEIR-layout copy of ``corpus`` with its first ``n`` documents (queries, qrels kept)."""
    return pooled_corpus([corpus], n, out, copies=False)


def pooled_corpus(pool: list[str], n: int, out: Path, copies: bool = True) -> Path:
    """A BEIR-layout corpus of (up to) ``n`` documents: those of the ``pool`` collections one
    after the other (ids after the first collection's prefixed with its name), then, once the
    pool runs out and ``copies`` allows, copies whose words are shuffled (seeded): a copy costs
    what its original costs to encode, index and store, which is all a scaling point needs.
    Queries and qrels are the first collection's."""
    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415
    from pyserini_moe.io import atomic_path  # noqa: PLC0415

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


# Instruction sets that move the PyTorch / onnxruntime ratios (int8 above all) from one CPU to
# the next; the run table names them so two bench files can be told apart.
_ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")


def _device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch  # noqa: PLC0415

    return torch.cuda.get_device_name(torch.device(device))


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name and which of :data:`_ISA_FLAGS` it has ("unknown" off Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown"
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f for f in _ISA_FLAGS if f in flags)
    return f"{fields.get('model name', 'unknown')} ({isa or 'no avx2'})"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ------------------------------------------------------------------------------ sections


# The plain single-representation model each representation is compared with.
PLAIN = {"dense": "siamese", "sparse": "splade", "multi": "colbert"}
# Peer libraries timed on the same weights as one of our models: name -> (our model, what it is,
# what the peer is).
PEERS = {"sentence-transformers": ("siamese", "plain bi-encoder", "sentence-transformers' encode"),
         "sparse-encoder": ("splade", "SPLADE", "sentence-transformers' SparseEncoder")}


def bench_encoding(report: Report, models: dict[str, Any], texts: list[str], max_length: int,
                   batch_size: int, repeats: int, device: str = "cpu") -> None:
    """docs/s of every model against the plain backbone, interleaved so load drifts hit all.

    A model with several representations is also timed producing each alone (``model:kind``),
    against the plain model of that kind (SPLADE for sparse, ColBERT for multi-vector): the cost
    of its experts, apart from what the representation itself costs (the [tokens x vocabulary]
    projection of a sparse head costs about as much as MiniLM)."""
    from pyserini_moe.modeling.base import Side  # noqa: PLC0415

    runs = [(name, name, None) for name in models]  # a peer library has no representations
    runs += [(f"{name}:{kind}", name, kind) for name, model in models.items()
             if len(getattr(model, "representations", ())) > 1 for kind in model.representations]
    best: dict[str, float] = {}
    for _ in range(repeats):
        for label, name, only in runs:
            model = models[name]
            if name in PEERS:
                best[label] = max(best.get(label, 0.0),
                                  _time_sentence_transformer(model, texts, batch_size, device))
                continue
            model.encode(texts[:batch_size], Side.PASSAGE, max_length, only=only)  # warm-up
            _synchronize(device)
            start = time.perf_counter()
            for i in range(0, len(texts), batch_size):
                model.encode(texts[i:i + batch_size], Side.PASSAGE, max_length, only=only)
            _synchronize(device)  # CUDA runs asynchronously: time the work, not its launch
            best[label] = max(best.get(label, 0.0), len(texts) / (time.perf_counter() - start))
    base = best["siamese"]
    for label, name, only in runs:
        plain = PLAIN.get(only or "")
        report.add("encoding", model=label,
                   representations=only or "+".join(getattr(models[name], "representations",
                                                            ("dense",))),
                   docs_per_s=round(best[label], 1), vs_backbone=round(best[label] / base, 3),
                   vs_plain_model=(f"{best[label] / best[plain]:.3f} ({plain})"
                                   if plain in best else ""))
    for peer, (ours, what, theirs) in PEERS.items():
        if peer in best and ours in best:
            report.add("peers", peer=peer, ours=ours, vs_peer=round(best[ours] / best[peer], 3),
                       cosine=round(_agreement(models[ours], models[peer], texts[:batch_size],
                                               max_length), 6))
            report.target(f"our {what} encodes at >= 1.0x {theirs}",
                          best[ours] / best[peer], 1.0)
    for name, goal in MOE_SPEED.items():
        if name not in best:
            continue
        if name == "came" or len(models[name].representations) == 1:
            report.target(f"{name} encodes at >= {goal}x its backbone", best[name] / base, goal)
        else:  # the experts' cost, each representation against its plain model
            for kind in models[name].representations:
                plain = PLAIN[kind]
                report.target(f"{name} ({kind}) encodes at >= {goal}x {plain}",
                              best[f"{name}:{kind}"] / best[plain], goal)


def _agreement(ours: Any, peer: Any, texts: list[str], max_length: int) -> float:
    """Smallest cosine between our passage vectors and the peer's on ``texts`` (same weights:
    ~1.0 says both compute the same function, so the speed ratio compares like with like)."""
    import torch  # noqa: PLC0415

    from pyserini_moe.modeling.base import Side  # noqa: PLC0415

    with torch.no_grad():
        mine = ours.encode(texts, Side.PASSAGE, max_length)
        mine = mine.dense if mine.dense is not None else mine.sparse
        theirs = peer.encode(texts, convert_to_tensor=True, show_progress_bar=False)
        theirs = theirs.to_dense() if theirs.is_sparse else theirs
    return torch.nn.functional.cosine_similarity(mine.float().cpu(), theirs.float().cpu()).min()\
        .item()


def sentence_transformer(siamese: str, max_length: int, device: str) -> Any:
    """The untrained Siamese model as sentence-transformers loads it (its folder is in that
    layout): the peer our plain bi-encoder's speed is compared with, on the same weights."""
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    model = SentenceTransformer(siamese, device=device)
    model.max_seq_length = max_length
    return model


def sparse_encoder(splade: str, out: Path, max_length: int, device: str) -> Any:
    """The untrained SPLADE model as sentence-transformers' ``SparseEncoder`` on the same
    weights: its backbone, head transform and vocabulary bias written as BERT's masked-LM layout
    (decoder tied to the word embeddings, as ours), then a fill-mask Transformer + max
    SpladePooling. The peer our impact encoding is compared with."""
    import torch  # noqa: PLC0415
    from sentence_transformers import SparseEncoder  # noqa: PLC0415
    from sentence_transformers.sparse_encoder.modules import (  # noqa: PLC0415
        SpladePooling,
        Transformer,
    )
    from transformers import BertForMaskedLM  # noqa: PLC0415

    from pyserini_moe.modeling.base import load_model  # noqa: PLC0415

    if not out.exists():
        ours = load_model(splade, device="cpu")
        mlm = BertForMaskedLM(ours.backbone.config)
        mlm.bert.load_state_dict(ours.backbone.state_dict(), strict=False)  # no pooler: unused
        mlm.cls.predictions.transform.load_state_dict(ours.head.transform.state_dict())
        with torch.no_grad():
            mlm.cls.predictions.bias.copy_(ours.head.bias)
        mlm.tie_weights()
        mlm.save_pretrained(out)
        ours.tokenizer.save_pretrained(out)
    transformer = Transformer(str(out), transformer_task="fill-mask", max_seq_length=max_length)
    return SparseEncoder(modules=[transformer, SpladePooling("max")], device=device)


def _time_sentence_transformer(model: Any, texts: list[str], batch_size: int,
                               device: str) -> float:
    model.encode(texts[:batch_size], batch_size=batch_size, convert_to_tensor=True)  # warm-up
    _synchronize(device)
    start = time.perf_counter()
    model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
    _synchronize(device)
    return len(texts) / (time.perf_counter() - start)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch  # noqa: PLC0415

        torch.cuda.synchronize()


def bench_onnx(report: Report, work: Path, indexes: Indexes, siamese: str, texts: list[str],
               args: Any, came: str | None = None) -> None:
    """PyTorch vs onnxruntime fp32 / int8: throughput side by side, and SciFact nDCG@10; CAME
    through its fastest backend (int8) against the same PyTorch backbone, timed in the same
    rounds."""
    from pyserini_moe.data.topics import load_qrels  # noqa: PLC0415
    from pyserini_moe.eval.metrics import evaluate  # noqa: PLC0415
    from pyserini_moe.modeling.auto import load_encoder  # noqa: PLC0415
    from pyserini_moe.modeling.base import Side  # noqa: PLC0415
    from pyserini_moe.runs import read_trec_run  # noqa: PLC0415

    encoders = {"pytorch": siamese}
    for variant, extra in (("onnx-fp32", []), ("onnx-int8", ["--int8"])):
        out = work / variant
        if not out.exists():
            run_process("pyserini_moe.export", ["--encoder", siamese, "--output", str(out),
                         *extra])
        encoders[variant] = str(out)
    timed = dict(encoders)
    if came is not None:
        timed["came"] = came
        if not (work / "came-onnx-int8").exists():
            run_process("pyserini_moe.export", ["--encoder", came, "--output",
                                                str(work / "came-onnx-int8"), "--int8"])
        timed["came-onnx-int8"] = str(work / "came-onnx-int8")
    models = {name: load_encoder(path, device="cpu") for name, path in timed.items()}
    speed: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, model in models.items():
            model.encode(texts[:args.batch_size], Side.PASSAGE, args.max_length)
            start = time.perf_counter()
            for i in range(0, len(texts), args.batch_size):
                model.encode(texts[i:i + args.batch_size], Side.PASSAGE, args.max_length)
            speed[name] = max(speed.get(name, 0.0), len(texts) / (time.perf_counter() - start))
    qrels = load_qrels(args.topics)
    ndcg: dict[str, float] = {}
    for name, path in encoders.items():
        run = work / f"{Path(args.corpus).name}-{name}.trec"
        [index], build = indexes.build(("dense",), args.corpus, path,
                                       [f"{Path(args.corpus).name}-{name}"])
        search = run_process("pyserini_moe.search", ["--retriever", "dense", "--index",
                              str(index), "--topics", args.topics, "--output", str(run),
                              "--quiet", "--device", "cpu"])
        ndcg[name] = evaluate(read_trec_run(run), qrels, ["ndcg@10"])["ndcg@10"]
        report.add("memory and size", what=f"dense index of {args.corpus} ({name})",
                   build_s=round(build.seconds, 1), build_peak_mb=round(build.peak_mb),
                   search_peak_mb=round(search.peak_mb), index_mb=round(folder_mb(index), 1))
        report.target(f"peak memory indexing {args.corpus} ({name}) < 3 GB", build.peak_mb / 1024,
                      3.0, higher=False, unit="GB")
    for name in encoders:
        report.add("onnx", backend=name, docs_per_s=round(speed[name], 1),
                   vs_pytorch=round(speed[name] / speed["pytorch"], 3),
                   ndcg_at_10=round(ndcg[name], 4),
                   delta_ndcg=round(ndcg[name] - ndcg["pytorch"], 4))
    for variant, goal in (("onnx-fp32", 1.3), ("onnx-int8", 2.0)):
        report.target(f"onnxruntime {variant[5:]} >= {goal:g}x PyTorch encoding",
                      speed[variant] / speed["pytorch"], goal)
    report.target("int8 nDCG@10 change (absolute) <= 0.01",
                  abs(ndcg["onnx-int8"] - ndcg["pytorch"]), 0.01, higher=False, unit="")
    for name in ("came", "came-onnx-int8") if came is not None else ():
        report.add("onnx", backend=name, docs_per_s=round(speed[name], 1),
                   vs_pytorch=round(speed[name] / speed["pytorch"], 3))
    if came is not None:
        report.target("came through onnx-int8 encodes at >= 0.55x its PyTorch backbone",
                      speed["came-onnx-int8"] / speed["pytorch"], 0.55)


def bench_latency(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                  args: Any) -> None:
    """Single-query latency and batched throughput of every retriever on a corpus slice."""
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415
    from pyserini_moe.index.meta import read_meta  # noqa: PLC0415
    from pyserini_moe.search.experts import ExpertFusionSearcher  # noqa: PLC0415
    from pyserini_moe.search.hybrid import hybrid  # noqa: PLC0415

    corpus = str(subset(args.corpus, args.latency_docs, work / f"corpus-{args.latency_docs}"))
    came = ("lexical", "local", "global")
    built: dict[str, Path] = {}
    for name, (kinds, model, extra) in retriever_builds(args).items():
        names = [f"latency-came-{e}" for e in came] if name == "came" else [f"latency-{name}"]
        folders, build = indexes.build(kinds, corpus, model and paths[model], names, *extra)
        built.update(zip(names, folders))
        report.add("memory and size", what=f"{name} index{'es' if len(kinds) > 1 else ''}, "
                   f"{args.latency_docs} docs", build_s=round(build.seconds, 1),
                   build_peak_mb=round(build.peak_mb),
                   index_mb=round(sum(folder_mb(f) for f in folders), 1))
    topics = load_topics(args.topics)
    opened = {name: _open(name, built[f"latency-{name}"], args.device)
              for name in ("bm25", "dense", "impact", "multivector", "multivector-compressed")}
    searchers: dict[str, Callable[[dict[str, str], int], Any]] = {
        kind: lambda t, b, s=searcher: s.search(t, hits=100, batch_size=b, progress=False)
        for kind, searcher in opened.items()}
    searchers["dense+bm25"] = lambda t, b: hybrid(searchers["dense"](t, b),
                                                  searchers["bm25"](t, b), 1.0, True, k=100)
    fused = ExpertFusionSearcher([built[f"latency-came-{e}"] for e in came], device=args.device)
    searchers["came-fused"] = lambda t, b: fused.search(t, hits=100, candidates=100,
                                                        batch_size=b, progress=False)[0]
    singles = dict(list(topics.items())[:args.latency_queries])
    batched = dict(list(topics.items())[:args.batched_queries])
    p50: dict[str, float] = {}
    for name, search in searchers.items():
        times = _single_query_times(search, singles)
        start = time.perf_counter()
        search(batched, 64)
        qps = len(batched) / (time.perf_counter() - start)
        p50[name] = statistics.median(times) * 1000
        report.add("latency", retriever=name, p50_ms=round(p50[name], 1),
                   p95_ms=round(percentile(times, 0.95) * 1000, 1),
                   batched_q_per_s=round(qps, 1), vs_bm25_p50=round(p50[name] / p50["bm25"], 2))
    impact_meta, encoder = read_meta(built["latency-impact"]), opened["impact"].query_encoder
    report.add("sparsity", index="impact (CoT-MoTE's sparse side)",
               terms_per_passage=impact_meta["terms_per_doc"],
               terms_per_query=round(encoder.terms / max(1, encoder.queries), 1),
               postings=round(impact_meta["terms_per_doc"] * impact_meta["num_docs"]))
    for name, limit in (("dense", 3.0), ("impact", 2.0), ("multivector-compressed", 5.0)):
        report.target(f"{name} single-query latency within {limit:g}x BM25's",
                      p50[name] / p50["bm25"], limit, higher=False)
    exact = opened["multivector"].search(topics, hits=100, progress=False, exhaustive=True)
    for name in ("multivector", "multivector-compressed"):
        report.target(f"{name} top-100 overlap with exact MaxSim >= 0.99",
                      _overlap(opened[name].search(topics, hits=100, progress=False), exact),
                      0.99, unit="")
    per_token = {name: folder_mb(built[f"latency-{name}"]) * 2 ** 20
                 / read_meta(built[f"latency-{name}"])["n_tokens"]
                 for name in ("multivector", "multivector-compressed")}
    for name, size in per_token.items():  # all files (codebooks, lists, Faiss) vs the vectors
        meta = read_meta(built[f"latency-{name}"])
        report.add("multivector storage", index=name, bytes_per_token=round(size, 1),
                   vector_bytes_per_token=meta.get("bytes_per_token", 2 * meta["dim"]))
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


def _open(name: str, index: Path, device: str) -> Any:
    """The searcher of a bench index (``multivector-compressed`` is a multivector index)."""
    from pyserini_moe.search.dispatch import SearchSettings, open_any  # noqa: PLC0415

    return open_any(SearchSettings(name.split("-")[0], str(index), device=device))


def _single_query_times(search: Callable[[dict[str, str], int], Any],
                        queries: dict[str, str]) -> list[float]:
    """Seconds of each query searched alone (encoding included), after a warm-up."""
    search(dict(list(queries.items())[:2]), 1)  # warm-up (JIT, caches)
    times = []
    for qid, text in queries.items():
        start = time.perf_counter()
        search({qid: text}, 1)
        times.append(time.perf_counter() - start)
    return times


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
    copies past the pool's end); the 1k point is the latency section's corpus, so its indexes
    are reused with their measurements."""
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415

    builds = retriever_builds(args)
    first_size = num_docs(args.corpus)
    queries = dict(list(load_topics(args.topics).items())[:args.latency_queries])
    points: dict[str, list[tuple[int, dict[str, float]]]] = {name: [] for name in SCALED}
    for n in args.scaling_sizes:
        corpus = (subset(args.corpus, n, work / f"corpus-{n}") if n <= first_size else
                  pooled_corpus([args.corpus, *args.scaling_pool], n, work / f"pool-{n}"))
        docs = num_docs(str(corpus))
        for name in SCALED:
            kinds, model, extra = builds[name]
            [index], build = indexes.build(kinds, str(corpus), model and paths[model],
                                           [f"scale-{n}-{name}"], *extra)
            searcher = _open(name, index, args.device)
            times = _single_query_times(
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


def num_docs(corpus: str) -> int:
    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415

    return BeirCollection.load(corpus).num_docs()


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


def bench_approximate(report: Report, work: Path, indexes: Indexes, paths: dict[str, str],
                      args: Any) -> None:
    """Approximate indexes against exact search: recall of the true top-100."""
    import faiss  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415
    from pyserini_moe.encode.dense import DenseQueryEncoder  # noqa: PLC0415
    from pyserini_moe.search.encoded import SEARCHERS  # noqa: PLC0415

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


# -------------------------------------------------------------------------------- driver


def build_models(backbone: str, out: Path) -> dict[str, str]:
    """An untrained model of every registered type, saved (index processes load it)."""
    import torch  # noqa: PLC0415

    from pyserini_moe.modeling.base import (
        model_class,  # noqa: PLC0415
        model_types,  # noqa: PLC0415
    )

    paths = {}
    for model_type in model_types():
        path = out / model_type
        if not path.exists():
            torch.manual_seed(0)
            model_class(model_type).from_backbone(backbone, device="cpu").save(path)
        paths[model_type] = str(path)
    return paths


SECTIONS = ("encoding", "onnx", "latency", "scaling", "approximate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.bench", description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter)
    parser.add_argument("--backbone", default="all-minilm-l6-v2")
    parser.add_argument("--corpus", default="scifact")
    parser.add_argument("--topics", default="scifact:test", help="queries (and qrels) used")
    parser.add_argument("--scaling-sizes", type=int, nargs="+", default=[1000, 5000],
                        help="corpus sizes of the scaling section: the first N documents of "
                             "--corpus, then of --scaling-pool, then perturbed copies. 20000 "
                             "(the local collections together) and 100000 are opt-in (make "
                             "bench-scaling): by the 5k point's rates they add about 20 minutes "
                             "and a few hours on two cores")
    parser.add_argument("--scaling-pool", nargs="*", default=None,
                        help="collections that follow --corpus in the scaling corpora "
                             "(default: every other local collection)")
    parser.add_argument("--docs", type=int, default=128, help="documents timed per encoder")
    parser.add_argument("--max-length", type=int, default=128,
                        help="document tokens of every index and timing (the local "
                             "regressions' length)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved timing rounds")
    parser.add_argument("--latency-docs", type=int, default=1000)
    parser.add_argument("--latency-queries", type=int, default=50,
                        help="queries timed one at a time (p50, p95)")
    parser.add_argument("--batched-queries", type=int, default=128,
                        help="queries of the batched throughput (batches of 64)")
    parser.add_argument("--multivector-faiss", default="ivf64,pq16",
                        help="the approximate token index of the approximate section (the "
                             "index command's --faiss)")
    parser.add_argument("--multivector-compression", default="pq64",
                        help="the compressed multivector index of the latency section (the index "
                             "command's --compression)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the models encode (Faiss and Lucene search on the CPU); cuda "
                             "skips the onnx section, whose onnxruntime here is the CPU build")
    parser.add_argument("--output-dir", type=Path, default=Path("work/bench"))
    args = parser.parse_args(argv)
    if args.scaling_pool is None:
        from pyserini_moe.data.beir import local_collections  # noqa: PLC0415

        args.scaling_pool = [name for name in local_collections() if name != args.corpus]
    from pyserini_moe.modeling.base import check_device  # noqa: PLC0415

    check_device(args.device)  # one error line when CUDA is asked for and absent
    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415
    from pyserini_moe.io import atomic_path  # noqa: PLC0415
    from pyserini_moe.modeling.auto import load_encoder  # noqa: PLC0415

    work = args.output_dir
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    paths = build_models(args.backbone, work / "models")
    texts = [d.contents for _, d in zip(range(args.docs), BeirCollection.load(args.corpus)
                                        .corpus())]
    report = Report()
    indexes = Indexes(work, args.max_length, args.device)
    if "encoding" in args.sections:
        models = {t: load_encoder(p, device=args.device) for t, p in paths.items()}
        models["sentence-transformers"] = sentence_transformer(paths["siamese"], args.max_length,
                                                               args.device)
        models["sparse-encoder"] = sparse_encoder(paths["splade"], work / "models" / "st-splade",
                                                  args.max_length, args.device)
        bench_encoding(report, models, texts, args.max_length, args.batch_size, args.repeats,
                       args.device)
    if "onnx" in args.sections and args.device == "cpu":
        bench_onnx(report, work, indexes, paths["siamese"], texts, args, came=paths["came"])
    if "latency" in args.sections:
        bench_latency(report, work, indexes, paths, args)
    if "scaling" in args.sections:
        bench_scaling(report, work, indexes, paths, args)
    if "approximate" in args.sections:
        bench_approximate(report, work, indexes, paths, args)
    report.add("run", seconds=round(time.perf_counter() - started), cores=os.cpu_count(),
               cpu=cpu_description(), device=_device_name(args.device), backbone=args.backbone,
               corpus=args.corpus)
    text = report.markdown()
    with atomic_path(work / "bench.md") as tmp:
        tmp.write_text(text + "\n")
    with atomic_path(work / "bench.json") as tmp:
        tmp.write_text(json.dumps({"sections": report.sections, "targets": report.targets},
                                  indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
