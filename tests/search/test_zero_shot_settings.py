"""A backbone indexed zero-shot with Pyserini's auto-encoder flags (pooling, L2 norm, prefixes):
the index records them and every search of it encodes queries alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.meta import IndexMeta, read_meta
from pyserini_moe.search.encoded import open_searcher

pytestmark = pytest.mark.usefixtures("one_thread")


def index(tiny_corpus: Path, tiny_bert: Path, out: Path, *flags: str) -> IndexMeta:
    assert run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--encoder", str(tiny_bert), "--index", str(out),
                                     "--max-length", "32", "--quiet", *flags]) == 0
    return read_meta(out)


def test_the_index_records_zero_shot_flags_and_searches_use_them(tiny_corpus, tiny_bert,
                                                                 tmp_path):
    meta = index(tiny_corpus, tiny_bert, tmp_path / "e5", "--pooling", "cls", "--no-l2-norm",
                 "--query-prefix", "query: ", "--passage-prefix", "passage: ")
    assert meta.zero_shot == {"pooling": "cls", "normalize": False,
                                 "query_prefix": "query: ", "passage_prefix": "passage: "}
    searcher = open_searcher("dense", tmp_path / "e5")  # checks the encoder's fingerprint
    assert searcher.query_encoder.model.args == meta.zero_shot
    run = searcher.search({"q0": "what is dense retrieval"}, hits=5, progress=False)
    assert len(run["q0"]) == 5

    plain = index(tiny_corpus, tiny_bert, tmp_path / "plain")
    assert plain.zero_shot == {"pooling": "mean", "normalize": True}
    assert open_searcher("dense", tmp_path / "plain").query_encoder.model.args == \
        plain.zero_shot


def test_zero_shot_flags_on_a_trained_model_are_one_error_line(tiny_corpus, tiny_bert,
                                                              tmp_path, capsys):
    from pyserini_moe.modeling.biencoder import SiameseBiEncoder

    trained = SiameseBiEncoder.from_backbone(str(tiny_bert), device="cpu").save(tmp_path / "m")
    assert run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--encoder", str(trained), "--index", str(tmp_path / "i"),
                                     "--query-prefix", "q: ", "--quiet"]) == 2
    assert "trained model" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()
