"""``--corpus`` forms: BEIR, Pyserini's JsonCollection (file or folder) and TREC CAR paragraphs,
each indexed like a BEIR corpus; anything else is one error naming the forms accepted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.corpus import DocumentFiles, open_corpus
from pyserini_moe.errors import DataFormatError

sys.path.insert(0, str(Path(__file__).parent))
from test_car import PARAS, write_car  # noqa: E402


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_beir_collection_is_still_a_beir_collection(tiny_corpus) -> None:
    assert isinstance(open_corpus(str(tiny_corpus)), BeirCollection)


def test_a_json_collection_folder_of_lines_and_arrays(tmp_path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": "d1", "contents": "one"},
                                       {"id": "d2", "contents": "two", "extra": 1}])
    (tmp_path / "b.json").write_text(json.dumps([{"id": "d3", "contents": "three"}]))
    corpus = open_corpus(tmp_path)
    assert isinstance(corpus, DocumentFiles) and corpus.num_docs() == 3
    assert [(d.id, d.contents) for d in corpus.corpus()] == [("d1", "one"), ("d2", "two"),
                                                              ("d3", "three")]


def test_a_single_json_collection_file(tmp_path) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": 7, "contents": "seven"}])
    assert [d.id for d in open_corpus(path).corpus()] == ["7"]


@pytest.mark.parametrize("records,message", [
    ([{"id": "d1", "text": "x"}], r'docs.jsonl:1: a JsonCollection record needs "id" and "contents"'),
    ([{"id": "d1", "contents": "x"}, {"id": "d1", "contents": "y"}],
     r"docs.jsonl:2: duplicate document id 'd1' \(first in docs.jsonl:1\)"),
    ([{"id": "d 1", "contents": "x"}], r"docs.jsonl:1: invalid document id"),
    ([{"id": "d1", "contents": 3}], r'docs.jsonl:1: "contents" must be a string'),
])
def test_bad_json_collection_records_name_file_and_line(tmp_path, records, message) -> None:
    corpus = open_corpus(write_jsonl(tmp_path / "docs.jsonl", records))
    with pytest.raises(DataFormatError, match=message):
        list(corpus.corpus())


def test_a_trec_car_paragraphs_file(tmp_path) -> None:
    corpus = open_corpus(write_car(tmp_path / "paragraphs.cbor", PARAS))
    assert [d.id for d in corpus.corpus()] == ["aaa111", "bbb222"]
    assert corpus.name == "paragraphs"


@pytest.mark.parametrize("make", [lambda p: p / "empty", lambda p: p / "notes.txt"])
def test_anything_else_names_the_forms_accepted(tmp_path, make) -> None:
    path = make(tmp_path)
    if path.suffix:
        path.write_text("hello")
    else:
        path.mkdir()
    with pytest.raises(DataFormatError, match="not a corpus: --corpus takes a BEIR collection"):
        open_corpus(path)


def test_a_json_collection_and_a_car_file_are_indexed(tiny_bert, tmp_path) -> None:
    from pyserini_moe.index.encoded import build_dense_index
    from pyserini_moe.index.lucene import build_bm25_index
    from pyserini_moe.index.meta import read_meta

    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": f"d{i}", "contents": f"text {i}"}
                                                 for i in range(5)])
    build_bm25_index(str(docs), tmp_path / "bm25")
    assert read_meta(tmp_path / "bm25").num_docs == 5
    car = write_car(tmp_path / "paragraphs.cbor", PARAS)
    build_dense_index(str(car), str(tiny_bert), tmp_path / "dense", device="cpu", progress=False)
    meta = read_meta(tmp_path / "dense")
    assert meta.num_docs == 2 and meta.collection == "paragraphs"
    assert (tmp_path / "dense" / "docid").read_text().split() == ["aaa111", "bbb222"]
