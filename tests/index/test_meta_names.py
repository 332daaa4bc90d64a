"""Index folders record themselves in ``pyserini_moe_index.json``; folders built before the rename
(``pyserini_moe.json`` with a ``kind``) still read, and a model folder is never read as an index."""

from __future__ import annotations

import json

from pyserini_moe.index.meta import LEGACY_META_FILE, META_FILE, read_meta, write_meta


def test_new_indexes_write_their_own_file_name(tmp_path) -> None:
    write_meta(tmp_path, "dense", encoder="m")
    assert (tmp_path / META_FILE).is_file() and not (tmp_path / LEGACY_META_FILE).exists()
    assert read_meta(tmp_path).encoder == "m"


def test_an_index_built_before_the_rename_still_reads(tmp_path) -> None:
    (tmp_path / LEGACY_META_FILE).write_text(json.dumps({"kind": "impact", "encoder": "m"}))
    assert read_meta(tmp_path).kind == "impact"


def test_a_model_folder_is_not_an_index(tmp_path) -> None:
    (tmp_path / LEGACY_META_FILE).write_text(json.dumps({"model_type": "siamese", "args": {}}))
    assert read_meta(tmp_path) is None
