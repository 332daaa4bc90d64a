"""``python -m pyserini_moe.sizes``: parameter counts of every architecture on one backbone.

Models are built from the backbone's *config* on PyTorch's meta device: no weights are loaded or
allocated, so BERT-base sizes are reported in a second without a download (``--bert-base`` uses
transformers' default ``BertConfig``, which is bert-base-uncased's architecture). TASER's
table A3 reports DPR at 218M and TASER (T = 2, I = 2) at 128M parameters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch

from pyserini_moe.cli import run_main


def _architectures() -> dict[str, Callable[[Any], torch.nn.Module]]:
    """name -> how to build it from a backbone config (no tokenizer: counting needs none)."""
    from pyserini_moe.modeling import DprBiEncoder, SiameseBiEncoder, TaserEncoder  # noqa: PLC0415

    return {
        "siamese": lambda c: SiameseBiEncoder.from_configs({"": c}, None),
        "dpr (two encoders)": lambda c: DprBiEncoder.from_configs({"": c, "passage": c}, None),
        "taser-shared (I=1)": lambda c: TaserEncoder.from_configs({"": c}, None, router="shared"),
        "taser det-r (T=2, I=2)": lambda c: TaserEncoder.from_configs({"": c}, None),
        "taser seq-r (T=2, I=2)": lambda c: TaserEncoder.from_configs({"": c}, None, router="seq"),
        "taser seq-r (T=2, I=4)": lambda c: TaserEncoder.from_configs({"": c}, None, router="seq",
                                                                      num_experts=4),
    }


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def parameter_counts(config: Any) -> dict[str, int]:
    """Parameters of each architecture built on ``config`` (meta device: nothing allocated)."""
    with torch.device("meta"):
        return {name: count_parameters(build(config)) for name, build in _architectures().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.sizes",
        description="Print the parameter count of every architecture on a backbone (built from "
                    "its config on the meta device: no weights are downloaded or allocated).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--backbone", default="all-minilm-l6-v2",
                        help="HF name or folder whose config to use (default: the packaged MiniLM)")
    source.add_argument("--bert-base", action="store_true",
                        help="bert-base-uncased's architecture (transformers' default BertConfig), "
                             "offline; the size the TASER paper reports")
    args = parser.parse_args(argv)
    if args.bert_base:
        from transformers import BertConfig  # noqa: PLC0415

        config, name = BertConfig(), "bert-base-uncased (default BertConfig)"
    else:
        from pyserini_moe.modeling.backbone import load_config  # noqa: PLC0415

        config, name = load_config(args.backbone), args.backbone
    print(f"| model ({name}) | parameters |\n|---|---:|")
    for model, count in parameter_counts(config).items():
        print(f"| {model} | {count / 1e6:.1f}M |")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
