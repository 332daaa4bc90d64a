"""Parameter counts of every registered architecture on one backbone (``python -m
pyserini_moe.sizes``).

Models are built from the backbone's *config* on PyTorch's meta device: no weights are loaded or
allocated, so BERT-base sizes are reported in a second without a download (``--bert-base`` uses
transformers' default ``BertConfig``, which is bert-base-uncased's architecture). TASER's
table A3 reports DPR at 218M and TASER (T = 2, I = 2) at 128M parameters.
"""

from __future__ import annotations

from typing import Any

import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.registry import model_class, model_types

# What every model reads from a BERT-style encoder's config (sizes as counts >= 1).
ENCODER_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


# Named variants counted beside a model type's defaults (TASER's table A3 rows); a type not
# listed is counted once, at its defaults, under its own name.
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "dpr": {"dpr (two encoders)": {}},
    "taser": {
        "taser-shared (I=1)": {"router": "shared"},
        "taser det-r (T=2, I=2)": {},
        "taser seq-r (T=2, I=2)": {"router": "seq"},
        "taser seq-r (T=2, I=4)": {"router": "seq", "num_experts": 4},
    },
}


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def parameter_counts(config: Any) -> dict[str, int | str]:
    """Parameters of every registered model type (and its VARIANTS) built on ``config``, on the
    meta device: nothing is allocated. An architecture the config cannot hold (TASER's default
    block pattern on a 2-layer backbone) gets the reason instead of a count, so the others are
    still reported."""
    _refuse_non_encoder(config)
    counts: dict[str, int | str] = {}
    with torch.device("meta"):
        for model_type in model_types():
            cls = model_class(model_type)
            configs = dict.fromkeys(cls.backbone_slots, config)
            for name, args in VARIANTS.get(model_type, {model_type: {}}).items():
                try:
                    counts[name] = count_parameters(cls.from_configs(configs, None, **args))
                except (RuntimeError, ValueError) as e:  # UserError is a ValueError
                    counts[name] = str(e).splitlines()[0]
    return counts


def _refuse_non_encoder(config: Any) -> None:
    """One line when ``config`` is not a BERT-style encoder's (a T5 config has no
    ``intermediate_size``; a hand-edited one may say -3 layers): every model builds on one."""
    for name in ENCODER_SIZES:
        value = getattr(config, name, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"its config's {name} is {value!r}, not a count >= 1: the models "
                            f"build on BERT-style encoders (their config sets "
                            f"{', '.join(ENCODER_SIZES)} and hidden_act)")
    if not isinstance(getattr(config, "hidden_act", None), str):
        raise UserError("its config has no hidden_act: the models build on BERT-style encoders")
