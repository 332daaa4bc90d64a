"""``python -m pyserini_moe.index``: build an index of a collection.

Example::

    python -m pyserini_moe.index --retriever bm25 --corpus scifact --index indexes/scifact-bm25
"""

from __future__ import annotations

import argparse
import sys
import time

from pyserini_moe.cli import run_main

RETRIEVERS = ("bm25",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.index",
        description="Build an index of a collection in the BEIR layout with Pyserini's indexer. "
                    "The index is written to a temporary folder and renamed when complete.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--retriever", choices=RETRIEVERS, default="bm25", help="kind of index")
    parser.add_argument("--corpus", required=True,
                        help="collection name (scifact, cranfield, ... or a public BEIR name) or a "
                             "folder with corpus.jsonl(.gz)")
    parser.add_argument("--index", required=True, help="output index folder")
    parser.add_argument("--threads", type=int, default=1, help="indexing threads")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing index")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads < 1:
        raise ValueError("--threads must be >= 1")
    start = time.perf_counter()
    if args.retriever == "bm25":
        from pyserini_moe.index.lucene import build_bm25_index  # noqa: PLC0415

        build_bm25_index(args.corpus, args.index, threads=args.threads, overwrite=args.overwrite)
    print(f"{args.retriever} index written to {args.index} in {time.perf_counter() - start:.1f}s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
