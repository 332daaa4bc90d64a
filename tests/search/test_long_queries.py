"""Long queries (ArguAna's average 194 words): a model reads every position it has by default,
never a 64-token cut; BM25 past Lucene's clause limit is one error line, not a stack trace."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.modeling import SiameseBiEncoder, Side
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import __main__ as search_cli
from pyserini_moe.search.dispatch import SearchSettings, open_any

pytestmark = pytest.mark.usefixtures("one_thread")
WORDS = ["what", "is", "dense", "retrieval", "cat", "sat", "on", "the", "mat", "expert", "model"]
LONG_QUERY = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(150))  # 150 tokens + 2


@pytest.fixture(scope="module")
def dense_index(tiny_bert, tiny_corpus, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("long")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(root / "dense"), "--encoder", str(model), "--device", "cpu",
                           "--quiet"]) == 0
    return root / "dense"


def test_a_long_query_is_read_whole_by_default(dense_index, caplog) -> None:
    """The default --query-max-length is the model's own limit (512 positions here), so a query
    past 64 tokens is encoded whole: not as its 64-token cut, and nothing said."""
    searcher = open_any(SearchSettings(retriever="dense", index=str(dense_index), device="cpu"))
    encoder = searcher.query_encoder
    model = encoder.model
    assert len(model.tokenizer(LONG_QUERY)["input_ids"]) > 64
    assert encoder.max_length == 512
    with caplog.at_level(logging.WARNING):
        vector = np.asarray(encoder.encode(LONG_QUERY))
    whole = model.encode([LONG_QUERY], Side.QUERY, 512).dense[0].numpy()
    cut = model.encode([LONG_QUERY], Side.QUERY, 64).dense[0].numpy()
    np.testing.assert_allclose(vector, whole, atol=1e-6)
    assert not np.allclose(vector, cut, atol=1e-3)
    assert encoder.queries_cut == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_query_past_the_chosen_length_is_cut_and_said(dense_index, tmp_path, capsys) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_text(f"q1\t{LONG_QUERY}\n")
    out = tmp_path / "run.trec"
    assert run_main(search_cli.main, ["--retriever", "dense", "--index", str(dense_index),
                                      "--topics", str(topics), "--output", str(out),
                                      "--query-max-length", "64", "--device", "cpu",
                                      "--quiet"]) == 0
    assert read_trec_run(out)["q1"]
    err = capsys.readouterr().err  # one notice line of the search, not a logging line
    assert "warning: queries longer than 64 tokens are cut (--query-max-length)" in err


def test_bm25_past_the_clause_limit_names_the_query(tiny_corpus, tmp_path, capsys) -> None:
    """Anserini's BM25 query has a clause per distinct term and field; Lucene refuses more than
    1024. Pyserini's own search fails with a stack trace; ours names the query."""
    index = tmp_path / "bm25"
    assert index_cli.main(["--corpus", str(tiny_corpus), "--index", str(index), "--quiet"]) == 0
    letters = "abcdefghijklmnopqrstuvwxyz"
    distinct = " ".join(f"{a}{b}{c}q" for a in letters for b in letters for c in "ab")  # 1352
    topics = tmp_path / "topics.tsv"
    topics.write_text(f"ok\tcat sat on the mat\nhuge\t{distinct}\n")
    code = run_main(search_cli.main, ["--index", str(index), "--topics", str(topics),
                                      "--output", str(tmp_path / "r.trec"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "'huge'" in err and "TooManyClauses" in err and "1024" in err
    assert not (tmp_path / "r.trec").exists()
