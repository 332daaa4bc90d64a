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


# --- the manifest's graph names ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../outside.onnx", "/etc/hostname", ""])
def test_a_graph_named_outside_the_export_is_refused(tiny_bert, tmp_path, name) -> None:
    pytest.importorskip("onnxruntime")
    import json

    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.modeling.onnx import ONNX_FILE, OnnxModel, export
    from pyserini_moe.modeling.side import Side

    export(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), tmp_path / "x",
           source="siamese")
    manifest = tmp_path / "x" / ONNX_FILE
    meta = json.loads(manifest.read_text())
    key = next(iter(meta["files"]))
    meta["files"][key] = name
    manifest.write_text(json.dumps(meta))
    with pytest.raises(UserError, match="outside the export folder|must be a file name"):
        OnnxModel(tmp_path / "x").encode(["a query"], Side(key.split("/")[0]))
