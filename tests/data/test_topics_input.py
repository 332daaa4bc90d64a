"""Reading topics and qrels (:mod:`pyserini_moe.data.topics`): gzipped files under a plain
name, folders given as a file, TREC SGML topics and a header line."""

from __future__ import annotations

import gzip

import pytest

from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import DataFormatError, UserError


def test_a_gzipped_file_under_a_plain_name_is_named_gzip(tmp_path) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_bytes(gzip.compress(b"q1\tone query\n", mtime=0))
    with pytest.raises(DataFormatError, match=r"topics.tsv:1: gzip-compressed: name it with "
                                              r"\.gz, or gunzip it$"):
        load_topics(str(topics))


@pytest.mark.parametrize("load", [load_qrels, load_topics], ids=["qrels", "topics"])
def test_a_collections_qrels_folder_names_the_collection(collection, load) -> None:
    with pytest.raises(UserError, match=rf"is a folder, not a \w+ file: for a collection's \w+ "
                                        rf"give COLLECTION:SPLIT, e.g. {collection}:test "
                                        r"\(its splits: test\)$"):
        load(str(collection / "qrels"))


def test_another_folder_as_qrels_is_named_a_folder(tmp_path) -> None:
    with pytest.raises(UserError, match=r"is a folder, not a qrels file: give the file, or a "
                                        r"collection's COLLECTION:SPLIT$"):
        load_qrels(str(tmp_path))


def test_trec_sgml_topics_are_named_as_not_read(tmp_path):
    path = tmp_path / "tp-trec.txt"
    path.write_text("<top>\n<num> Number: 1\n<title> cats\n</top>\n")
    with pytest.raises(DataFormatError, match=r"SGML or XML \(<top>.*qid<TAB>text"):
        load_topics(str(path))


# --- a topics TSV's header line -------------------------------------------------------------------


@pytest.mark.parametrize("header", ["qid\ttext", "query_id\tquery", "QID\tText"])
def test_a_topics_header_line_is_skipped_with_a_note(tmp_path, capsys, header) -> None:
    path = tmp_path / "topics.tsv"
    path.write_text(f"{header}\nq1\tcat sat\n")
    assert load_topics(str(path)) == {"q1": "cat sat"}
    names = ", ".join(header.split("\t"))
    assert capsys.readouterr().err == (f"note: {path}:1: the line '{names}' names the columns: "
                                       "skipped as a header, not searched as a query\n")
    path.write_text("qid\twhat is a cat\nq2\ttext\n")  # a query's text: not a header
    assert load_topics(str(path)) == {"qid": "what is a cat", "q2": "text"}
    assert capsys.readouterr().err == ""
