"""A collection named bare (``scifact``, ``scifact:test``) is an input like a path: an output
inside its folder in the shared data is refused before any work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.cli.index import main as index_main
from pyserini_moe.cli.search import main as search_main


@pytest.fixture
def shared(tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus, data / "tiny")
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(data))
    return data


def _refused(main, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert run_main(main, argv) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_index_inside_a_bare_named_collection_is_refused(shared: Path, capsys) -> None:
    before = sorted(p.name for p in (shared / "tiny").iterdir())
    err = _refused(index_main, ["--retriever", "bm25", "--corpus", "tiny", "--index",
                                str(shared / "tiny" / "bm25")], capsys)
    assert err.startswith("error: ") and "is inside the input tiny" in err
    assert sorted(p.name for p in (shared / "tiny").iterdir()) == before


def test_a_run_inside_the_collection_of_bare_topics_is_refused(shared: Path, tmp_path: Path,
                                                               capsys) -> None:
    err = _refused(search_main, ["--retriever", "bm25", "--index", str(tmp_path / "nowhere"),
                                 "--topics", "tiny:test", "--output",
                                 str(shared / "tiny" / "qrels" / "run.trec")], capsys)
    assert "is inside the input tiny:test" in err
    assert not (shared / "tiny" / "qrels" / "run.trec").exists()
