"""The impact index's document-vector store: what exact re-scoring reads instead of Lucene."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.index import doc_vectors
from pyserini_moe.index.doc_vectors import DocVectors, write_doc_vectors

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
    assert write_doc_vectors(_files(tmp_path), tmp_path / "store") == 4
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
    assert write_doc_vectors([empty], tmp_path / "store") == 0
    assert DocVectors(tmp_path / "store").score({"a": 1}, []) == {}
    with pytest.raises(FileExistsError):  # never written over
        write_doc_vectors([empty], tmp_path / "store")
