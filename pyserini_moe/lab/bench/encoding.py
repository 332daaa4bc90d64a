"""Encoding throughput: every model against the plain backbone, peer libraries on the same
weights, and PyTorch against onnxruntime."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from transformers import BertForMaskedLM

from pyserini_moe.data import load_qrels
from pyserini_moe.eval import evaluate
from pyserini_moe.lab.bench.processes import Indexes, folder_mb, onnx_export, run_process
from pyserini_moe.lab.bench.report import Report
from pyserini_moe.modeling import Side, load_encoder, load_model
from pyserini_moe.runs import read_trec_run

# The targets of the performance issue: (description, ratio or value, threshold, higher is better)
MOE_SPEED = {"taser": 0.9, "cotmote": 0.9, "sbmoe": 0.9, "came": 0.55}


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
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(siamese, device=device)
    model.max_seq_length = max_length
    return model


def sparse_encoder(splade: str, out: Path, max_length: int, device: str) -> Any:
    """The untrained SPLADE model as sentence-transformers' ``SparseEncoder`` on the same
    weights: its backbone, head transform and vocabulary bias written as BERT's masked-LM layout
    (decoder tied to the word embeddings, as ours), then a fill-mask Transformer + max
    SpladePooling. The peer our impact encoding is compared with."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import (
        SpladePooling,
        Transformer,
    )

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

        torch.cuda.synchronize()


def bench_onnx(report: Report, work: Path, indexes: Indexes, siamese: str, texts: list[str],
               args: Any, came: str | None = None) -> None:
    """PyTorch vs onnxruntime fp32 / int8: throughput side by side, and SciFact nDCG@10; CAME
    through its fastest backend (int8) against the same PyTorch backbone, timed in the same
    rounds."""

    encoders = {"pytorch": siamese}
    for variant in ("onnx-fp32", "onnx-int8"):
        encoders[variant] = onnx_export(siamese, work / variant, int8=variant == "onnx-int8")
    timed = dict(encoders)
    if came is not None:
        timed["came"] = came
        timed["came-onnx-int8"] = onnx_export(came, work / "came-onnx-int8", int8=True)
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
