"""ONNX export (:mod:`pyserini_moe.modeling.onnx`): an int8 export logs no advice and leaves
the root logger as it was."""

from __future__ import annotations

import logging

import pytest

# --- export --int8: onnxruntime's advice ----------------------------------------------------------


def test_int8_export_logs_no_advice_and_leaves_the_root_logger_as_it_was(tiny_bert, tmp_path,
                                                                        caplog) -> None:
    pytest.importorskip("onnxruntime")
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.onnx import export

    root = logging.getLogger()
    with caplog.at_level(logging.WARNING):
        handlers, level = list(root.handlers), root.level
        export(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), tmp_path / "int8",
               source="siamese", int8=True)
        assert (root.handlers, root.level) == (handlers, level)
    assert "pre-processing" not in caplog.text
