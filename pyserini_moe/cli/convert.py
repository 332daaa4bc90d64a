"""``python -m pyserini_moe.convert``: topics and qrels in the forms Pyserini and trec_eval read.

Examples::

    python -m pyserini_moe.convert --topics scifact:test --output topics.scifact.test.tsv
    python -m pyserini_moe.convert --qrels scifact:test --output qrels.scifact.test.txt
    python -m pyserini.search.lucene --index ... --topics topics.scifact.test.tsv ...
    python -m pyserini.eval.trec_eval -c -m ndcg_cut.10 qrels.scifact.test.txt run.trec

The collections' own BEIR qrels (``qrels/test.tsv``, with a header line) are not what
trec_eval reads; the TREC qrels written here are.
"""

from __future__ import annotations

import argparse
import sys

from pyserini_moe.cli import ArgumentParser, HelpFormatter, output_file
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.convert",
        description="Write topics as qid<TAB>text (what Pyserini's --topics reads from a .tsv "
                    "file) or qrels as TREC 'qid 0 docid rel' lines (what trec_eval reads), "
                    "from anything search and eval take: COLLECTION:SPLIT, a file, a Pyserini "
                    "name.", formatter_class=HelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--topics", help="topics to write (e.g. scifact:test)")
    what.add_argument("--qrels", help="judgments to write (e.g. scifact:test)")
    parser.add_argument("--output", required=True, type=output_file,
                        help="file to write (atomically)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    return parser


# Suffixes that promise a format: a file of another format under one is read by the wrong reader
# wherever the suffix decides (Pyserini's topic readers do; ``.tsv`` qrels are read as BEIR's,
# with a header line; a ``.trec`` file is taken for a run), though this toolkit's readers sniff.
# A name with none of them (``.txt``, ``.qrels``, no suffix) promises nothing and is taken.
FORMAT_SUFFIXES = {".jsonl": "JSON", ".json": "JSON", ".tsv": "tab-separated values",
                   ".csv": "comma-separated values", ".trec": "a TREC run"}


def refuse_name_of_another_format(output: str, command: str, written: str, usual: str,
                                  fits: tuple[str, ...] = ()) -> None:
    """An ``output`` whose suffix (``.gz`` aside, which is honoured) promises a format other than
    the one ``command`` writes (``written``) is refused, suggesting the ``usual`` suffix; the
    suffixes in ``fits`` name the written format and pass."""
    name = output.removesuffix(".gz")
    suffix = next((s for s in FORMAT_SUFFIXES if name.endswith(s)), None)
    if suffix is not None and suffix not in fits:
        packed = ".gz" if output.endswith(".gz") else ""
        raise UserError(f"--output {output}: {command} writes {written}, not "
                        f"{FORMAT_SUFFIXES[suffix]}; name it {name.removesuffix(suffix)}{usual}"
                        f"{packed}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pathlib import Path

    from pyserini_moe.data.export import write_topics_tsv, write_trec_qrels
    from pyserini_moe.data.topics import load_qrels, load_topics

    refuse_input_as_output([args.output], [args.topics, args.qrels])
    if args.topics:
        refuse_name_of_another_format(args.output, "convert", "topics as qid<TAB>text lines",
                                      ".tsv", fits=(".tsv",))
    else:
        refuse_name_of_another_format(args.output, "convert",
                                      "TREC qrels lines (qid 0 docid rel)", ".txt")
    if Path(args.output).exists() and not args.overwrite:
        raise FileExistsError(f"{args.output} already exists; pass --overwrite to replace it")
    if args.topics:
        topics = load_topics(args.topics)
        write_topics_tsv(topics, args.output)
        print(f"{len(topics)} topics written to {args.output}", file=sys.stderr)
    else:
        qrels = load_qrels(args.qrels)
        write_trec_qrels(qrels, args.output)
        print(f"{sum(map(len, qrels.values()))} judgments of {len(qrels)} queries written to "
              f"{args.output}", file=sys.stderr)
    return 0
