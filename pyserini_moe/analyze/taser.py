"""``python -m pyserini_moe.analyze routing``: where a TASER-style model sends its inputs.

For models with expert FFNs inside the Transformer (:mod:`pyserini_moe.modeling.experts`), per
specialised block, the share of queries and of passages (sequences for Det-R / Seq-R, real tokens
for Tok-R) routed to each expert at inference. It shows whether a learned router rediscovers the
question / passage split that Det-R hard-codes (TASER appendix A and C).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from pyserini_moe.analyze.common import emit, refuse_past_positions
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_topics
from pyserini_moe.errors import UserError


def routing_shares(model: Any, texts: dict[str, list[str]], batch_size: int = 32,
                   max_length: int = 256, progress: bool = True) -> dict[str, list[Counter]]:
    """side name -> one Counter (expert -> routed units) per specialised block."""
    from pyserini_moe.modeling.base import Side  # noqa: PLC0415 - `analyze --help` stays light

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


@dataclass(frozen=True)
class RoutingAnalysis:
    """What ``analyze routing`` takes, flag for flag (see its ``--help``): a setting that cannot
    work is refused when the object is made, before the model is loaded."""

    model: str
    corpus: str
    topics: str
    sample: int = 1000  # passages sampled from the corpus (seeded); 0 = all
    max_length: int = 256
    device: str | None = None
    quiet: bool = False
    output: str | None = None

    def __post_init__(self) -> None:
        if self.sample < 0:
            raise UserError(f"--sample must be >= 0 (0 = all), got {self.sample}")


def run_routing(analysis: RoutingAnalysis) -> int:
    """``analyze routing``: route the topics and a sample of the corpus, write the shares."""
    from pyserini_moe.modeling.folder import load_model  # noqa: PLC0415 - `analyze --help` stays light

    model = load_model(analysis.model, analysis.device)
    if not hasattr(model, "expert_layers"):
        raise UserError(f"{analysis.model} is a {model.model_type} model: routing analysis "
                        "needs expert FFN blocks (taser)")
    refuse_past_positions(model, {"--max-length": analysis.max_length})
    passages = [doc.contents for doc in BeirCollection.load(analysis.corpus).corpus()]
    if analysis.sample and analysis.sample < len(passages):
        passages = random.Random(0).sample(passages, analysis.sample)
    queries = list(load_topics(analysis.topics).values())
    shares = routing_shares(model, {"query": queries, "passage": passages},
                            max_length=analysis.max_length, progress=not analysis.quiet)
    table = format_shares(shares, model.specialised, model.args["num_experts"])
    unit = "tokens" if model.args["router"] == "tok" else "sequences"
    text = (f"Routing of {len(queries)} queries and {len(passages)} passages by {analysis.model} "
            f"({model.args['router']} router; shares of {unit}):\n\n{table}\n")
    emit(text, analysis.output)
    return 0
