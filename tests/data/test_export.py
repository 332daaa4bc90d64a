"""Pyserini JsonCollection, TSV topics and TREC qrels writers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyserini_moe.data.beir import BeirCollection, Document
from pyserini_moe.data.export import write_json_collection, write_topics_tsv, write_trec_qrels
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.paths import shared_data_root

DOCS = [Document("a", "Title", "body text"), Document("b", "", "only text ünïcode")]


def test_json_collection(tmp_path: Path) -> None:
    out = write_json_collection(iter(DOCS), tmp_path / "coll")
    assert out == tmp_path / "coll"
    assert sorted(p.name for p in out.iterdir()) == ["docs.jsonl"]
    rows = [json.loads(line) for line in (out / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [{"id": "a", "contents": "Title body text"}, {"id": "b", "contents": "only text ünïcode"}]


def test_json_collection_multifield(tmp_path: Path) -> None:
    """Pyserini's BEIR multifield form (Anserini's BeirMultifieldCollection): the text alone in
    contents, the title a field of its own."""
    out = write_json_collection(DOCS, tmp_path / "coll", multifield=True)
    rows = [json.loads(line) for line in (out / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [{"id": "a", "contents": "body text", "title": "Title"},
                    {"id": "b", "contents": "only text ünïcode", "title": ""}]


def test_json_collection_is_atomic(tmp_path: Path) -> None:
    out = write_json_collection(DOCS, tmp_path / "coll")
    before = (out / "docs.jsonl").read_text(encoding="utf-8")

    def failing() -> Iterator[Document]:
        yield Document("c", "", "new")
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        write_json_collection(failing(), out)
    assert (out / "docs.jsonl").read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coll"]  # no temporaries left


def test_json_collection_rejects_empty_and_bad_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no documents"):
        write_json_collection([], tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
    with pytest.raises(ValueError, match="invalid document id 'a b'"):
        write_json_collection([Document("a b", "", "x")], tmp_path / "bad")


def test_topics_tsv_flattens_text_and_round_trips(tmp_path: Path) -> None:
    path = write_topics_tsv({"1": "line one\nline\ttwo", "q2": "plain"}, tmp_path / "topics.tsv")
    assert path.read_text(encoding="utf-8") == "1\tline one line two\nq2\tplain\n"
    assert load_topics(path) == {"1": "line one line two", "q2": "plain"}
    with pytest.raises(ValueError, match="no topics"):
        write_topics_tsv({}, tmp_path / "none.tsv")


def test_trec_qrels_round_trips(tmp_path: Path) -> None:
    qrels = {"1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    path = write_trec_qrels(qrels, tmp_path / "qrels.txt")
    assert path.read_text().splitlines() == ["1 0 d1 2", "1 0 d2 0", "q2 0 d3 1"]
    assert load_qrels(path) == qrels
    with pytest.raises(ValueError, match="invalid query id 'a b'"):
        write_trec_qrels({"a b": {"d": 1}}, tmp_path / "bad.txt")
    assert not (tmp_path / "bad.txt").exists()


@pytest.mark.skipif(shared_data_root() is None or not (shared_data_root() / "scifact").is_dir(),
                    reason="shared offline collections not found (set PYSERINI_MOE_DATA)")
def test_scifact_export(tmp_path: Path) -> None:
    c = BeirCollection.load("scifact")
    out = write_json_collection(c.corpus(), tmp_path / "scifact")
    lines = (out / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5183
    first = next(iter(c.corpus()))
    assert json.loads(lines[0]) == {"id": first.id, "contents": f"{first.title} {first.text}"}
