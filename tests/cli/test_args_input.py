"""The command line's shared encoder arguments (:mod:`pyserini_moe.cli.args`): an encoder
option given twice with two values, and a cached ONNX export of the other precision."""

from __future__ import annotations

import json

import pytest


def test_an_encoder_option_given_twice_is_refused() -> None:
    from pyserini_moe.cli.args import parse_options
    from pyserini_moe.errors import UserError

    assert parse_options(["inference=all", "inference= all"]) == {"inference": "all"}
    with pytest.raises(UserError, match="^--encoder-option inference is given twice \\(all and "
                                        "top1\\): give it once$"):
        parse_options(["inference=all", "inference=top1"])


def test_a_cached_export_of_the_other_precision_is_not_reused(tmp_path) -> None:
    """An fp32 export written into <model>/onnx/int8 served int8 searches."""
    from pyserini_moe.cli.args import _exported_from

    export = tmp_path / "model" / "onnx" / "int8"
    export.mkdir(parents=True)
    (export / "pyserini_moe_onnx.json").write_text(json.dumps({"int8": False}))
    assert not _exported_from(export, str(tmp_path / "model"), {}, int8=True)
