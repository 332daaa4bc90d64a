"""A Faiss index built elsewhere (Pyserini's encoder writes ``index`` + ``docid`` and no metadata
of ours) is searched when ``--encoder`` names the model, with a warning; without it, the error
says what to give."""

from __future__ import annotations

import shutil

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.index.meta import META_FILE
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.runs import read_trec_run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_faiss_index_without_our_metadata(tiny_bert, tiny_corpus, tmp_path, capsys,
                                            caplog) -> None:
    torch.manual_seed(0)
    model = str(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m"))
    ours = tmp_path / "ours"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(ours), "--encoder", model, "--device", "cpu", "--quiet"]) == 0
    foreign = tmp_path / "foreign"
    shutil.copytree(ours, foreign)
    (foreign / META_FILE).unlink()
    base = ["--retriever", "dense", "--topics", f"{tiny_corpus}:test", "--device", "cpu",
            "--quiet"]
    assert run_main(search_cli.main, [*base, "--index", str(foreign), "--output",
                                      str(tmp_path / "x.trec")]) == 2
    assert "give --encoder" in capsys.readouterr().err
    assert search_cli.main([*base, "--index", str(ours), "--output", str(tmp_path / "a.trec")]) == 0
    assert search_cli.main([*base, "--index", str(foreign), "--encoder", model, "--output",
                            str(tmp_path / "b.trec")]) == 0
    assert "nothing can check" in caplog.text
    assert read_trec_run(tmp_path / "a.trec") == read_trec_run(tmp_path / "b.trec")
