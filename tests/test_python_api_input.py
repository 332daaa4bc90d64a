"""The Python API given what a notebook may pass by mistake: every wrong value is one
``UserError`` naming it, never a traceback from inside Faiss, a tokenizer or numpy, and never a
silent wrong result (``k=None`` returning every document, a dict of queries searched by its
keys, a string of metrics read character by character, a NaN score ranked first)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import pyserini_moe as pm
from pyserini_moe.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def indexes(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    from pyserini_moe.modeling import TaserEncoder

    root = tmp_path_factory.mktemp("api-input")
    torch.manual_seed(0)
    model = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu")
    model.query_max_length = 16
    model.save(root / "taser")
    built = {"dense": root / "dense", "bm25": root / "bm25"}
    pm.build_index("dense", corpus=tiny_corpus, encoder=root / "taser", index=built["dense"])
    pm.build_index("bm25", corpus=tiny_corpus, index=built["bm25"])
    return {**built, "model": root / "taser"}


@pytest.fixture(scope="module", params=["dense", "bm25"])
def searcher(request, indexes):
    return pm.open_searcher(indexes[request.param])


@pytest.mark.parametrize("k", [0, -1, 2.5, 3.0, True, "5", None, 10**12])
def test_k_is_a_whole_number_from_one(searcher, k) -> None:
    with pytest.raises(UserError, match=re.escape(f"k {k!r}: give a whole number")):
        searcher.search("cat sat", k=k)


def test_a_numpy_whole_number_is_a_k(searcher) -> None:
    assert len(searcher.search("cat sat", k=np.int64(3))) == 3


@pytest.mark.parametrize(("query", "words"), [
    ("cat \ud800", "half of a UTF-16 surrogate pair"), ("\x00", "empty query"),
    ("\x01\x02", "empty query")])
def test_a_query_no_tokenizer_or_lucene_takes_is_named(searcher, query, words) -> None:
    with pytest.raises(UserError, match=words):
        searcher.search(query)


@pytest.mark.parametrize(("queries", "qids", "words"), [
    (["cat", None], ["a", "b"], "query 'b' is NoneType"),
    (["cat", b"dog"], ["a", "b"], "query 'b' is bytes"),
    (["cat", ""], ["a", "b"], "empty query (query 'b')"),
    ({"a": "cat"}, ["a"], "got dict for the queries"),
    (["cat", "dog"], [1, 2], "query id 1 is int"),
    (["cat"], ["a b"], "query id 'a b': an id is one word"),
    (None, None, "got NoneType for the queries")])
def test_batch_search_names_the_query_it_cannot_search(searcher, queries, qids, words) -> None:
    with pytest.raises(UserError, match=re.escape(words)):
        searcher.batch_search(queries, qids, k=2)


def test_batch_search_takes_any_sequence(searcher) -> None:
    expected = searcher.batch_search(["cat sat", "sparse query"], ["a", "b"], k=2)
    assert searcher.batch_search((q for q in ["cat sat", "sparse query"]), ("a", "b"), k=2) \
        == expected
    assert searcher.batch_search(np.array(["cat sat", "sparse query"]), ["a", "b"], k=2) \
        == expected
    by_numpy_ids = searcher.batch_search(["cat sat", "sparse query"], np.array(["a", "b"]), k=2)
    assert by_numpy_ids == expected and all(type(q) is str for q in by_numpy_ids)


def test_run_takes_a_mapping_a_name_or_a_path(searcher, tiny_corpus) -> None:
    by_path = searcher.run(tiny_corpus / "queries.jsonl", k=2)
    assert by_path == searcher.run(str(tiny_corpus / "queries.jsonl"), k=2)
    assert set(by_path) == {"q0", "q1", "q2", "q3"}
    with pytest.raises(UserError, match="run takes {qid: text}.*got list"):
        searcher.run(["ab", "cd"], k=1)  # was: "b" and "d" searched as queries "a" and "c"
    with pytest.raises(UserError, match="query 'a' is int"):
        searcher.run({"a": 5})


@pytest.mark.parametrize(("index", "settings", "words"), [
    ([], {}, "needs an index"), ("", {}, "index '': give a folder path"),
    (b"x", {}, "index b'x': give a folder path"), (None, {}, "index None"),
    ("dense", {"hits": 5}, "hits is k"),
    ("dense", {"query_max_length": 2.5}, "--query-max-length: expected an integer"),
    ("bm25", {"k1": "x"}, "--k1: expected a number"),
    ("dense", {"warp": 3}, "open_searcher has no setting warp")])
def test_open_searcher_refuses_what_it_cannot_open(indexes, index, settings, words) -> None:
    given = indexes.get(index, index) if isinstance(index, str) else index
    with pytest.raises(UserError, match=re.escape(words)):
        pm.open_searcher(given, **settings)


def test_a_number_written_as_text_is_read_as_the_parser_would(indexes) -> None:
    assert pm.open_searcher(indexes["bm25"], k1="0.9").search("cat") \
        == pm.open_searcher(indexes["bm25"]).search("cat")


@pytest.mark.parametrize(("kind", "settings", "words"), [
    ("bm25", {"inside": True}, "inside the input"),
    ("dense", {"inside": True}, "inside the input"),
    ("dense", {"max_lenght": 10}, "a dense build_index has no setting max_lenght"),
    ("bm25", {"k1": 2.0}, "a bm25 build_index has no setting k1"),
    ("dense", {"batch_size": 2.5}, "--batch-size: expected an integer"),
    ("dense", {"index": None}, "index None: give a folder path"),
    ("dense", {"batch_size": np.int64(2), "max_length": np.float64(1.5)},
     "--max-length: expected an integer, found np.float64(1.5)")])
def test_build_index_refuses_settings_it_cannot_use(indexes, tiny_corpus, tmp_path, kind,
                                                    settings, words) -> None:
    index = tiny_corpus / "idx" if settings.pop("inside", False) else tmp_path / "idx"
    index = settings.pop("index", index)
    encoder = indexes["model"] if kind != "bm25" else None
    with pytest.raises(UserError, match=re.escape(words)):
        pm.build_index(kind, corpus=tiny_corpus, index=index, encoder=encoder, **settings)
    assert not (tiny_corpus / "idx").exists()


@pytest.mark.parametrize(("run", "hits", "words"), [
    ({1: {"d1": 1.0}}, None, "query id 1 is int"),
    ({"a\nb": {"d1": 1.0}}, None, "an id is one word"),
    ({"q": {"d 1": 1.0}}, None, "document id 'd 1'"),
    ({"q": {"d1": math.nan}}, None, "score nan is not a finite number"),
    ({"q": {"d1": "1.0"}}, None, "score '1.0' is not a finite number"),
    ({"q": ["d1"]}, None, "query 'q' holds list"),
    ([("q", "d1", 1.0)], None, "the run is list"),
    ({"q": {"d1": 1.0}}, -1, "hits -1"), ({"q": {"d1": 1.0}}, 0, "hits 0"),
    ({"q": {"d1": 1.0}}, 1.5, "hits 1.5"),
    ({"q": {"d\udc00": 1.0}}, None, "half of a UTF-16 surrogate pair"),
    ({"q\x00": {"d1": 1.0}}, None, "an id holds no control characters")])
def test_write_trec_run_writes_only_what_reads_back(tmp_path, run, hits, words) -> None:
    with pytest.raises(UserError, match=re.escape(words)):
        pm.write_trec_run(run, tmp_path / "run.trec", hits=hits)
    assert not (tmp_path / "run.trec").exists()


@pytest.mark.parametrize("path", [b"run.trec", None, ""])
def test_a_run_path_is_a_string_or_a_path(path) -> None:
    for call in (lambda: pm.write_trec_run({"q": {"d": 1.0}}, path),
                 lambda: pm.read_trec_run(path)):
        with pytest.raises(UserError, match=re.escape(f"run path {path!r}: give a file path")):
            call()


RUN = {"q0": {"d0": 2.0, "d5": 1.0}, "q1": {"d3": 2.0, "d1": 1.0}}
QRELS = {"q0": {"d0": 1}, "q1": {"d1": 1}}


@pytest.mark.parametrize(("run", "qrels", "words"), [
    ({"q0": ["d0", "d5"]}, QRELS, "query 'q0' holds list"),
    (None, QRELS, "the run is NoneType"),
    (RUN, None, "qrels is NoneType"),
    ({0: {"d0": 1.0}}, {"0": {"d0": 1}}, "query id 0 is int"),
    ({"q0": {"d0": math.nan, "d5": 1.0}}, QRELS, "score nan"),
    ({"q0": {"d0": "2", "d5": "10"}}, QRELS, "score '2'"),
    (RUN, {"q0": {"d0": "1"}}, "grade '1' is not a whole number"),
    (RUN, {"q0": {"d0": 0.5}}, "grade 0.5 is not a whole number")])
def test_evaluate_refuses_runs_and_qrels_it_would_misread(run, qrels, words) -> None:
    with pytest.raises(UserError, match=re.escape(words)):
        pm.evaluate(run, qrels, ["ndcg@10"])


def test_evaluate_takes_one_metric_as_a_string_and_says_what_is_missing(capsys) -> None:
    assert pm.evaluate(RUN, QRELS, "ndcg@10") == pm.evaluate(RUN, QRELS, ["ndcg@10"])
    pm.evaluate({"q0": {"d0": 1.0}}, QRELS, ["ndcg@10"])
    assert "1 of 2 judged queries have no results" in capsys.readouterr().err


def test_evaluate_with_no_metrics_named_reports_its_default(tmp_path) -> None:
    assert set(pm.evaluate(RUN, QRELS, None)) == {"ndcg@10", "recall@100"}
    with pytest.raises(IsADirectoryError, match="is a folder, not a run file"):
        pm.evaluate(tmp_path, QRELS)


@pytest.mark.parametrize("name", [None, "", 5, b"model"])
def test_load_model_names_a_folder_or_a_backbone(name) -> None:
    with pytest.raises(UserError, match="give a folder path"):
        pm.load_model(name)


def test_a_model_given_as_an_index_is_named_a_model(indexes) -> None:
    with pytest.raises(UserError, match="it looks like a model: build an index with it first"):
        pm.open_searcher(indexes["model"])


def test_a_searcher_closes_and_refuses_to_search_after(indexes) -> None:
    """Pyserini's searchers close; ours had no close and no ``with``."""
    with pm.open_searcher(indexes["dense"]) as searcher:
        assert searcher.search("cat", k=1)
    with pytest.raises(UserError, match="this searcher is closed"):
        searcher.search("cat")


def test_a_loaded_model_as_encoder_says_to_save_it_and_odd_paths_are_named_short(
        indexes, tiny_corpus, tmp_path) -> None:
    """A model object's repr is kilobytes: it was read as a file name ("File name too long")."""
    model = pm.load_model(indexes["model"])
    with pytest.raises(UserError, match=r"^encoder: a loaded \w+; save it first"):
        pm.build_index("dense", corpus=tiny_corpus, index=tmp_path / "i", encoder=model)
    with pytest.raises(UserError, match=r"^encoder: a loaded \w+; save it first"):
        pm.open_searcher(indexes["dense"], encoder=model)
    with pytest.raises(UserError, match=r"^corpus \(a \w+\): give a folder path") as refused:
        pm.build_index("dense", corpus=model, index=tmp_path / "i", encoder=indexes["model"])
    assert len(str(refused.value)) < 200
    with pytest.raises(UserError, match=r"^bm25_index \(a dict\): give a folder path"):
        pm.open_searcher(indexes["dense"], bm25_index={"a": 1})
    assert not (tmp_path / "i").exists()
