"""``python -m pyserini_moe.pretrain``: CoT-MAE pre-training of a CoT-MoTE encoder.

Examples::

    python -m pyserini_moe.pretrain --backbone all-minilm-l6-v2 --variant mote \\
        --corpus scifact cranfield cisi vaswani --queries scifact:train \\
        --output-dir work/models/cotmote-pt --max-steps 300
    # then fine-tune from it: model.backbone: work/models/cotmote-pt/model
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pyserini_moe.cli import ArgumentParser, HelpFormatter, finite_float, seed
from pyserini_moe.cli.args import add_device_arg
from pyserini_moe.io import refuse_input_as_output, refuse_one_file_twice, refuse_special_output
from pyserini_moe.outputs import refuse_foreign_folder


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The description and epilog as written (their lines are set by hand), and every flag's
    default, as the other commands show it."""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.pretrain",
        description="Pre-train a CoT-MoTE encoder (or its Siamese / fully separated baseline)\n"
                    "with CoT-MAE: masked-LM on the encoder plus a one-layer decoder that\n"
                    "reconstructs a contextual span from the [CLS] vector (cot-mote.txt eq. 11-12).\n"
                    "Writes <output-dir>/model (a cotmote model that fine-tuning recipes start\n"
                    "from), pretrain_log.jsonl and pretrain_args.json.",
        epilog="Contextual spans: neighbouring sentences of each --corpus document, judged\n"
               "queries of --queries COLLECTION:SPLIT, docT5query output via\n"
               "--pseudo-queries CORPUS=FILE (lines docid<TAB>query).\n"
               "On a busy machine, OMP_NUM_THREADS=1 is often faster.",
        formatter_class=_HelpFormatter)
    parser.add_argument("--backbone", default="all-minilm-l6-v2",
                        help="HF name or folder of a BERT-style encoder (default: packaged MiniLM)")
    parser.add_argument("--variant", choices=("mote", "siamese", "separate"), default="mote",
                        help="Q-FFN/P-FFN experts, one shared encoder, or two encoders")
    parser.add_argument("--sparse-head", choices=("plain", "mlm"), default="plain",
                        help="the encoder's sparse head: eq. 4's plain h E^T, or BERT's MLM "
                             "prediction head (pre-trained here as the MLM head); fine-tune with "
                             "the same model.args.sparse_head")
    parser.add_argument("--pooling", choices=("cls", "mean"), default="cls",
                        help="the encoder's dense vector, the decoder's bottleneck (the paper: "
                             "cls); fine-tune with the same model.args.pooling")
    parser.add_argument("--corpus", nargs="*", default=[], metavar="COLLECTION",
                        help="collections whose documents give neighbouring-span pairs")
    parser.add_argument("--queries", nargs="*", default=[], metavar="COLLECTION:SPLIT",
                        help="judged (query, document) pairs, e.g. scifact:train")
    parser.add_argument("--pseudo-queries", nargs="*", default=[], metavar="CORPUS=FILE",
                        help="docT5query output for a corpus: lines docid<TAB>query")
    parser.add_argument("--output-dir", required=True, type=Path,
                        help="folder of the pre-training output: model/, pretrain_log.jsonl, "
                             "pretrain_args.json")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier pre-training output (refused while it holds "
                             "files pre-training does not write)")
    parser.add_argument("--max-steps", type=int, default=300, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=16, help="examples per forward pass")
    parser.add_argument("--grad-accumulation", type=int, default=1,
                        help="forward passes per optimizer step: the batch the learning rate "
                             "sees is --batch-size x this (the paper's 2048 = 256 x 8)")
    parser.add_argument("--max-length", type=int, default=128, help="encoder tokens")
    parser.add_argument("--context-max-length", type=int, default=64, help="decoder tokens")
    parser.add_argument("--mask-ratio", type=finite_float, default=0.3,
                        help="share of encoder tokens masked (CoT-MAE: 0.3)")
    parser.add_argument("--learning-rate", type=finite_float, default=1e-4,
                        help="peak learning rate (linear warm-up, then linear decay)")
    parser.add_argument("--encoder-learning-rate", type=finite_float, default=None,
                        help="learning rate of the encoder's own layers (default: "
                             "--learning-rate; the MLM head and the decoder always use "
                             "--learning-rate); lower it, or 0 to freeze the encoder, to keep a "
                             "backbone that already retrieves well")
    parser.add_argument("--warmup-ratio", type=finite_float, default=0.1,
                        help="share of the steps spent warming the learning rate up")
    parser.add_argument("--switch-experts", action="store_true",
                        help="ablation (table 4): queries through P-FFN, passages through Q-FFN")
    parser.add_argument("--seed", type=seed, default=42,
                        help="the random seed (numpy's range: 0 to 2**32 - 1)")
    add_device_arg(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyserini_moe").setLevel(logging.INFO)
    from pyserini_moe.modeling.base import check_device
    from pyserini_moe.train.pretrain import PretrainArgs, pretrain

    settings = PretrainArgs(
        backbone=args.backbone, variant=args.variant, sparse_head=args.sparse_head,
        pooling=args.pooling, corpora=tuple(args.corpus),
        queries=tuple(args.queries), pseudo_queries=tuple(args.pseudo_queries),
        max_steps=args.max_steps, batch_size=args.batch_size,
        grad_accumulation=args.grad_accumulation, max_length=args.max_length,
        context_max_length=args.context_max_length, mask_ratio=args.mask_ratio,
        learning_rate=args.learning_rate, encoder_learning_rate=args.encoder_learning_rate,
        warmup_ratio=args.warmup_ratio,
        switch_experts=args.switch_experts, seed=args.seed)
    settings.check()
    _refuse_repeats(args)
    refuse_input_as_output([str(args.output_dir)],
                           [args.backbone, *args.corpus, *args.queries,
                            *[part for q in args.pseudo_queries for part in q.split("=", 1)]])
    _check_output(args.output_dir, args.overwrite)
    # written beside the output and swapped in whole (io.atomic_path): a failure or Ctrl-C keeps
    # an earlier output as it was and leaves nothing that would block a rerun
    model_dir = pretrain(settings, args.output_dir, check_device(args.device),
                         progress=not args.quiet)
    print(f"pre-trained encoder saved to {model_dir}", file=sys.stderr)
    return 0


def _refuse_repeats(args: argparse.Namespace) -> None:
    """One input listed twice (``--corpus A A``, one pseudo-query file under two entries) counted
    its examples twice without a word; refused, as fuse refuses a run listed twice."""
    for flag, values in (("--corpus", args.corpus), ("--queries", args.queries)):
        refuse_one_file_twice(((f"{flag} {value}", value) for value in values), "input")
    refuse_one_file_twice(((f"--pseudo-queries {value}", value.partition("=")[2])
                           for value in args.pseudo_queries), "input")


def _check_output(output: Path, overwrite: bool) -> None:
    """Before any input is read: ``--overwrite`` replaces only an earlier pre-training output
    holding nothing else, or an empty folder (it once deleted a folder of the user's files, and
    an earlier model before inputs that then failed); nothing is deleted here."""
    from pyserini_moe.train.pretrain import ARGS_FILE

    refuse_special_output(output)
    if not output.exists():
        return
    if not output.is_dir():
        raise FileExistsError(f"{output} is a file: name a folder for the pre-training output")
    if not overwrite:
        raise FileExistsError(f"{output} already exists; pass --overwrite to replace it")
    refuse_foreign_folder(output, ARGS_FILE)

