"""--topics / --qrels specs: files, COLLECTION:SPLIT and Pyserini names."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pyserini_moe.data.topics import load_qrels, load_topics, qrels_file
from pyserini_moe.errors import DataFormatError
from pyserini_moe.paths import shared_data_root

SHARED = shared_data_root()
needs_shared = pytest.mark.skipif(
    SHARED is None or not (SHARED / "scifact").is_dir() or not (SHARED / "topics-and-qrels").is_dir(),
    reason="shared offline collections not found (set PYSERINI_MOE_DATA)")


def at(path: Path, line: int | None = None) -> str:
    return "^" + re.escape(f"{path}:{line}:" if line is not None else f"{path}:")


@pytest.fixture
def collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny BEIR-layout collection; the cache goes to tmp so nothing leaks into ~/.cache."""
    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "mini"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(3)))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in (7, 8, 9)))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\td0\t1\n7\td2\t2\n9\td1\t0\n")
    return root


# --------------------------------------------------------------------------- topics


def test_collection_split_spec_with_a_directory(collection: Path) -> None:
    topics = load_topics(f"{collection}:test")
    assert list(topics.items()) == [("9", "query 9"), ("7", "query 7")]


def test_tsv_gz_and_jsonl_topic_files(tmp_path: Path) -> None:
    tsv = tmp_path / "t.tsv"
    tsv.write_text("1\tfirst query\n\n002\t second \n")
    assert load_topics(tsv) == {"1": "first query", "002": "second"}
    gz = tmp_path / "t.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes()))
    assert load_topics(str(gz)) == {"1": "first query", "002": "second"}
    js = tmp_path / "t.jsonl"
    js.write_text('{"_id": 5, "text": "five"}\n{"_id": "x", "text": "ex"}\n')
    assert load_topics(js) == {"5": "five", "x": "ex"}
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeff1\tq\n".encode())  # as saved by some editors
    assert load_topics(bom) == {"1": "q"}


@pytest.mark.parametrize(("content", "line", "message"), [
    ("1\tok\n2\t\n", 2, "empty text for query '2'"),
    ("1\tok\n2\ttoo\tmany\n", 2, "expected 2 tab-separated columns"),
    ("1\tok\n2 only\n", 2, "expected 2 tab-separated columns"),
    ("1\tok\n1\tagain\n", 2, r"duplicate query id '1' \(first seen at line 1\)"),
    ('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": ""}\n', 2, "empty text for query '2'"),
    ('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": \n', 2, "malformed JSON"),
    ('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "brain \\ud800"}\n', 2,
     "holds '\\\\ud800', half of a UTF-16 surrogate pair"),
])
def test_topic_file_errors(tmp_path: Path, content: str, line: int, message: str) -> None:
    path = tmp_path / "topics.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=at(path, line) + " " + message):
        load_topics(path)


def test_empty_topic_file_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.tsv"
    path.write_text("\n")
    with pytest.raises(DataFormatError, match=at(path) + " no topics"):
        load_topics(path)
    with pytest.raises(FileNotFoundError, match="topics file not found: .*missing.tsv"):
        load_topics(tmp_path / "missing.tsv")


def test_unknown_split_and_collection(collection: Path) -> None:
    with pytest.raises(ValueError, match="unknown split 'dev'.*available splits: test"):
        load_topics(f"{collection}:dev")
    with pytest.raises(FileNotFoundError, match="unknown collection 'no-such-collection'"):
        load_topics("no-such-collection:test")


def test_unknown_pyserini_name_lists_accepted_forms() -> None:
    with pytest.raises(ValueError, match="unknown topics 'no-such-topics'.*accepted forms: COLLECTION:SPLIT"):
        load_topics("no-such-topics")
    with pytest.raises(ValueError, match="unknown qrels 'no-such-qrels'.*accepted forms: COLLECTION:SPLIT"):
        load_qrels("no-such-qrels")


@needs_shared
def test_pyserini_name_matches_collection_split() -> None:
    ours = load_topics("scifact:test")
    pyserini = load_topics("beir-v1.0.0-scifact-test")
    assert len(ours) == 300
    assert pyserini == ours
    assert all(isinstance(qid, str) for qid in pyserini)
    assert load_qrels("beir-v1.0.0-scifact-test") == load_qrels("scifact:test")


# --------------------------------------------------------------------------- qrels


def test_qrels_files_in_both_formats(collection: Path, tmp_path: Path) -> None:
    expected = {"9": {"d0": 1, "d1": 0}, "7": {"d2": 2}}
    assert load_qrels(f"{collection}:test") == expected
    assert load_qrels(collection / "qrels" / "test.tsv") == expected
    trec = tmp_path / "q.txt"
    trec.write_text("9 0 d0 1\n9\tQ0\td1\t0\n\n7 0 d2 2\n")
    assert load_qrels(trec) == expected


@pytest.mark.parametrize(("content", "line", "message"), [
    ("1 0 d1 1\n1 0 d2\n", 2, "expected 4 whitespace-separated columns"),
    ("1 0 d1 1\n1 0 d2 1.5\n", 2, "score must be an integer, found '1.5'"),
    ("1 0 d1 1\n1 0 d1 2\n", 2, "conflicting scores for query '1', document 'd1'"),
    ("1 0 d1 1\n1 0 d2 999999999999\n", 2, "score 999999999999 is past what trec_eval reads"),
])
def test_trec_qrels_errors(tmp_path: Path, content: str, line: int, message: str) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=at(path, line) + " " + message):
        load_qrels(path)
    with pytest.raises(DataFormatError, match=at(path, line)):
        qrels_file(path)


def test_qrels_file_returns_trec_files_and_converts_the_rest(collection: Path, tmp_path: Path) -> None:
    trec = tmp_path / "q.txt"
    trec.write_text("9 0 d0 1\n")
    assert qrels_file(trec) == trec
    converted = qrels_file(f"{collection}:test", workdir=tmp_path / "work")
    assert converted.parent == tmp_path / "work"
    assert converted.read_text().splitlines() == ["9 0 d0 1", "9 0 d1 0", "7 0 d2 2"]
    from_tsv = qrels_file(collection / "qrels" / "test.tsv")  # default: the cache dir
    assert from_tsv.parent == tmp_path / "cache" / "qrels"
    assert from_tsv.read_text() == converted.read_text()
    with pytest.raises(FileNotFoundError, match="qrels file not found"):
        qrels_file(tmp_path / "missing.txt")


@needs_shared
def test_qrels_file_for_a_pyserini_name() -> None:
    """A Pyserini BEIR name of a local collection is that collection's qrels (converted here);
    the judgments are Pyserini's own file's."""
    path = qrels_file("beir-v1.0.0-scifact-test")
    assert path.name.startswith("qrels.scifact.test.")
    assert load_qrels(path) == load_qrels("scifact:test")


def test_topics_and_qrels_from_a_pipe_are_read_once(tmp_path) -> None:
    """``--topics <(grep ...)``: a pipe, readable once, was "file not found"."""
    import os
    import threading

    from pyserini_moe.data.topics import load_qrels, load_topics

    def through_pipe(name: str, text: str) -> str:
        fifo = tmp_path / name
        os.mkfifo(fifo)

        def write() -> None:
            with open(fifo, "w") as f:
                f.write(text)

        threading.Thread(target=write, daemon=True).start()
        return str(fifo)

    assert load_topics(through_pipe("topics", "q1\tcat sat\nq2\tdense retrieval\n")) == {
        "q1": "cat sat", "q2": "dense retrieval"}
    assert load_qrels(through_pipe("qrels", "q1 0 d1 1\nq2 0 d2 2\n")) == {
        "q1": {"d1": 1}, "q2": {"d2": 2}}


def test_pyserini_beir_names_resolve_offline_to_local_collections() -> None:
    """Pyserini's 2CR commands name BEIR topics and qrels as beir-v1.0.0-<name>-test: a local
    collection answers them, no download and no `convert` first."""
    from pyserini_moe.data.beir import local_collections
    from pyserini_moe.data.topics import load_qrels, load_topics, qrels_file

    if "scifact" not in local_collections():
        pytest.skip("needs ../shared/data/scifact")
    assert load_topics("beir-v1.0.0-scifact-test") == load_topics("scifact:test")
    assert load_qrels("beir-v1.0.0-scifact-test") == load_qrels("scifact:test")
    assert qrels_file("beir-v1.0.0-scifact-test").read_text() == \
        qrels_file("scifact:test").read_text()


def test_a_file_named_as_a_collection_split_is_read_and_said(tmp_path: Path, monkeypatch,
                                                             caplog) -> None:
    """``scifact:test`` as a file in the current folder was read instead of the collection's
    split, without a word."""
    import logging

    monkeypatch.chdir(tmp_path)
    (tmp_path / "scifact:test").write_text("1\tmine\n")
    with caplog.at_level(logging.WARNING):
        assert load_topics("scifact:test") == {"1": "mine"}
    assert any("scifact:test is a file here and also collection scifact's test split: reading "
               "the file" in r.getMessage() for r in caplog.records)
