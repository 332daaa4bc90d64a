"""The untrained models bench measures: one of every registered type, built from one backbone
with each type's default arguments and saved (the index processes load them from there)."""

from __future__ import annotations

from pathlib import Path

import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import TaserEncoder, load_config, model_class, model_types


def build_models(backbone: str, out: Path) -> dict[str, str]:
    """An untrained model of every registered type, saved (index processes load it)."""

    paths = {}
    for model_type in model_types():
        path = out / model_type
        if not path.exists():
            torch.manual_seed(0)
            try:
                model = model_class(model_type).from_backbone(backbone, device="cpu")
            except UserError as e:
                # the model's own words name its arguments, which bench has no flags for
                raise UserError(f"--backbone {backbone}: bench builds an untrained model of "
                                f"every type from it, and its {model_type} model cannot be "
                                f"built ({e}); give another backbone") from None
            model.save(path)
        paths[model_type] = str(path)
    return paths


def check_backbone(backbone: str) -> None:
    """Refuse, before anything is built, a backbone too shallow for the models bench builds from
    it: TASER's default block pattern (a specialised block after every ``every`` shared ones)
    needs ``every`` + 1 layers; bench has no flag for ``every``, so the message says the depth."""

    layers = getattr(load_config(backbone), "num_hidden_layers", None)
    every = TaserEncoder.Args().every
    if isinstance(layers, int) and layers < every + 1:
        raise UserError(f"--backbone {backbone} has {layers} layer(s): bench builds an untrained "
                        f"model of every type from it, TASER among them (a specialised block "
                        f"after every {every} shared ones), which needs a backbone of at least "
                        f"{every + 1} layers")
