"""``python -m pyserini_moe.analyze``: analyses of Mixture-of-Experts retrievers, one module per
system in :mod:`pyserini_moe.analyze` (``taser``: routing; ``sbmoe``: experts, expert-count;
``cotmote``: divergence; ``came``: came). Each system's subcommands are added by one function
here, ``(subparsers, encoding_parent) -> {subcommand: (settings class, runner)}``; a fifth
system adds one. The parsed flags become the subcommand's settings object (a frozen dataclass
of the analysis module, which checks itself), so the analyses never see ``argparse``. Every
count that must be at least 1 (tokens, batch size, depth, bins, documents) is a ``positive_int``:
a plain ``int`` let -3 reach the tokenizer (a traceback) and 0 pass as "no limit"; ``--sample``
(0: all) and ``--cases`` (0: none) keep their own checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.analyze import came, cotmote, sbmoe, taser
from pyserini_moe.analyze.common import refuse_foreign_reports
from pyserini_moe.cli import (
    ArgumentParser,
    finite_float,
    output_file,
    positive_int,
    seed,
    settings_from,
)
from pyserini_moe.cli.args import add_device_arg
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output, refuse_special_output
from pyserini_moe.lab import checkpoints

# An analysis as the command line runs it: its settings class, and the runner taking one.
Analysis = tuple[type[Any], Callable[[Any], int]]


def _taser_parsers(sub: Any, encoding: argparse.ArgumentParser) -> dict[str, Analysis]:
    routing = sub.add_parser("routing", help="expert shares per side and specialised block",
                             parents=[encoding])
    routing.add_argument("--model", required=True, help="a saved TASER model folder")
    routing.add_argument("--corpus", required=True, help="collection whose passages to route")
    routing.add_argument("--topics", required=True, help="queries to route (as in search)")
    routing.add_argument("--sample", type=int, default=1000,
                         help="passages sampled from the corpus (seeded); 0 = all")
    routing.add_argument("--output", type=output_file, help="also write the Markdown table here")

    return {"routing": (taser.RoutingAnalysis, taser.run_routing)}


def _sbmoe_parsers(sub: Any, encoding: argparse.ArgumentParser) -> dict[str, Analysis]:
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
    experts.add_argument("--seed", type=seed, default=0, help="seed of --sample")
    experts.add_argument("--min-docs", type=positive_int, default=sbmoe.PAPER_MIN_DOCS,
                         help="documents an expert must win to be activated (paper: 100000)")
    experts.add_argument("--threshold", type=finite_float, default=None, metavar="PCT",
                         help="activation threshold as a percentage of the routed texts "
                              "(overrides --min-docs)")
    experts.add_argument("--batch-size", type=positive_int, default=32, help="texts per batch")
    experts.add_argument("--query-max-length", type=positive_int, default=64, help="query tokens")
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
    count.add_argument("--metrics", nargs="+", default=list(sbmoe.EXPERT_COUNT_METRICS),
                       help="metrics (default: the paper's nDCG@10 and R@100)")
    count.add_argument("--output", type=output_file, help="also write the Markdown table here")
    count.add_argument("--plot", help="write a PNG line plot here")
    count.add_argument("--quiet", action="store_true", help="no progress bars")
    return {"experts": (sbmoe.ExpertsAnalysis, sbmoe.run_experts),
            "expert-count": (sbmoe.ExpertCountAnalysis, sbmoe.run_expert_count)}


def _cotmote_parsers(sub: Any, encoding: argparse.ArgumentParser) -> dict[str, Analysis]:
    parser = sub.add_parser(
        "divergence", parents=[encoding],
        help="CoT-MoTE: KL / JS divergence of query vs passage embeddings, t-SNE plot",
        description="Encode judged (query, relevant passage) pairs with each model's dense "
                    "representation and report the KL and JS divergences between the query-to-"
                    "passage and passage-to-query distance distributions (cot-mote.txt appendix "
                    "A.1, eq. 14-19), with paired t-tests against the first model, and optionally "
                    "a t-SNE plot of queries vs passages per model (figures 2 and 4).")
    parser.add_argument("--model", nargs="+", required=True, metavar="NAME=MODEL",
                        help="saved models (or backbones, zero-shot), e.g. siamese=... mote=...")
    parser.add_argument("--corpus", required=True, help="collection holding the passages")
    parser.add_argument("--topics", required=True, help="queries (as in search)")
    parser.add_argument("--qrels", required=True, help="judgments pairing queries and passages")
    parser.add_argument("--sample", type=int, default=0,
                        help="pairs sampled (seeded); 0 = every judged query")
    parser.add_argument("--seed", type=seed, default=0, help="seed of --sample and t-SNE")
    parser.add_argument("--query-max-length", type=positive_int, default=64, help="query tokens")
    parser.add_argument("--output", type=output_file, help="also write the Markdown table here")
    parser.add_argument("--plot", help="write the t-SNE PNG here")
    return {"divergence": (cotmote.DivergenceAnalysis, cotmote.run_divergence)}


def _came_parsers(sub: Any, _encoding: argparse.ArgumentParser) -> dict[str, Analysis]:
    """The ``came`` subcommand; it reads runs only, so it takes none of the model flags."""
    parser = sub.add_parser(
        "came", help="CAME: experts vs fusion (table 3), expert overlap (RBO), case study "
                     "(figure 4)",
        description="Compare CAME's experts and fused runs: metrics with paired tests against "
                    "the best expert (table 3), rank-biased overlap and top-k overlap between "
                    "the experts' lists and the relevant documents only one expert finds "
                    "(section 5.3), and the queries where the experts disagree most "
                    "(figure 4). Expert runs come from `python -m pyserini_moe.search "
                    "--retriever fused --expert-runs PREFIX`: "
                    + ", ".join(f"PREFIX.{kind}.trec ({name})" for name, kind in came.EXPERTS.items())
                    + ".")
    parser.add_argument("--expert-runs", nargs="+", required=True, metavar="EXPERT=RUN",
                      help="two or three of lexical=RUN local=RUN global=RUN")
    parser.add_argument("--fused", nargs="+", metavar="NAME=RUN",
                      help="fused runs, e.g. sum=runs/came.trec norm_sum=runs/came-norm.trec")
    parser.add_argument("--qrels", required=True,
                      help="qrels (as in eval: scifact:test, a file, a Pyserini name)")
    parser.add_argument("--topics", help="topics, for the query texts of the case study")
    parser.add_argument("--corpus", help="collection (name or BEIR folder), for document titles "
                                       "in the case study")
    parser.add_argument("--metrics", nargs="+", default=list(came.DEFAULT_METRICS),
                      help="metrics; the first picks the best expert (default: "
                           f"{' '.join(came.DEFAULT_METRICS)})")
    parser.add_argument("--depth", type=positive_int, default=came.PAPER_DEPTH,
                      help="ranks compared by RBO and searched for the first relevant document "
                           f"(default: {came.PAPER_DEPTH}, the paper's top 1000)")
    parser.add_argument("--rbo-p", type=finite_float, default=came.DEFAULT_RBO_P,
                      help="RBO persistence p (default: 0.9, which gives the top 10 ranks 86%% of "
                           "the weight; the paper does not state its p)")
    parser.add_argument("--cases", type=int, default=5, help="queries in the case study")
    parser.add_argument("--output", type=output_file, help="also write the Markdown here")
    parser.add_argument("--plot", help="write a PNG heat map of the RBO matrix here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    competition = sub.add_parser(
        "came-competition", help="CAME: the eq. 11 weights and each expert's loss over training",
        description="Summarise CAME training logs (train_log.jsonl in the output folder): each "
                    "expert's batch-mean competitive weight (eq. 11) and contrastive loss per "
                    "stretch of training, and how often each expert led the competition.")
    competition.add_argument("--log", nargs="+", required=True, metavar="NAME=LOG",
                             help="training logs (train_log.jsonl, or .jsonl.gz) or training "
                                  "output folders, e.g. came=work/came/train_log.jsonl")
    competition.add_argument("--bins", type=positive_int, default=10,
                             help="stretches of steps the table cuts training into (default: 10)")
    competition.add_argument("--output", type=output_file, help="also write the Markdown here")
    competition.add_argument("--plot", help="write a PNG of the weights over the steps here")
    return {"came": (came.CameAnalysis, came.run_came),
            "came-competition": (came.CompetitionAnalysis, came.run_competition)}


def _checkpoint_parsers(sub: Any, _encoding: argparse.ArgumentParser) -> dict[str, Analysis]:
    """``checkpoints``: any model, so it sits beside the four systems' analyses."""
    parser = sub.add_parser(
        "checkpoints", help="checkpoint selection across training seeds (snapshots/step-N)",
        description="Index and search every snapshot a training kept (training.keep_snapshots) "
                    "as the regression files do, on its held-out dev queries and on test "
                    "queries, then report which step each selection rule keeps for each seed "
                    "(lowest validation loss, best dev metric, last step) and what that step "
                    "scores on test: the spread a rule leaves between seeds. Test queries are "
                    "a diagnosis; no rule looks at them. Each training's evaluation is cached in "
                    "its snapshots/evaluation.json.")
    parser.add_argument("--train-dir", nargs="+", required=True, metavar="[SEED=]DIR",
                        help="training output folders, one per seed, e.g. 42=work/detr-s42")
    parser.add_argument("--corpus", required=True, help="collection the snapshots search")
    parser.add_argument("--test", default=None,
                        help="test topics and qrels, `collection:split` (default: "
                             "<corpus>:test)")
    parser.add_argument("--metric", default="ndcg@10", help="test metric of the report")
    parser.add_argument("--dev-metric", default="ndcg@10",
                        help="retrieval metric of the dev-<metric> rule")
    parser.add_argument("--kind", default="dense", choices=checkpoints.KINDS,
                        help="index kind the snapshots are searched with; fused: an index "
                             "per CAME expert, fused as CAME's rows (came_sum, eq. 12)")
    parser.add_argument("--max-length", type=positive_int, default=256,
                        help="passage tokens of the snapshots' indexes (the regressions': 256)")
    parser.add_argument("--query-max-length", type=positive_int, default=None,
                        help="query tokens when searching (default: the length each snapshot "
                             "was trained with; the regression rows' length reproduces their "
                             "numbers at the last step)")
    parser.add_argument("--title", default="Checkpoint selection", help="report heading")
    parser.add_argument("--output", type=output_file, help="also write the Markdown here")
    parser.add_argument("--plot", help="PNG of the first seed's metrics against the step")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return {"checkpoints": (checkpoints.CheckpointsAnalysis, checkpoints.run_checkpoints)}


ANALYSES = (_taser_parsers, _sbmoe_parsers, _cotmote_parsers, _came_parsers, _checkpoint_parsers)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.analyze",
        description="Analyses of Mixture-of-Experts retrievers: TASER's expert shares per "
                    "block, SB-MoE's experts won and activated, SB-MoE against its number of "
                    "experts, CoT-MoTE's query-passage divergences, CAME's experts compared. "
                    "An existing --output or --plot file is replaced only when an earlier "
                    "analysis wrote it.")
    sub = parser.add_subparsers(dest="command", required=True)
    # Flags every model-routing subcommand takes.
    encoding = ArgumentParser(add_help=False)
    encoding.add_argument("--max-length", type=positive_int, default=256, help="passage / document tokens")
    add_device_arg(encoding)
    encoding.add_argument("--quiet", action="store_true", help="no progress bars")
    commands = {}
    for add_parsers in ANALYSES:
        commands.update(add_parsers(sub, encoding))
    args = parser.parse_args(argv)
    refuse_input_as_output([args.output, getattr(args, "plot", None)], _inputs(args))
    refuse_foreign_reports(args.output, getattr(args, "plot", None))
    refuse_non_png_plot(getattr(args, "plot", None))
    refuse_unwritable_outputs(args.output, getattr(args, "plot", None))
    settings, run = commands[args.command]
    return run(_settings(settings, args))


def refuse_non_png_plot(plot: str | None) -> None:
    """Every analysis writes its ``--plot`` as a PNG: a name with another suffix (``a.txt``,
    ``a.pdf``) got a PNG under it without a word, so it is refused before the work."""
    if plot is not None and Path(plot).suffix.lower() != ".png":
        raise UserError(f"--plot {plot}: the plot is written as a PNG image: give a file name "
                        "ending in .png")


def refuse_unwritable_outputs(output: str | None, plot: str | None) -> None:
    """An output that cannot be written there (an existing folder, a device, a link) failed
    only when written, after the analysis had run and printed its tables, so a
    script saw a report and then a failure: refused here, before the work."""
    for flag, path in (("--output", output), ("--plot", plot)):
        if path is None:
            continue
        target = Path(path)
        if target.is_dir():
            raise UserError(f"{flag} {path} is a directory: name a file to write")
        refuse_special_output(target)


def _settings(settings: type[Any], args: argparse.Namespace) -> Any:
    """The parsed flags as the analysis's ``settings`` object, which refuses what cannot work.
    It takes the flags its analysis reads; the others (the shared ``--quiet`` of ``divergence``,
    which shows no progress) are left out."""
    return settings_from(settings, args)


def _inputs(args: argparse.Namespace) -> list[str]:
    """Every path-like value the subcommand reads (``NAME=PATH`` values by their path)."""
    found: list[str] = []
    for name, value in vars(args).items():
        if name in ("output", "plot", "command"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                found.append(_read_path(args.command, name, item.split("=", 1)[-1]))
    return found


def _read_path(command: str, name: str, path: str) -> str:
    """What a value names for reading: ``came-competition --log`` of a training folder reads
    its ``train_log.jsonl`` only, so a report written in that folder replaces nothing read."""
    if command == "came-competition" and name == "log" and Path(path).is_dir():
        return str(Path(path) / came.LOG_FILE)
    return path
