"""``IndexMeta``: the one reader and writer of an index folder's ``pyserini_moe_index.json``
(issue 38): typed fields, old files still read, a damaged field is one line naming the file,
and no other module reads the metadata by its JSON keys."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import (
    CREATED_BY,
    META_FILE,
    IndexMeta,
    check_kind,
    read_meta,
    write_meta,
)

PACKAGE = Path(__file__).resolve().parents[2] / "pyserini_moe"

FULL = IndexMeta(
    kind="impact", created_by=CREATED_BY, num_docs=30, collection="scifact", encoder="/m/best",
    encoder_fingerprint="abc123", model_type="cotmote", encoder_options={"inference": "all"},
    precision="fp32", max_length=256, query_max_length=48,
    zero_shot={"pooling": "mean", "normalize": True}, dim=384,
    faiss="flat", quantization=100, doc_max_terms=64, terms_per_doc=41.5, n_tokens=9000,
    compression="pq32", nlist=1024, bytes_per_token=34,
    shard={"id": 1, "num": 3, "start": 10, "stop": 20},
    corpus={"path": "/data/scifact", "documents": 30, "sha256": "f" * 64},
    source="/data/scifact", layout="flat", contents="title + ' ' + text",
    fields=["contents", "title"])


def test_every_field_round_trips_through_the_file(tmp_path) -> None:
    assert all(getattr(FULL, f.name) is not None for f in dataclasses.fields(FULL))
    assert IndexMeta.from_json(FULL.to_json()) == FULL
    path = FULL.write(tmp_path)
    assert path == tmp_path / META_FILE
    assert read_meta(tmp_path) == FULL
    assert check_kind(tmp_path, "impact") == FULL
    # the keys earlier versions wrote keep their names
    assert json.loads(path.read_text())["quantization"] == 100


def test_a_legacy_multivector_n_docs_reads_as_num_docs(tmp_path) -> None:
    (tmp_path / META_FILE).write_text(json.dumps(
        {"kind": "multivector", "created_by": "pyserini-moe 0.9", "dim": 8, "n_docs": 300,
         "n_tokens": 4000, "faiss": None, "encoder": "m"}))
    meta = read_meta(tmp_path)
    assert meta.num_docs == 300 and meta.dim == 8 and meta.faiss is None


def test_new_multivector_metadata_says_num_docs(tmp_path) -> None:
    write_meta(tmp_path, "multivector", dim=8, num_docs=3, encoder="m")
    written = json.loads((tmp_path / META_FILE).read_text())
    assert written["num_docs"] == 3 and "n_docs" not in written


def test_a_key_of_a_newer_version_is_ignored(tmp_path) -> None:
    (tmp_path / META_FILE).write_text(json.dumps({"kind": "dense", "encoder": "m",
                                                  "added_in_2030": {"x": 1}}))
    assert read_meta(tmp_path) == IndexMeta(kind="dense", encoder="m")


@pytest.mark.parametrize("field,value", [("dim", "384"), ("num_docs", True), ("fields", "title"),
                                         ("encoder_options", ["all"]), ("kind", None)])
def test_a_known_key_of_the_wrong_type_is_one_line_naming_the_file(tmp_path, field,
                                                                    value) -> None:
    (tmp_path / META_FILE).write_text(json.dumps({"kind": "dense", field: value}))
    with pytest.raises(UserError) as err:
        read_meta(tmp_path)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{tmp_path / META_FILE}: the index metadata is damaged")
    assert repr(field) in message


def test_a_file_that_is_not_an_object_is_damaged(tmp_path) -> None:
    (tmp_path / META_FILE).write_text("[1, 2]")
    with pytest.raises(UserError, match=f"{META_FILE}: the index metadata is damaged"):
        read_meta(tmp_path)


def test_to_json_leaves_out_none_and_foreign(tmp_path) -> None:
    foreign = IndexMeta(kind="dense", encoder="m", foreign=True)
    assert foreign.to_json() == {"kind": "dense", "encoder": "m"}
    assert IndexMeta(kind="dense", faiss=None).to_json() == {"kind": "dense"}
    write_meta(tmp_path, "impact", doc_max_terms=None, quantization=100)
    written = json.loads((tmp_path / META_FILE).read_text())
    assert written == {"kind": "impact", "created_by": CREATED_BY, "quantization": 100}


def test_write_meta_refuses_an_unknown_field(tmp_path) -> None:
    with pytest.raises(TypeError):
        write_meta(tmp_path, "multivector", n_docs=3)
    with pytest.raises(TypeError):
        write_meta(tmp_path, "dense", dim="3")
    assert not (tmp_path / META_FILE).exists()


# ``meta["key"]`` / ``meta.get("key")`` (any quote, any name ending in ``meta``: ``self.meta``,
# ``impact_meta``): a metadata object read by its JSON key.
_KEY_READ = re.compile(r"meta(\[|\.get\()\s*['\"]")
# Other files' metadata, not an index's: an ONNX export's (modeling/onnx.py) and a model folder's
# pyserini_moe.json (modeling/base.py). modeling/auto.py names an index passed as a model from its
# file: modeling/ may not import index/ (tests/test_layers.py), so it reads the two keys itself.
_OTHER_FILES = {"index/meta.py", "modeling/onnx.py", "modeling/folder.py", "modeling/auto.py"}


def test_no_module_reads_index_metadata_by_key() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).as_posix() not in _OTHER_FILES
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if _KEY_READ.search(line)]
    assert not found, found
