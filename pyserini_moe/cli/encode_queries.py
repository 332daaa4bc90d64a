"""``python -m pyserini_moe.encode_queries``: encode topics ahead of time for Pyserini's own
search command lines (see :mod:`pyserini_moe.search.encoded_queries`).

Examples::

    python -m pyserini_moe.encode_queries --index indexes/scifact-taser --topics scifact:test \\
        --output encoded/scifact-taser
    python -m pyserini.search.faiss --index indexes/scifact-taser --topics topics.tsv \\
        --encoded-queries encoded/scifact-taser --output run.trec --hits 1000
    python -m pyserini_moe.encode_queries --index indexes/scifact-cotmote-impact \\
        --topics scifact:test --output encoded/cotmote.jsonl
    python -m pyserini.search.lucene --impact --index indexes/scifact-cotmote-impact \\
        --topics topics.tsv --encoder encoded/cotmote.jsonl --output run.trec --hits 1000
"""

from __future__ import annotations

import argparse
import sys

from pyserini_moe.cli import ArgumentParser, HelpFormatter, positive_int
from pyserini_moe.cli.args import add_device_args
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.encode_queries",
        description="Encode topics with the query encoder an index records, in the form "
                    "Pyserini's command lines read: a folder with embedding.pkl for "
                    "pyserini.search.faiss --encoded-queries (dense), a JSON-lines file for "
                    "pyserini.search.lucene --impact --encoder (impact).",
        formatter_class=HelpFormatter)
    parser.add_argument("--index", required=True, help="a dense or impact index built by "
                                                       "python -m pyserini_moe.index")
    parser.add_argument("--topics", required=True, help="topics, as search takes them")
    parser.add_argument("--output", required=True,
                        help="dense: a folder (embedding.pkl inside); impact: a .jsonl file "
                             "(gzipped when named .gz); each records the encoder that made them")
    parser.add_argument("--encoder", default=None,
                        help="query encoder (default: the one recorded in the index)")
    parser.add_argument("--query-max-length", type=positive_int, default=None,
                        help="query tokens kept (default: what the index records, the length "
                             "its encoder was trained at, else every position the model has)")
    parser.add_argument("--query-max-terms", type=positive_int, default=None,
                        help="impact: query terms kept, the highest weights (default: search's, "
                             "1,024 or Lucene's clause limit); search --encoded-queries reads "
                             "them as cut here")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="queries per batch")
    add_device_args(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace encoded queries written before (never an index, a model or "
                             "a folder of other files)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    refuse_input_as_output([args.output], [args.index, args.topics, args.encoder])
    from pyserini_moe.data.topics import load_topics
    from pyserini_moe.index.meta import read_meta
    from pyserini_moe.search.encoded_queries import encode_queries

    meta = read_meta(args.index)
    if meta is None:
        raise UserError(f"{args.index} has no pyserini_moe_index.json: encode queries for an "
                        "index built by python -m pyserini_moe.index")
    if args.query_max_terms is not None and meta.kind != "impact":
        raise UserError(f"--query-max-terms cuts impact queries; {args.index} is a {meta.kind} "
                        "index: leave it out")
    topics = load_topics(args.topics)
    out = encode_queries(args.index, meta.kind, topics, args.output, args.encoder,
                         args.device, args.query_max_length, args.batch_size, args.overwrite,
                         args.precision, args.query_max_terms)
    print(f"{len(topics)} queries encoded for {meta.kind_phrase} into {out}", file=sys.stderr)
    return 0
