"""SB-MoE analyses: ``experts`` (how many documents and queries each expert wins at inference, the
gate's argmax, and which experts are "activated", SB-MoE table III) and ``expert-count`` (figure 2:
nDCG@10 and R@100 against the number of experts)."""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pyserini_moe.analyze.common import emit, figure, save_png
from pyserini_moe.errors import UserError

# SB-MoE section VI: an expert is activated when the gate ranks it first for "at least 100k
# documents of the given corpus" (table III's thresholds: 100k / corpus size, 1.14% to 3.85%).
PAPER_MIN_DOCS = 100_000
EXPERT_COUNT_METRICS = ("ndcg@10", "recall@100")  # figure 2's metrics


@dataclasses.dataclass
class ExpertStats:
    """One side's routing at inference: per expert, the texts it wins (the gate's argmax, the
    expert SB-MoE_TOP-1 uses) and its mean gate probability (its average weight in SB-MoE_ALL)."""

    wins: list[int]
    mean_probs: list[float]

    @property
    def total(self) -> int:
        return sum(self.wins)

    @property
    def shares(self) -> list[float]:
        return [w / (self.total or 1) for w in self.wins]


def expert_stats(model: Any, texts: list[str], side: str, batch_size: int = 32,
                 max_length: int = 256, progress: bool = True) -> ExpertStats:
    """Route ``texts`` of one side through an SB-MoE model's gate (no noise) in batches."""
    import torch  # noqa: PLC0415

    from pyserini_moe.modeling.base import Side  # noqa: PLC0415

    wins = torch.zeros(model.n_experts, dtype=torch.long)
    prob_sums = torch.zeros(model.n_experts, dtype=torch.float64)
    for start in tqdm(range(0, len(texts), batch_size), desc=f"gate {side}", disable=not progress):
        routing = model.route(texts[start:start + batch_size], Side(side), max_length)
        wins += torch.bincount(routing.expert.cpu(), minlength=model.n_experts)
        prob_sums += routing.probs.cpu().double().sum(0)
    return ExpertStats(wins.tolist(), (prob_sums / max(len(texts), 1)).tolist())


def activation_threshold(min_docs: int, corpus_size: int) -> float:
    """The paper's rule as a share: winning ``min_docs`` of ``corpus_size`` documents. As a share
    it also applies to a seeded sample of the corpus and to queries."""
    return min_docs / corpus_size


def activated_experts(wins: Sequence[int], threshold: float) -> list[int]:
    """Experts whose share of the wins is at least ``threshold`` (a fraction): "at least 100k
    documents" in the paper."""
    total = sum(wins) or 1
    return [e for e, w in enumerate(wins) if w / total >= threshold]


def format_experts(stats: dict[str, ExpertStats], threshold: float, sizes: dict[str, int]) -> str:
    """Markdown: one row per expert (wins, share, mean gate probability per side), then a row
    per side as in table III (threshold, employed and activated experts)."""
    n = len(next(iter(stats.values())).wins)
    active = {side: set(activated_experts(s.wins, threshold)) for side, s in stats.items()}
    header = "| expert | " + " | ".join(f"{side} wins | {side} share | {side} mean gate p"
                                         for side in stats) + " |"
    lines = [header, "|---:|" + "---:|---:|---:|" * len(stats)]
    for e in range(n):
        cells = " | ".join(f"{s.wins[e]} | {s.shares[e]:.2%}{' *' if e in active[side] else ''} "
                           f"| {s.mean_probs[e]:.3f}" for side, s in stats.items())
        lines.append(f"| {e} | {cells} |")
    lines += ["", "\\* activated: share of wins >= the threshold.", "",
              "| side | size | texts routed | threshold (%) | #experts | activated |",
              "|---|---:|---:|---:|---:|---:|"]
    for side, s in stats.items():
        k = len(active[side])
        lines.append(f"| {side} | {sizes[side]} | {s.total} | >= {threshold:.2%} | {n} | "
                     f"{k} ({k / n:.2%}) |")
    return "\n".join(lines)


def plot_experts(stats: dict[str, ExpertStats], threshold: float, path: str | Path,
                 title: str) -> None:
    """Grouped bars: each expert's share of wins per side, the activation threshold dashed."""
    import numpy as np  # noqa: PLC0415

    fig, (ax,) = figure()
    n = len(next(iter(stats.values())).wins)
    x, width = np.arange(n), 0.8 / len(stats)
    for i, (side, s) in enumerate(stats.items()):
        ax.bar(x + (i - (len(stats) - 1) / 2) * width, [100 * v for v in s.shares], width,
               label=f"{side} ({s.total})")
    ax.axhline(100 * threshold, color="black", linestyle="--", linewidth=1,
               label=f"activation threshold ({threshold:.2%})")
    ax.set(xticks=x, xlabel="expert", ylabel="share of texts won (%)", title=title)
    ax.legend()
    save_png(fig, path)


# -- SB-MoE: effectiveness against the number of experts (figure 2) -------------------------


def parse_runs(specs: Sequence[str]) -> dict[int, str]:
    """``["3=a.trec", "6=b.trec"]`` -> ``{3: "a.trec", 6: "b.trec"}``, sorted by expert count."""
    runs: dict[int, str] = {}
    for spec in specs:
        count, sep, path = spec.partition("=")
        if not sep or not count.strip().isdigit() or int(count) < 1 or not path.strip():
            raise UserError(f"--runs {spec!r}: expected EXPERTS=RUN_FILE with EXPERTS a positive "
                            "integer, e.g. 6=runs/sbmoe-6.trec")
        if int(count) in runs:
            raise UserError(f"--runs: {int(count)} experts given twice")
        runs[int(count)] = path.strip()
    return dict(sorted(runs.items()))


def format_expert_count(results: dict[int, dict[str, float]], metrics: Sequence[str],
                        baseline: dict[str, float] | None = None) -> str:
    """Markdown: one row per expert count (and the fine-tuned baseline first, when given)."""
    lines = ["| experts | " + " | ".join(metrics) + " |", "|---|" + "---:|" * len(metrics)]
    if baseline is not None:
        lines.append("| fine-tuned | " + " | ".join(f"{baseline[m]:.4f}" for m in metrics) + " |")
    for count, values in results.items():
        lines.append(f"| {count} | " + " | ".join(f"{values[m]:.4f}" for m in metrics) + " |")
    return "\n".join(lines)


def plot_expert_count(results: dict[int, dict[str, float]], metrics: Sequence[str],
                      path: str | Path, title: str,
                      baseline: dict[str, float] | None = None) -> None:
    """One panel per metric: the score against the number of experts, the baseline dashed."""
    fig, axes = figure(4.5, 3.6, len(metrics))
    counts = list(results)
    for ax, metric in zip(axes, metrics):
        ax.plot(counts, [results[c][metric] for c in counts], marker="o", label="SB-MoE")
        if baseline is not None:
            ax.axhline(baseline[metric], color="gray", linestyle="--", label="fine-tuned")
        ax.set(xticks=counts, xlabel="number of experts", ylabel=metric)
        ax.legend()
    fig.suptitle(title)
    save_png(fig, path)


def run_experts(args: argparse.Namespace) -> int:
    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415
    from pyserini_moe.modeling.base import load_model  # noqa: PLC0415

    if not args.corpus and not args.topics:
        raise UserError("experts: give --corpus, --topics or both")
    if args.threshold is not None and not 0 <= args.threshold <= 100:
        raise UserError(f"--threshold is a percentage in [0, 100], got {args.threshold}")
    if args.min_docs < 1:
        raise UserError(f"--min-docs must be >= 1, got {args.min_docs}")
    model = load_model(args.model, args.device)
    if model.model_type != "sbmoe":
        raise UserError(f"{args.model} is a {model.model_type} model: expert analysis needs an "
                        "sbmoe model")
    texts: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    if args.corpus:
        passages = [doc.contents for doc in BeirCollection.load(args.corpus).corpus()]
        sizes["passage"] = len(passages)
        if args.sample and args.sample < len(passages):
            passages = random.Random(args.seed).sample(passages, args.sample)
        texts["passage"] = passages
    if args.topics:
        texts["query"] = list(load_topics(args.topics).values())
        sizes["query"] = len(texts["query"])
    if not all(texts.values()):
        raise UserError("experts: nothing to route (empty corpus or topics)")
    if args.threshold is not None:
        threshold, rule = args.threshold / 100, f"--threshold {args.threshold}%"
    else:
        size = sizes.get("passage", sizes.get("query"))
        threshold = activation_threshold(args.min_docs, size)
        rule = f"at least {args.min_docs} of {size} {'documents' if args.corpus else 'queries'}"
    stats = {side: expert_stats(model, items, side, args.batch_size,
                                args.max_length if side == "passage" else args.query_max_length,
                                progress=not args.quiet) for side, items in texts.items()}
    name = Path(args.corpus or args.topics).name
    text = (f"Experts won at inference (the gate's argmax) by {args.model} "
            f"({model.n_experts} experts, {model.args['gate']} gate) on {name}; activated: {rule}"
            f" (a share of {threshold:.2%}).\n\n{format_experts(stats, threshold, sizes)}\n")
    if threshold > 1:
        text += (f"\nNo expert can be activated: the corpus is smaller than --min-docs "
                 f"{args.min_docs}; pass --threshold PCT (the paper's were 1.14% to 3.85%).\n")
    emit(text, args.output)
    if args.plot:
        plot_experts(stats, threshold, args.plot, f"SB-MoE experts on {name}")
    return 0


def run_expert_count(args: argparse.Namespace) -> int:
    from pyserini_moe.data.topics import load_qrels  # noqa: PLC0415
    from pyserini_moe.eval.metrics import evaluate, parse_metrics  # noqa: PLC0415
    from pyserini_moe.runs import read_trec_run  # noqa: PLC0415

    paths = parse_runs(args.runs)
    parse_metrics(args.metrics)  # unknown names fail before any run is read
    qrels = load_qrels(args.qrels)
    results = {count: evaluate(read_trec_run(path), qrels, args.metrics)
               for count, path in tqdm(paths.items(), desc="evaluate", disable=args.quiet)}
    baseline = evaluate(read_trec_run(args.baseline), qrels, args.metrics) if args.baseline \
        else None
    table = format_expert_count(results, args.metrics, baseline)
    text = f"SB-MoE against the number of experts on {args.qrels}:\n\n{table}\n"
    emit(text, args.output)
    if args.plot:
        plot_expert_count(results, args.metrics, args.plot, f"SB-MoE on {args.qrels}", baseline)
    return 0
