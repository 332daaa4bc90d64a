"""The impact index's document-vector store: what exact re-scoring reads instead of Lucene."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index import doc_vectors
from pyserini_moe.index.doc_vectors import DocVectors, write_doc_vectors
from pyserini_moe.index.meta import IndexMismatchError

DOCS = [
    [{"id": "d1", "contents": "", "vector": {"alpha": 3, "beta": 1}},
     {"id": "empty", "contents": "", "vector": {}}],
    [{"id": "d2", "contents": "", "vector": {"beta": 7, "gamma ray": 2, "##ing": 5}},
     {"id": "d 3", "contents": "", "vector": {"alpha": 1}}],
]


def _files(tmp_path: Path) -> list[Path]:
    paths = []
    for i, docs in enumerate(DOCS):
        path = tmp_path / f"vectors-{i}.jsonl"
        path.write_text("".join(json.dumps(d) + "\n" for d in docs))
        paths.append(path)
    return paths


@pytest.mark.parametrize("flush", [1, 1 << 20])  # buffer flushed after every term, or once
def test_round_trip_scores_are_the_integer_dot_products(tmp_path, monkeypatch, flush) -> None:
    monkeypatch.setattr(doc_vectors, "_FLUSH", flush)
    assert write_doc_vectors(_files(tmp_path), tmp_path / "store") == (4, 6)
    store = DocVectors(tmp_path / "store")
    query = {"alpha": 2, "beta": 10, "##ing": 1, "unseen": 99}
    docs = [d for part in DOCS for d in part]
    expected = {d["id"]: sum(w * d["vector"].get(t, 0) for t, w in query.items()) for d in docs}
    assert expected == {"d1": 16, "empty": 0, "d2": 75, "d 3": 2}
    assert store.score(query, [d["id"] for d in docs]) == expected
    assert "d2" in store and "nope" not in store


def test_an_empty_collection_and_an_existing_folder(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert write_doc_vectors([empty], tmp_path / "store") == (0, 0)
    assert DocVectors(tmp_path / "store").score({"a": 1}, []) == {}
    with pytest.raises(FileExistsError):  # never written over
        write_doc_vectors([empty], tmp_path / "store")


def test_docids_stay_one_a_row(tmp_path) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({"id": "a\u2028b", "contents": "", "vector": {"x": 1}}) + "\n" +
                    json.dumps({"id": "c", "contents": "", "vector": {"x": 2}}) + "\n")
    write_doc_vectors([path], tmp_path / "store")
    store = DocVectors(tmp_path / "store")  # a Unicode line separator is part of the docid
    assert store.score({"x": 1}, ["a\u2028b", "c"]) == {"a\u2028b": 1, "c": 2}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "d\re", "contents": "", "vector": {}}) + "\n")
    with pytest.raises(UserError, match="on one line"):
        write_doc_vectors([bad], tmp_path / "bad")
    (tmp_path / "store" / "docids.txt").write_text("a\nc\nextra\n")  # damaged
    with pytest.raises(IndexMismatchError, match="3 docids"):
        DocVectors(tmp_path / "store")
