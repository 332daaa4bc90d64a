"""One entry point from a user's ``--encoder`` argument to a ready model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pyserini_moe.errors import UserError
from pyserini_moe.io import read_json
from pyserini_moe.modeling.base import TextEncoder, check_device, is_saved_model, load_model
from pyserini_moe.representation import INDEX_META_FILE

# What an index folder holds: an index passed where a model belongs is named as such.
INDEX_MARKER = INDEX_META_FILE


def load_encoder(spec: str, device: str | torch.device | None = None, pooling: str = "mean",
                 normalize: bool = True, options: dict[str, Any] | None = None) -> TextEncoder:
    """A saved pyserini-moe model folder, an ONNX export of one (run by onnxruntime), or a
    backbone used zero-shot as a Siamese bi-encoder, with its encode-time ``options`` set (e.g.
    ``{"inference": "all"}`` for SB-MoE).

    The zero-shot default (mean pooling, L2-normalised) is how sentence-transformers models such
    as the packaged all-MiniLM-L6-v2 are meant to be used.
    """
    from pyserini_moe.modeling.onnx import OnnxModel, is_onnx_export  # noqa: PLC0415

    if (Path(spec) / INDEX_MARKER).is_file():
        meta = read_json(Path(spec) / INDEX_MARKER, "index metadata")
        raise UserError(f"{spec} is a {meta.get('kind')!r} index, not a model: pass the model "
                        f"that built it ({meta.get('encoder', 'see its ' + INDEX_MARKER)})")

    if is_onnx_export(spec):
        return OnnxModel(spec).configure(**(options or {}))
    if is_saved_model(spec):
        return load_model(spec, device).configure(**(options or {}))
    from pyserini_moe.modeling.biencoder import SiameseBiEncoder  # noqa: PLC0415

    model = SiameseBiEncoder.from_backbone(spec, pooling=pooling, normalize=normalize)
    return model.to(check_device(device)).eval().configure(**(options or {}))
