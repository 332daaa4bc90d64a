"""``pyserini-moe COMMAND ...``: the console script, one name for every ``python -m`` command.

``pyserini-moe search --help`` is ``python -m pyserini_moe.search --help``; both run the same
module of this package, so flags, messages and exit codes are the same.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from pyserini_moe.cli import run_main

# command -> (module of pyserini_moe.cli, what it does); modules load only when their command runs
COMMANDS = {
    "index": ("index", "build BM25, dense, impact or multi-vector indexes"),
    "search": ("search", "search an index with topics, write a TREC run"),
    "encode-queries": ("encode_queries", "encode topics for Pyserini's own search commands"),
    "fuse": ("fuse", "fuse TREC runs (ranx, CAME's fusions, Pyserini hybrid)"),
    "eval": ("eval", "evaluate runs (ranx, checked against trec_eval), paired t-tests"),
    "convert": ("convert", "topics and qrels in the forms Pyserini and trec_eval read"),
    "train": ("train", "fine-tune a retriever from a recipe"),
    "pretrain": ("pretrain", "CoT-MAE / MLM pre-training"),
    "export": ("export", "export a model to ONNX"),
    "analyze": ("analyze", "routing, experts, divergence and CAME analyses"),
    "regress": ("regress", "run regression YAMLs against their expected values"),
    "merge": ("merge", "merge the shards of a sharded index build"),
    "dpr": ("dpr", "convert DPR's published data"),
    "sizes": ("sizes", "parameter counts of every architecture"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    return "usage: pyserini-moe COMMAND [ARGS...]\n\ncommands:\n" + "\n".join(
        f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(usage(), file=sys.stdout if len(sys.argv) >= 2 else sys.stderr)
        return 0 if len(sys.argv) >= 2 else 2
    name = sys.argv[1]
    if name not in COMMANDS:
        near = difflib.get_close_matches(name.replace("_", "-"), COMMANDS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        print(f"{usage()}\n\nerror: unknown command {name!r}{hint}", file=sys.stderr)
        return 2
    command = importlib.import_module(f"pyserini_moe.cli.{COMMANDS[name][0]}")
    sys.argv = [f"pyserini-moe {name}", *sys.argv[2:]]
    return run_main(command.main)


if __name__ == "__main__":
    sys.exit(main())
