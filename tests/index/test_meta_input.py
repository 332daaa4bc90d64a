"""Index metadata (:mod:`pyserini_moe.index.meta`) that is damaged or records values the
index cannot have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import META_FILE, RECORDED_PRECISIONS, IndexMeta, read_meta
from pyserini_moe.modeling.base import PRECISIONS
from tests.helpers import edited_index

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_damaged_index_metadata_file(tmp_path) -> None:
    (tmp_path / META_FILE).write_text('{"kind": "dense", ')
    with pytest.raises(ValueError, match=rf"{META_FILE}: the index metadata is damaged"):
        read_meta(tmp_path)


# --- the index metadata's query_max_length --------------------------------------------------------


@pytest.mark.parametrize("bad", [-5, 0])
def test_a_recorded_query_length_below_one_is_damage(tmp_path, bad) -> None:
    with pytest.raises(UserError, match=rf"{META_FILE}: the index metadata is damaged "
                                        rf"\('query_max_length' must be >= 1 or absent, got {bad}"):
        IndexMeta.from_json({"kind": "dense", "query_max_length": bad}, tmp_path / META_FILE)
    assert IndexMeta.from_json({"kind": "dense", "query_max_length": 16}).query_max_length == 16
    assert IndexMeta.from_json({"kind": "dense"}).query_max_length is None


@pytest.mark.parametrize("field", ["quantization", "dim", "max_length"])
def test_a_recorded_count_below_one_names_the_metadata(tmp_path: Path, field: str) -> None:
    """"quantization": 0 was refused as "quantization factor must be >= 1", naming neither
    the index nor its metadata."""
    with pytest.raises(UserError, match=f"the index metadata is damaged \\('{field}' must be >= 1 "
                                        "or absent, got 0\\)"):
        IndexMeta.from_json({"kind": "impact", field: 0}, tmp_path / "pyserini_moe_index.json")


# --- index metadata that lied unnoticed -----------------------------------------------------------


def test_an_unknown_precision_is_damaged_metadata(ws, tmp_path) -> None:
    index = edited_index(ws, tmp_path / "index", precision="fp8")
    with pytest.raises(UserError, match="'precision' must be one of fp32, fp16, bf16, int8, got "
                                        "'fp8'"):
        IndexMeta.from_json(json.loads((index / META_FILE).read_text()), index / META_FILE)


def test_the_recorded_precisions_are_the_models_and_onnx_int8() -> None:
    assert set(RECORDED_PRECISIONS) == set(PRECISIONS) | {"int8"}
