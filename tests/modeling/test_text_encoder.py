"""The TextEncoder protocol is the whole of what the retrieval layer uses of a model: every
registered model type and an ONNX export satisfy it, member by member."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer

import pyserini_moe.modeling  # noqa: F401 - registers every model type
from pyserini_moe.modeling.base import PRECISIONS, Encoded, Side, TextEncoder
from pyserini_moe.modeling.registry import model_class, model_types

pytestmark = pytest.mark.usefixtures("one_thread")
ARGS = {"taser": {"every": 0}}  # the tiny BERT has 2 layers: TASER's default every=2 has none


def _check_members(model: TextEncoder) -> None:
    assert isinstance(model, TextEncoder)
    assert isinstance(model.model_type, str) and model.representations
    assert isinstance(model.encode_options, tuple)
    assert all(option in model.args for option in model.encode_options)
    assert isinstance(model.device, torch.device)
    assert model.eval() is model and model.configure() is model
    out = model.encode(["a cat sat", "dense retrieval"], Side.PASSAGE, 16,
                       only=model.representations[0])
    assert isinstance(out, Encoded) and getattr(out, model.representations[0]).shape[0] == 2


@pytest.mark.parametrize("model_type", model_types())
def test_every_registered_model_is_a_text_encoder(model_type: str, tiny_bert: Path,
                                                   tiny_mlm: Path) -> None:
    cls = model_class(model_type)
    backbone = tiny_mlm if model_type in ("splade", "came", "cotmote") else tiny_bert
    config = AutoConfig.from_pretrained(backbone)
    model = cls.from_configs(dict.fromkeys(cls.backbone_slots, config),
                             AutoTokenizer.from_pretrained(backbone), **ARGS.get(model_type, {}))
    _check_members(model)
    assert model.precision in PRECISIONS


def test_an_onnx_export_is_a_text_encoder_that_says_its_precision(tiny_bert: Path,
                                                                 tmp_path: Path) -> None:
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.onnx import OnnxModel, export

    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    export(model, tmp_path / "fp32", source="siamese")
    export(model, tmp_path / "int8", source="siamese", int8=True)
    for folder, precision in (("fp32", "fp32"), ("int8", "int8")):
        onnx = OnnxModel(tmp_path / folder)
        _check_members(onnx)
        assert onnx.precision == precision
