"""``python -m pyserini_moe.analyze routing``: where a TASER-style model sends its inputs.

For models with expert FFNs inside the Transformer (:mod:`pyserini_moe.modeling.experts`), per
specialised block, the share of queries and of passages (sequences for Det-R / Seq-R, real tokens
for Tok-R) routed to each expert at inference. It shows whether a learned router rediscovers the
question / passage split that Det-R hard-codes (TASER appendix A and C).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from typing import Any

from tqdm import tqdm

from pyserini_moe.analyze.common import emit
from pyserini_moe.errors import UserError


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


def run_routing(args: argparse.Namespace) -> int:
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
