"""Encoded queries (:mod:`pyserini_moe.search.encoded_queries`): dense tables and impact
JSON lines that are damaged, non-finite, gzipped or of the other kind, and outputs that
would replace another file."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.search import encoded_queries as eq
from pyserini_moe.search.encoded_queries import _check_output, encode_queries, read_encoded_queries
from tests.helpers import dense_queries

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = {"d0": "the first document", "d1": "the second document"}


def test_dense_encoded_queries_named_gz_or_pkl_are_refused(tmp_path) -> None:
    from pyserini_moe.search.encoded_queries import _check_output

    for name in ("q.pkl.gz", "embedding.pkl"):
        with pytest.raises(UserError, match=rf"--output .*{name}: a dense index's queries are a "
                                            "folder holding embedding.pkl"):
            _check_output(tmp_path / name, "dense", overwrite=False)
    _check_output(tmp_path / "q.jsonl.gz", "impact", overwrite=False)  # impact: a gzipped file


# --- search --encoded-queries: dense tables -------------------------------------------------------


@pytest.mark.parametrize("embedding", ["1,2,3", {"a": 1.0}, None, ["1", "2"], [[1.0], [2.0, 3.0]],
                                       [True, False]],
                         ids=["string", "dict", "none", "strings", "ragged", "booleans"])
def test_a_dense_vector_that_is_not_numbers_is_one_line(tmp_path, embedding) -> None:
    folder = dense_queries(tmp_path / "q", [np.ones(4, dtype=np.float32), embedding])
    with pytest.raises(UserError, match=r"embedding\.pkl: the query 'query 1' has no "):
        read_encoded_queries(folder, "dense")


def test_dense_values_that_overflow_float32_say_so_without_a_warning(tmp_path) -> None:
    folder = dense_queries(tmp_path / "q", [np.full(4, 1e300)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" fails the test
        with pytest.raises(UserError, match="'query 0' has values that overflow float32"):
            read_encoded_queries(folder, "dense")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_dense_non_finite_values_are_refused(tmp_path, bad) -> None:
    folder = dense_queries(tmp_path / "q", [np.array([1.0, bad, 0.0])])
    with pytest.raises(UserError, match="NaN or infinite"):
        read_encoded_queries(folder, "dense")


def test_dense_lists_and_float64_still_read_as_float32(tmp_path) -> None:
    folder = dense_queries(tmp_path / "q", [[1.0, 2.0], np.array([3.0, 4.0]), np.array([5, 6])])
    vectors = read_encoded_queries(folder, "dense")
    assert all(v.dtype == np.float32 for v in vectors.values())
    assert vectors["query 2"].tolist() == [5.0, 6.0]


# --- search --encoded-queries: impact JSON lines --------------------------------------------------


def _impact(path: Path, weight: object) -> Path:
    lines = [{"id": "q0", "contents": "fine", "vector": {"a": 3, "b": 40}},
             {"id": "q1", "contents": "what is it", "vector": {"what": weight, "is": 7}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), 1e30, 2**31, 10**400, 0.35, 35.5,
                                    -5, True, "5", None],
                         ids=["nan", "inf", "1e30", "2^31", "10^400", "0.35", "35.5", "negative",
                              "bool", "string", "null"])
def test_an_impact_weight_that_is_not_a_quantised_integer_is_refused(tmp_path,
                                                                     weight) -> None:
    path = _impact(tmp_path / "q.jsonl", weight)
    with pytest.raises(UserError, match=r"q\.jsonl, line 2 \(query 'what is it'\): the weight of "
                                        r"'what' is .*must be integers .*already quantised"):
        read_encoded_queries(path, "impact")


def test_whole_impact_weights_read_as_ints(tmp_path) -> None:
    vectors = read_encoded_queries(_impact(tmp_path / "q.jsonl", 35.0), "impact")
    assert vectors["what is it"] == {"what": 35, "is": 7}
    assert all(type(w) is int for v in vectors.values() for w in v.values())


# --- messages that named the wrong thing ----------------------------------------------------------


def test_a_dense_folder_given_to_an_impact_index_says_so(tmp_path) -> None:
    folder = tmp_path / "eq"
    folder.mkdir()
    pd.DataFrame({"text": ["q"], "embedding": [[1.0, 2.0]]}).to_pickle(folder / "embedding.pkl")
    with pytest.raises(FileNotFoundError, match="dense encoded queries, but the index is an "
                                                "impact index"):
        read_encoded_queries(folder, "impact")
    with pytest.raises(FileNotFoundError, match=r"missing: not found"):
        read_encoded_queries(tmp_path / "missing", "impact")


# --- encode_queries --overwrite replaces only impact queries --------------------------------------


@pytest.mark.parametrize("text", ['{"_id": "d0", "title": "t", "text": "a corpus"}\n',
                                  "q0 Q0 d0 1 3.0 run\n", '{"id": "d0", "contents": "doc"}\n'])
def test_impact_queries_overwrite_no_other_file(tmp_path, text) -> None:
    output = tmp_path / "corpus.jsonl"
    output.write_text(text)
    with pytest.raises(FileExistsError, match="is not impact encoded queries"):
        encode_queries(tmp_path / "no-index", "impact", {"q0": "cat"}, output, overwrite=True)
    assert output.read_text() == text


def test_impact_queries_written_before_are_replaced(tmp_path) -> None:
    output = tmp_path / "queries.jsonl"
    output.write_text(json.dumps({"id": "q0", "contents": "cat", "vector": {"cat": 35}}) + "\n")
    _check_output(output, "impact", overwrite=True)
    output.write_text("")
    _check_output(output, "impact", overwrite=True)


# --- impact encoded queries, gzipped or not UTF-8 -------------------------------------------------


def _fake_encoder(monkeypatch, made_by: str = "f" * 16) -> None:
    """encode_queries' searcher, without an index: weights per query, a model's fingerprint."""
    def encode_batch(texts):
        return [{"cat": 3, "dog": len(t)} for t in texts]

    encoder = SimpleNamespace(model=SimpleNamespace(fingerprint=made_by), max_length=64,
                              encode_batches=lambda batches: map(encode_batch, batches))
    monkeypatch.setattr(eq, "open_searcher", lambda *a, **k: SimpleNamespace(
        query_encoder=encoder, query_max_terms=1024, meta=SimpleNamespace(quantization=100)))


def test_impact_queries_named_gz_are_gzip(monkeypatch, tmp_path) -> None:
    _fake_encoder(monkeypatch)
    out = tmp_path / "q.jsonl.gz"
    for overwrite in (False, True):  # an output it wrote is replaced as its own
        eq.encode_queries("idx", "impact", TOPICS, out, overwrite=overwrite)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    lines = gzip.decompress(out.read_bytes()).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(TOPICS)
    vectors, made_by, encoding = eq.read_encoded_queries_made_by(out, "impact")
    assert vectors["the first document"] == {"cat": 3, "dog": 18} and made_by == "f" * 16
    assert encoding == {"query_max_length": 64, "query_max_terms": 1024, "quantization": 100}


def test_impact_queries_gzipped_elsewhere_are_read(tmp_path) -> None:
    record = {"id": "q1", "contents": "cat", "vector": {"cat": 5}}
    out = tmp_path / "q.jsonl.gz"
    out.write_bytes(gzip.compress((json.dumps(record) + "\n").encode()))
    assert eq.read_encoded_queries(out, "impact") == {"cat": {"cat": 5}}


def test_impact_queries_not_in_utf8_are_one_line(tmp_path) -> None:
    record = {"id": "q1", "contents": "cat", "vector": {"cat": 5}}
    out = tmp_path / "q.jsonl"
    out.write_bytes((json.dumps(record) + "\n").encode("utf-16"))
    with pytest.raises(UserError, match=r"q\.jsonl:1: not valid UTF-8") as caught:
        eq.read_encoded_queries(out, "impact")
    assert "\n" not in str(caught.value)
