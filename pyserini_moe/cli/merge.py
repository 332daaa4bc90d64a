"""``python -m pyserini_moe.merge``: join the shards of a sharded index build."""

from __future__ import annotations

import sys

from pyserini_moe.cli import ArgumentParser, HelpFormatter
from pyserini_moe.io import refuse_input_as_output


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.merge",
        description="Merge the shards written by `python -m pyserini_moe.index --shard-id I "
                    "--shard-num N` into the index one process would have built.",
        formatter_class=HelpFormatter)
    parser.add_argument("--shards", nargs="+", required=True,
                        help="the shard folders, any order; shards of another encoder or of "
                             "another corpus (even one of the same name) are refused")
    parser.add_argument("--index", required=True, help="output index folder")
    parser.add_argument("--threads", type=int, default=1, help="Lucene indexing threads (impact)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing index")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    from pyserini_moe.index.merge import merge  # torch: not for --help
    from pyserini_moe.modeling.device import check_parallelism

    check_parallelism("--threads", args.threads)
    refuse_input_as_output([args.index], args.shards)
    merged = merge(args.shards, args.index, args.threads, args.overwrite, not args.quiet)
    print(f"{len(args.shards)} shards merged into {merged}", file=sys.stderr)
    return 0

