"""``python -m pyserini_moe.analyze routing``: which expert each side's inputs go to.

For TASER-style models (expert FFNs inside the Transformer, :mod:`pyserini_moe.modeling.experts`):
per specialised block, the share of queries and of passages (sequences for Det-R / Seq-R, real
tokens for Tok-R) routed to each expert at inference. It shows whether a learned router
rediscovers the question / passage split that Det-R hard-codes (TASER appendix A and C).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from typing import Any

from tqdm import tqdm

from pyserini_moe.cli import run_main


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.analyze",
        description="Routing analysis of a TASER-style model: the share of queries and passages "
                    "each expert of each specialised block receives at inference.")
    sub = parser.add_subparsers(dest="command", required=True)
    routing = sub.add_parser("routing", help="expert shares per side and specialised block")
    routing.add_argument("--model", required=True, help="a saved TASER model folder")
    routing.add_argument("--corpus", required=True, help="collection whose passages to route")
    routing.add_argument("--topics", required=True, help="queries to route (as in search)")
    routing.add_argument("--sample", type=int, default=1000,
                         help="passages sampled from the corpus (seeded); 0 = all")
    routing.add_argument("--max-length", type=int, default=256, help="passage tokens")
    routing.add_argument("--output", help="also write the Markdown table here")
    routing.add_argument("--device", default=None, help="cpu, cuda (default: CUDA when present)")
    routing.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    from pyserini_moe.data.beir import BeirCollection  # noqa: PLC0415
    from pyserini_moe.data.topics import load_topics  # noqa: PLC0415
    from pyserini_moe.io import atomic_path  # noqa: PLC0415
    from pyserini_moe.modeling.base import load_model  # noqa: PLC0415

    model = load_model(args.model, args.device)
    if not hasattr(model, "expert_layers"):
        raise ValueError(f"{args.model} is a {model.model_type} model: routing analysis needs "
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
    print(text)
    if args.output:
        with atomic_path(args.output) as tmp:
            tmp.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
