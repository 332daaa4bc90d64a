"""Fixtures that several command-line test modules share: a bare-named collection, saved models
and an index of them, and small runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.modeling import DprBiEncoder, SiameseBiEncoder


@pytest.fixture
def shared(tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder (``PYSERINI_MOE_DATA``) holding the tiny corpus as the collection ``tiny``."""
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus, data / "tiny")
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(data))
    return data


@pytest.fixture(scope="module")
def model(tiny_bert, tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(
        tmp_path_factory.mktemp("m") / "siamese")


@pytest.fixture(scope="module")
def nan_query_dpr(tiny_bert: Path, tiny_corpus: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A DPR model whose query encoder is all NaN and whose passage encoder is sound, and its
    dense index (the indexer checks passages only, so it builds)."""
    root = tmp_path_factory.mktemp("nanq")
    torch.manual_seed(0)
    model = DprBiEncoder.from_backbone(tiny_bert, device="cpu")
    with torch.no_grad():
        for parameter in model.query_encoder.parameters():
            parameter.fill_(float("nan"))
    folder = model.save(root / "dpr")
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(root / "dense"), "--encoder", str(folder), "--device", "cpu",
                           "--quiet"]) == 0
    return {"root": root, "model": folder, "index": root / "dense"}


@pytest.fixture
def run_files(tmp_path: Path) -> Path:
    """Two runs over two judged queries, a run of other queries, and the qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq2 Q0 d2 1 3.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d4 1 9.0 b\nq2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "other.trec").write_text("x1 Q0 d1 1 3.0 o\nx2 Q0 d2 1 3.0 o\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path
