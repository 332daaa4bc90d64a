"""Parameter counts of every architecture on one backbone (``python -m pyserini_moe.sizes``).

Models are built from the backbone's *config* on PyTorch's meta device: no weights are loaded or
allocated, so BERT-base sizes are reported in a second without a download (``--bert-base`` uses
transformers' default ``BertConfig``, which is bert-base-uncased's architecture). TASER's
table A3 reports DPR at 218M and TASER (T = 2, I = 2) at 128M parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


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


if __name__ == "__main__":  # python -m keeps working; the command is pyserini_moe.cli.sizes
    import sys

    from pyserini_moe.cli import run_main
    from pyserini_moe.cli.sizes import main

    sys.exit(run_main(main))
