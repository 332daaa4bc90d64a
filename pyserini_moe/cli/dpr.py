"""``python -m pyserini_moe.dpr``: DPR's published data -> the layout pyserini_moe reads (see
:mod:`pyserini_moe.data.dpr` for the formats)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyserini_moe.cli import ArgumentParser, output_file
from pyserini_moe.cli.convert import refuse_name_of_another_format
from pyserini_moe.data.dpr import (
    check_collection_output,
    check_corpus_output,
    check_qid_prefix,
    convert_qa,
    convert_training,
    convert_wikipedia,
    merge_runs,
    refuse_existing,
)
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output, refuse_one_file_twice


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values or []:
        name, sep, file = value.partition("=")
        if not sep or not name or not file:
            raise UserError(f"{flag} {value!r}: expected NAME=FILE, e.g. nq=biencoder-nq-train.json")
        if name in out:
            raise UserError(f"{flag}: data set {name!r} given twice")
        out[name] = file
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.dpr",
        description="Convert DPR's published data (psgs_w100.tsv, biencoder-*.json, *.qa.csv) "
                    "into the BEIR layout, topics and answer files of pyserini_moe.")
    sub = parser.add_subparsers(dest="command", required=True)
    wiki = sub.add_parser("wiki", help="psgs_w100.tsv -> corpus.jsonl.gz (streamed)")
    wiki.add_argument("--input", required=True, help="psgs_w100.tsv (or .tsv.gz)")
    wiki.add_argument("--output", required=True, type=output_file,
                      help="e.g. data/dpr/corpus.jsonl.gz")
    wiki.add_argument("--quiet", action="store_true", help="no progress bar")
    train = sub.add_parser("train", help="biencoder-*.json -> queries, qrels, BM25-negatives run, "
                                         "topics (one merged multi-set collection)")
    train.add_argument("--train", nargs="+", required=True, metavar="SET=FILE",
                       help="e.g. nq=biencoder-nq-train.json trivia=biencoder-trivia-train.json")
    train.add_argument("--dev", nargs="+", metavar="SET=FILE",
                       help="e.g. nq=biencoder-nq-dev.json trivia=biencoder-trivia-dev.json")
    train.add_argument("--output", required=True, help="collection folder (the corpus goes there too)")
    qa = sub.add_parser("qa", help="<set>-test.qa.csv -> topics JSONL with answers")
    qa.add_argument("--input", required=True, help="e.g. nq-test.qa.csv")
    qa.add_argument("--output", required=True, type=output_file, help="e.g. data/dpr/test/nq.jsonl")
    qa.add_argument("--prefix", default="", help="prepended to the row numbers used as qids "
                                                 "(default none: Pyserini's dpr-*-test qids)")
    merge = sub.add_parser("merge-runs", help="per query, the hits of the first run that has it")
    merge.add_argument("--runs", nargs="+", required=True, help="TREC runs, by priority")
    merge.add_argument("--output", required=True, type=output_file, help="merged TREC run")
    for command in (wiki, train, qa, merge):
        command.add_argument("--overwrite", action="store_true",
                             help="replace an existing output (train: an earlier collection, "
                                  "whole; its corpus.jsonl.gz is kept)")
    return parser


def _refuse_before_work(args: argparse.Namespace) -> None:
    """What would be refused after hours of conversion, refused first: an existing output
    without --overwrite, a collection folder holding other files, a query id prefix with
    whitespace, an output named for another format, a corpus beside another one."""
    if args.command == "train":
        _refuse_one_file_as_two_sets(args)
        check_collection_output(Path(args.output), args.overwrite)
    else:
        refuse_existing(args.output, args.overwrite)
    if args.command == "qa":
        check_qid_prefix(args.prefix)
        refuse_name_of_another_format(args.output, "dpr qa", "topics as JSON lines "
                                      "({\"_id\", \"text\", \"answers\"})", ".jsonl",
                                      fits=(".jsonl",))
    elif args.command == "merge-runs":
        refuse_name_of_another_format(args.output, "dpr merge-runs", "a TREC run", ".trec",
                                      fits=(".trec",))
    elif args.command == "wiki":
        check_corpus_output(Path(args.output))


def _refuse_one_file_as_two_sets(args: argparse.Namespace) -> None:
    """One DPR file under two set names doubles its questions (two sets of one), and one file as
    ``--train`` and ``--dev`` makes the dev split the train split: model selection on the
    questions trained on. Each is refused however the file is spelt."""
    places = [(f"{flag} {name}={file}", file)
              for flag, values in (("--train", args.train), ("--dev", args.dev))
              for name, file in _pairs(values, flag).items()]
    refuse_one_file_twice(places, "DPR file")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    inputs = {"wiki": lambda: [args.input], "qa": lambda: [args.input],
              "merge-runs": lambda: args.runs,
              "train": lambda: [*_pairs(args.train, "--train").values(),
                                *_pairs(args.dev, "--dev").values()]}[args.command]()
    refuse_input_as_output([args.output], inputs)
    _refuse_before_work(args)
    if args.command == "wiki":
        count = convert_wikipedia(args.input, args.output, progress=not args.quiet,
                                  overwrite=args.overwrite)
        print(f"{count} passages written to {args.output}", file=sys.stderr)
    elif args.command == "train":
        stats = convert_training(_pairs(args.train, "--train"), args.output,
                                 _pairs(args.dev, "--dev"), overwrite=args.overwrite)
        for key, count in stats.questions.items():
            print(f"{key}: {count} questions ({stats.skipped_without_positive[key]} without a "
                  "positive passage skipped)", file=sys.stderr)
        if not stats.negatives:
            print("warning: no training question has a hard negative (other than its "
                  "positives): no bm25-negatives.train.trec is written; mine negatives "
                  "(data.negatives.source: bm25) or train on in-batch negatives "
                  "(data.num_negatives: 0)", file=sys.stderr)
    elif args.command == "qa":
        count = convert_qa(args.input, args.output, args.prefix, overwrite=args.overwrite)
        print(f"{count} questions written to {args.output}", file=sys.stderr)
    else:
        merged = merge_runs(args.runs, args.output, overwrite=args.overwrite)
        print(f"{len(merged)} queries written to {args.output}", file=sys.stderr)
    return 0

