"""SB-MoE analyses: ``experts`` (how many documents and queries each expert wins at inference, the
gate's argmax, and which experts are "activated", SB-MoE table III) and ``expert-count`` (figure 2:
nDCG@10 and R@100 against the number of experts)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pyserini_moe.analyze.common import (
    emit,
    figure,
    refuse_past_positions,
    refuse_run_without_judged_queries,
    refuse_unread_seed,
    save_png,
)
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import check_coverage, distinct_metrics, evaluate
from pyserini_moe.io import refuse_one_file_twice
from pyserini_moe.runs import read_trec_run

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
    import torch  # noqa: PLC0415 - `analyze --help` stays light

    from pyserini_moe.modeling.base import Side  # noqa: PLC0415 - `analyze --help` stays light

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
    import numpy as np  # noqa: PLC0415 - `analyze --help` stays light

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


@dataclasses.dataclass(frozen=True)
class ExpertsAnalysis:
    """What ``analyze experts`` takes, flag for flag (see its ``--help``): settings that cannot
    work are refused when the object is made, before the model is loaded."""

    model: str
    corpus: str | None = None
    topics: str | None = None
    sample: int = 0  # documents sampled from the corpus (seeded); 0 = all, as the paper
    seed: int = 0
    min_docs: int = PAPER_MIN_DOCS
    threshold: float | None = None  # a percentage of the routed texts; overrides min_docs
    batch_size: int = 32
    max_length: int = 256
    query_max_length: int = 64
    device: str | None = None
    quiet: bool = False
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        if not self.corpus and not self.topics:
            raise UserError("experts: give --corpus, --topics or both")
        if self.threshold is not None and not 0 <= self.threshold <= 100:
            raise UserError(f"--threshold is a percentage in [0, 100], got {self.threshold}")
        if self.min_docs < 1:
            raise UserError(f"--min-docs must be >= 1, got {self.min_docs}")
        if self.sample < 0:
            raise UserError(f"--sample must be >= 0 (0 = all), got {self.sample}")
        refuse_unread_seed(self.seed, {"--sample N": self.sample > 0})


def run_experts(analysis: ExpertsAnalysis) -> int:
    """``analyze experts``: route the corpus and / or topics through the gate, write the wins
    and the activated experts (and the plot)."""
    from pyserini_moe.modeling.folder import load_model  # noqa: PLC0415 - `analyze --help` stays light

    model = load_model(analysis.model, analysis.device)
    if model.model_type != "sbmoe":
        raise UserError(f"{analysis.model} is a {model.model_type} model: expert analysis needs "
                        "an sbmoe model")
    refuse_past_positions(model, {"--max-length": analysis.max_length,
                                  "--query-max-length": analysis.query_max_length})
    texts: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    if analysis.corpus:
        passages = [doc.contents for doc in BeirCollection.load(analysis.corpus).corpus()]
        sizes["passage"] = len(passages)
        if analysis.sample and analysis.sample < len(passages):
            passages = random.Random(analysis.seed).sample(passages, analysis.sample)
        texts["passage"] = passages
    if analysis.topics:
        texts["query"] = list(load_topics(analysis.topics).values())
        sizes["query"] = len(texts["query"])
    if not all(texts.values()):
        raise UserError("experts: nothing to route (empty corpus or topics)")
    if analysis.threshold is not None:
        threshold, rule = analysis.threshold / 100, f"--threshold {analysis.threshold}%"
    else:
        size = sizes.get("passage", sizes.get("query"))
        threshold = activation_threshold(analysis.min_docs, size)
        rule = (f"at least {analysis.min_docs} of {size} "
                f"{'documents' if analysis.corpus else 'queries'}")
    stats = {side: expert_stats(model, items, side, analysis.batch_size,
                                analysis.max_length if side == "passage"
                                else analysis.query_max_length,
                                progress=not analysis.quiet) for side, items in texts.items()}
    name = Path(analysis.corpus or analysis.topics).name
    share = (f"a share of {threshold:.2%}" if threshold <= 1
             else "more than there are, so none can be")
    text = (f"Experts won at inference (the gate's argmax) by {analysis.model} "
            f"({model.n_experts} experts, {model.args['gate']} gate) on {name}; activated: {rule}"
            f" ({share}).\n\n{format_experts(stats, threshold, sizes)}\n")
    if threshold > 1:
        text += (f"\nNo expert can be activated: the corpus is smaller than --min-docs "
                 f"{analysis.min_docs}; pass --threshold PCT (the paper's were 1.14% to 3.85%).\n")
    emit(text, analysis.output)
    if analysis.plot:
        plot_experts(stats, threshold, analysis.plot, f"SB-MoE experts on {name}")
    return 0


@dataclasses.dataclass(frozen=True)
class ExpertCountAnalysis:
    """What ``analyze expert-count`` takes, flag for flag (see its ``--help``): malformed runs,
    one run file given for two expert counts (or also as the baseline) and unknown metrics are
    refused when the object is made, before any run is read."""

    runs: Sequence[str]  # EXPERTS=RUN, one per number of experts
    qrels: str
    baseline: str | None = None
    metrics: Sequence[str] = EXPERT_COUNT_METRICS
    quiet: bool = False
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        places = [(f"--runs {count}={path}", path) for count, path in parse_runs(self.runs).items()]
        if self.baseline:
            places.append((f"--baseline {self.baseline}", self.baseline))
        refuse_one_file_twice(places)
        self.metric_names()

    def metric_names(self) -> list[str]:
        """The metrics as ``eval`` takes them (:func:`distinct_metrics`): a name repeated as
        written is one column, not two identical ones; two spellings of one measure are
        refused."""
        return [metric.name for metric in distinct_metrics(self.metrics)]

    def run_files(self) -> dict[str, str]:
        """``{row label: run file}``: the baseline's row first, then one per expert count."""
        files = {"fine-tuned": self.baseline} if self.baseline else {}
        files.update({str(count): path for count, path in parse_runs(self.runs).items()})
        return files


def run_expert_count(analysis: ExpertCountAnalysis) -> int:
    """``analyze expert-count``: evaluate each expert count's run (and the baseline), write the
    table (and the plot). Every run is read and checked against the qrels before any is
    evaluated: one sharing no query with them would be a row of 0.0000 (as ``analyze came``
    refuses it)."""

    metrics = analysis.metric_names()
    qrels = load_qrels(analysis.qrels)
    runs = {}
    for label, path in analysis.run_files().items():
        runs[label] = read_trec_run(path)
        name = "the baseline" if label == "fine-tuned" else f"the {label}-expert"
        refuse_run_without_judged_queries(name, path, runs[label], qrels, analysis.qrels)
    check_coverage({f"--runs {label}={path}" if label != "fine-tuned" else f"--baseline {path}":
                    runs[label] for label, path in analysis.run_files().items()}, qrels)
    scores = {label: evaluate(run, qrels, metrics)
              for label, run in tqdm(runs.items(), desc="evaluate", disable=analysis.quiet)}
    baseline = scores.pop("fine-tuned") if analysis.baseline else None
    results = {int(label): values for label, values in scores.items()}
    table = format_expert_count(results, metrics, baseline)
    text = f"SB-MoE against the number of experts on {analysis.qrels}:\n\n{table}\n"
    emit(text, analysis.output)
    if analysis.plot:
        plot_expert_count(results, metrics, analysis.plot, f"SB-MoE on {analysis.qrels}",
                          baseline)
    return 0
