"""One entry point from a user's ``--encoder`` argument to a ready model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pyserini_moe.errors import UserError
from pyserini_moe.io import read_json
from pyserini_moe.modeling.base import TextEncoder, check_device
from pyserini_moe.modeling.biencoder import SiameseBiEncoder
from pyserini_moe.modeling.folder import MODEL_FILE, WEIGHTS_FILE, is_saved_model, load_model
from pyserini_moe.modeling.onnx import OnnxModel, is_onnx_export
from pyserini_moe.representation import INDEX_META_FILE

# What an index folder holds: an index passed where a model belongs is named as such.
INDEX_MARKER = INDEX_META_FILE
# How a backbone is used zero-shot (load_encoder's keyword arguments of that name).
ZERO_SHOT_SETTINGS = ("pooling", "normalize", "query_prefix", "passage_prefix")


def is_backbone(spec: str) -> bool:
    """Whether ``spec`` is a backbone used zero-shot: neither a saved model nor an ONNX export."""

    return not is_saved_model(spec) and not is_onnx_export(spec)


def load_encoder(spec: str, device: str | torch.device | None = None,
                 pooling: str | None = None, normalize: bool | None = None,
                 options: dict[str, Any] | None = None, precision: str = "fp32",
                 query_prefix: str | None = None,
                 passage_prefix: str | None = None) -> TextEncoder:
    """A saved pyserini-moe model folder, an ONNX export of one (run by onnxruntime), or a
    backbone used zero-shot as a Siamese bi-encoder, with its encode-time ``options`` set (e.g.
    ``{"inference": "all"}`` for SB-MoE), encoding at ``precision`` (see
    :meth:`~pyserini_moe.modeling.base.RetrievalModel.set_precision`; PyTorch models only).

    A backbone zero-shot is encoded as its sentence-transformers configuration says (pooling,
    normalisation, query / passage prompts), or as ``pooling``, ``normalize``, ``query_prefix``
    and ``passage_prefix`` say where given (see ``SiameseBiEncoder.zero_shot``); these apply to
    backbones only: a trained model encodes as it was trained.
    """
    zero_shot = {"pooling": pooling, "normalize": normalize, "query_prefix": query_prefix,
                 "passage_prefix": passage_prefix}

    if (Path(spec) / INDEX_MARKER).is_file():
        meta = read_json(Path(spec) / INDEX_MARKER, "index metadata")
        raise UserError(f"{spec} is a {meta.get('kind')!r} index, not a model: pass the model "
                        f"that built it ({meta.get('encoder', 'see its ' + INDEX_MARKER)})")

    given = sorted(k for k, v in zero_shot.items() if v is not None)
    if given and (is_onnx_export(spec) or is_saved_model(spec)):
        raise UserError(f"{spec} is a trained model: it encodes as it was trained, so "
                        f"{', '.join(given)} cannot be set (they are for backbones used "
                        "zero-shot)")
    if is_onnx_export(spec):
        if precision != "fp32":
            raise UserError(f"--{precision} applies to PyTorch models; {spec} is an ONNX export "
                            "(its int8 form is the fast CPU one)")
        return OnnxModel(spec).configure(**(options or {}))
    if is_saved_model(spec):
        model = load_model(spec, device)
    else:
        _refuse_model_without_metadata(spec)

        model = SiameseBiEncoder.zero_shot(spec, device=check_device(device), **zero_shot).eval()
    return model.configure(**(options or {})).set_precision(precision)


def _refuse_model_without_metadata(spec: str) -> None:
    """A folder holding our weights file but no ``pyserini_moe.json`` is a trained model whose
    metadata was lost (deleted, or not copied). Read as a backbone, transformers found no weights
    it knows and the error said the folder was no local model. (A Siamese model stores its
    weights under transformers' own name: without the metadata it is still a sound
    sentence-transformers backbone, so it is not refused.)"""
    if (Path(spec) / WEIGHTS_FILE).is_file():
        raise UserError(f"{spec}: the model metadata ({MODEL_FILE}) is missing beside a trained "
                        f"model's weights ({WEIGHTS_FILE}): the folder is incomplete; save or copy "
                        "the model again")
