"""Queries encoded by ``encode_queries`` make Pyserini's own command lines (pyserini.search.faiss
--encoded-queries, pyserini.search.lucene --impact --encoder FILE.jsonl) return the runs
``python -m pyserini_moe.search`` returns with the model itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.export import write_topics_tsv
from pyserini_moe.modeling import CotMoteEncoder
from pyserini_moe.runs import ranked, read_trec_run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tiny_bert, tiny_corpus, tmp_path_factory) -> tuple[Path, dict[str, Path], Path]:
    root = tmp_path_factory.mktemp("encoded-queries")
    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, sparse_top_k=12, device="cpu")
    folder = str(model.save(root / "model"))
    indexes = {kind: root / kind for kind in ("dense", "impact")}
    assert index_cli.main(["--retriever", "dense", "impact", "--corpus", str(tiny_corpus),
                           "--index", str(indexes["dense"]), str(indexes["impact"]),
                           "--encoder", folder, "--device", "cpu", "--quiet"]) == 0
    topics = root / "topics.tsv"
    write_topics_tsv(BeirCollection(tiny_corpus).topics("test"), topics)
    return root, indexes, topics


def pyserini(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def same_run(ours: Path, theirs: Path) -> None:
    a, b = read_trec_run(ours), read_trec_run(theirs)
    assert a.keys() == b.keys()
    for qid in a:
        assert [d for d, _ in ranked(a[qid])] == [d for d, _ in ranked(b[qid])]
        assert [s for _, s in ranked(a[qid])] == pytest.approx([s for _, s in ranked(b[qid])],
                                                               abs=1e-4)


@pytest.mark.parametrize("kind", ["dense", "impact"])
def test_pyserini_searches_with_our_encoded_queries(setup, tiny_corpus, kind) -> None:
    root, indexes, topics = setup
    ours = root / f"{kind}.ours.trec"
    assert search_cli.main(["--retriever", kind, "--index", str(indexes[kind]), "--topics",
                            str(topics), "--output", str(ours), "--hits", "10", "--device",
                            "cpu", "--quiet"]) == 0
    encoded = root / ("encoded-dense" if kind == "dense" else "encoded-impact.jsonl")
    assert encode_cli.main(["--index", str(indexes[kind]), "--topics", str(topics),
                            "--output", str(encoded), "--device", "cpu"]) == 0
    theirs = root / f"{kind}.pyserini.trec"
    if kind == "dense":
        pyserini("pyserini.search.faiss", "--index", str(indexes[kind]), "--topics", str(topics),
                 "--encoded-queries", str(encoded), "--output", str(theirs), "--hits", "10")
    else:
        pyserini("pyserini.search.lucene", "--impact", "--index", str(indexes[kind]),
                 "--topics", str(topics), "--encoder", str(encoded), "--output", str(theirs),
                 "--hits", "10")
    same_run(ours, theirs)


def test_a_multivector_index_has_no_pyserini_form(setup, tmp_path, capsys) -> None:
    root, indexes, topics = setup
    index = tmp_path / "multivector"  # the output is not inside it: that is refused first
    index.mkdir()
    (index / "pyserini_moe_index.json").write_text('{"kind": "multivector", "encoder": "m"}')
    assert run_main(encode_cli.main, ["--index", str(index), "--topics", str(topics),
                                      "--output", str(tmp_path / "out")]) == 2
    assert "not 'multivector'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
