"""``python -m pyserini_moe.analyze``: where a Mixture-of-Experts retriever sends its inputs.

* ``routing``: for TASER-style models (expert FFNs inside the Transformer,
  :mod:`pyserini_moe.modeling.experts`), per specialised block, the share of queries and of
  passages (sequences for Det-R / Seq-R, real tokens for Tok-R) routed to each expert at inference.
  It shows whether a learned router rediscovers the question / passage split that Det-R hard-codes
  (TASER appendix A and C).
* ``experts``: for SB-MoE, how many documents and queries each expert wins at inference (the
  gate's argmax) and which experts are "activated" (SB-MoE table III).
* ``expert-count``: SB-MoE's figure 2, nDCG@10 and R@100 against the number of experts.

The other systems' analyses live in their own modules and add their subcommands here
(:data:`ANALYSES`): :mod:`~pyserini_moe.analyze.cotmote` (``divergence``: KL / JS between query and
passage embeddings, t-SNE), :mod:`~pyserini_moe.analyze.came` (``came``: CAME's experts vs fusion,
RBO overlap between the experts, figure 4's case study).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pyserini_moe.cli import output_file
from pyserini_moe.errors import UserError

# SB-MoE section VI: an expert is activated when the gate ranks it first for "at least 100k
# documents of the given corpus" (table III's thresholds: 100k / corpus size, 1.14% to 3.85%).
PAPER_MIN_DOCS = 100_000
# Modules of this package that add subcommands: ``add_parsers(subparsers, encoding_parent)``
# returns {subcommand: runner}.
ANALYSES = ("cotmote", "came")
EXPERT_COUNT_METRICS = ("ndcg@10", "recall@100")  # figure 2's metrics


def routing_shares(model: Any, texts: dict[str, list[str]], batch_size: int = 32,
                   max_length: int = 256, progress: bool = True) -> dict[str, list[Counter]]:
    """side name -> one Counter (expert -> routed units) per specialised block."""
    from pyserini_moe.modeling.base import Side  # noqa: PLC0415

    out: dict[str, list[Counter]] = {}
    for side_name, items in texts.items():
        side = Side(side_name)
        counters: list[Counter] = []
        for start in tqdm(range(0, len(items), batch_size), desc=f"route {side_name}",
                          disable=not progress):
            choices = model.route(items[start:start + batch_size], side, max_length)
            counters = counters or [Counter() for _ in choices]
            for counter, choice in zip(counters, choices):
                counter.update(c for c in choice.flatten().tolist() if c >= 0)
        out[side_name] = counters
    return out


def format_shares(shares: dict[str, list[Counter]], blocks: list[int], experts: int) -> str:
    """Markdown: one row per (block, side), one column per expert (share of routed units)."""
    lines = ["| block | side | " + " | ".join(f"expert {e}" for e in range(experts)) + " |",
             "|---|---|" + "---:|" * experts]
    for b, layer in enumerate(blocks):
        for side, counters in shares.items():
            total = sum(counters[b].values()) or 1
            cells = " | ".join(f"{counters[b][e] / total:.3f}" for e in range(experts))
            lines.append(f"| layer {layer + 1} | {side} | {cells} |")
    return "\n".join(lines)


# -- SB-MoE: experts won at inference (table III) -------------------------------------------
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


def _figure(width: float = 6.4, height: float = 4.0, ncols: int = 1) -> tuple[Any, Any]:
    """A figure without pyplot (no GUI backend, no global state): safe in tests and on servers."""
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def emit(text: str, output: str | Path | None) -> None:
    """Print a report, and write it to ``output`` (atomically) when one is given."""
    from pyserini_moe.io import atomic_path  # noqa: PLC0415

    print(text)
    if output:
        with atomic_path(output) as tmp:
            tmp.write_text(text)


def _save_png(fig: Any, path: str | Path) -> None:
    from pyserini_moe.io import atomic_path  # noqa: PLC0415

    with atomic_path(path) as tmp:  # the temporary name has no .png suffix: say the format
        fig.savefig(tmp, format="png", dpi=150)


def plot_experts(stats: dict[str, ExpertStats], threshold: float, path: str | Path,
                 title: str) -> None:
    """Grouped bars: each expert's share of wins per side, the activation threshold dashed."""
    import numpy as np  # noqa: PLC0415

    fig, (ax,) = _figure()
    n = len(next(iter(stats.values())).wins)
    x, width = np.arange(n), 0.8 / len(stats)
    for i, (side, s) in enumerate(stats.items()):
        ax.bar(x + (i - (len(stats) - 1) / 2) * width, [100 * v for v in s.shares], width,
               label=f"{side} ({s.total})")
    ax.axhline(100 * threshold, color="black", linestyle="--", linewidth=1,
               label=f"activation threshold ({threshold:.2%})")
    ax.set(xticks=x, xlabel="expert", ylabel="share of texts won (%)", title=title)
    ax.legend()
    _save_png(fig, path)


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
    fig, axes = _figure(4.5, 3.6, len(metrics))
    counts = list(results)
    for ax, metric in zip(axes, metrics):
        ax.plot(counts, [results[c][metric] for c in counts], marker="o", label="SB-MoE")
        if baseline is not None:
            ax.axhline(baseline[metric], color="gray", linestyle="--", label="fine-tuned")
        ax.set(xticks=counts, xlabel="number of experts", ylabel=metric)
        ax.legend()
    fig.suptitle(title)
    _save_png(fig, path)


# -- command line ----------------------------------------------------------------------------
def _run_routing(args: argparse.Namespace) -> int:
    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415
    from pyserini_moe.modeling.base import load_model  # noqa: PLC0415

    model = load_model(args.model, args.device)
    if not hasattr(model, "expert_layers"):
        raise UserError(f"{args.model} is a {model.model_type} model: routing analysis needs "
                        "expert FFN blocks (taser)")
    passages = [doc.contents for doc in BeirCollection.load(args.corpus).corpus()]
    if args.sample and args.sample < len(passages):
        passages = random.Random(0).sample(passages, args.sample)
    queries = list(load_topics(args.topics).values())
    shares = routing_shares(model, {"query": queries, "passage": passages},
                            max_length=args.max_length, progress=not args.quiet)
    table = format_shares(shares, model.specialised, model.args["num_experts"])
    unit = "tokens" if model.args["router"] == "tok" else "sequences"
    text = (f"Routing of {len(queries)} queries and {len(passages)} passages by {args.model} "
            f"({model.args['router']} router; shares of {unit}):\n\n{table}\n")
    emit(text, args.output)
    return 0


def _run_experts(args: argparse.Namespace) -> int:
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


def _run_expert_count(args: argparse.Namespace) -> int:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.analyze",
        description="Analyses of Mixture-of-Experts retrievers: TASER's expert shares per "
                    "block, SB-MoE's experts won and activated, SB-MoE against its number of "
                    "experts, CoT-MoTE's query-passage divergences, CAME's experts compared.")
    sub = parser.add_subparsers(dest="command", required=True)
    # Flags every model-routing subcommand takes.
    encoding = argparse.ArgumentParser(add_help=False)
    encoding.add_argument("--max-length", type=int, default=256, help="passage / document tokens")
    encoding.add_argument("--device", default=None, help="cpu, cuda (default: CUDA when present)")
    encoding.add_argument("--quiet", action="store_true", help="no progress bars")
    routing = sub.add_parser("routing", help="expert shares per side and specialised block",
                             parents=[encoding])
    routing.add_argument("--model", required=True, help="a saved TASER model folder")
    routing.add_argument("--corpus", required=True, help="collection whose passages to route")
    routing.add_argument("--topics", required=True, help="queries to route (as in search)")
    routing.add_argument("--sample", type=int, default=1000,
                         help="passages sampled from the corpus (seeded); 0 = all")
    routing.add_argument("--output", type=output_file, help="also write the Markdown table here")

    experts = sub.add_parser(
        "experts", help="SB-MoE: documents / queries each expert wins, activated experts",
        description="Route a corpus and/or topics through a saved SB-MoE model's gate (no noise) "
                    "and count the texts each expert wins (the gate's argmax, the expert "
                    "SB-MoE_TOP-1 uses). An expert is activated, as in the paper's table III, "
                    "when it wins at least --min-docs documents of the corpus (100k in the "
                    "paper: 1.14% of MS MARCO, 3.85% of NQ), i.e. that share of the routed "
                    "texts; --threshold sets the share directly (needed for corpora smaller "
                    "than --min-docs). The same share applies to queries (the paper counts "
                    "documents only).", parents=[encoding])
    experts.add_argument("--model", required=True, help="a saved SB-MoE model folder")
    experts.add_argument("--corpus", help="collection whose documents to route (name or BEIR "
                                          "folder)")
    experts.add_argument("--topics", help="queries to route (as in search)")
    experts.add_argument("--sample", type=int, default=0,
                         help="documents sampled from the corpus (seeded); 0 = all, as the paper")
    experts.add_argument("--seed", type=int, default=0, help="seed of --sample")
    experts.add_argument("--min-docs", type=int, default=PAPER_MIN_DOCS,
                         help="documents an expert must win to be activated (paper: 100000)")
    experts.add_argument("--threshold", type=float, default=None, metavar="PCT",
                         help="activation threshold as a percentage of the routed texts "
                              "(overrides --min-docs)")
    experts.add_argument("--batch-size", type=int, default=32, help="texts per batch")
    experts.add_argument("--query-max-length", type=int, default=64, help="query tokens")
    experts.add_argument("--output", type=output_file, help="also write the Markdown tables here")
    experts.add_argument("--plot", help="write a PNG bar plot of the shares here")

    count = sub.add_parser(
        "expert-count", help="SB-MoE: effectiveness against the number of experts (figure 2)",
        description="Evaluate one run per number of experts (the paper: 3, 6, 9, 12, SB-MoE_ALL "
                    "on TinyBERT) and tabulate / plot the metrics against the expert count, with "
                    "the fine-tuned backbone as a baseline line.")
    count.add_argument("--runs", nargs="+", required=True, metavar="EXPERTS=RUN",
                       help="TREC run per expert count, e.g. 3=runs/e3.trec 6=runs/e6.trec")
    count.add_argument("--qrels", required=True, help="qrels (as in eval: scifact:test, a file, "
                                                      "a Pyserini name)")
    count.add_argument("--baseline", help="run of the fine-tuned backbone without MoE")
    count.add_argument("--metrics", nargs="+", default=list(EXPERT_COUNT_METRICS),
                       help="metrics (default: the paper's nDCG@10 and R@100)")
    count.add_argument("--output", type=output_file, help="also write the Markdown table here")
    count.add_argument("--plot", help="write a PNG line plot here")
    count.add_argument("--quiet", action="store_true", help="no progress bars")
    commands = {"routing": _run_routing, "experts": _run_experts, "expert-count": _run_expert_count}
    for module in ANALYSES:
        commands.update(importlib.import_module(f"pyserini_moe.analyze.{module}")
                        .add_parsers(sub, encoding))
    args = parser.parse_args(argv)
    return commands[args.command](args)
