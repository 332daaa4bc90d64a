"""Pyserini's flag names on our search command: --output-format msmarco, --remove-query,
--weight-on-dense, --normalization, --ef-search."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.runs import ranked, read_trec_run
from pyserini_moe.search.hybrid import hybrid_fusion

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flags")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(tiny_corpus), "--index",
                           str(root / "bm25"), "--quiet"]) == 0
    for faiss in ("flat", "hnsw8"):
        assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                               str(root / faiss), "--encoder", str(model), "--faiss", faiss,
                               "--device", "cpu", "--quiet"]) == 0
    return {"root": root, "topics": f"{tiny_corpus}:test"}


def search(ws, *args: str) -> int:
    bm25 = args[args.index("--index") + 1] == str(ws["root"] / "bm25")
    device = [] if bm25 else ["--device", "cpu"]  # a BM25 search refuses --device
    return run_main(search_cli.main, ["--topics", ws["topics"], "--quiet", *device, *args])


def test_msmarco_output_and_remove_query(ws, tmp_path) -> None:
    trec, ms = tmp_path / "r.trec", tmp_path / "r.tsv"
    assert search(ws, "--index", str(ws["root"] / "bm25"), "--output", str(trec),
                  "--hits", "5") == 0
    assert search(ws, "--index", str(ws["root"] / "bm25"), "--output", str(ms), "--hits", "5",
                  "--output-format", "msmarco") == 0
    run = read_trec_run(trec)
    expected = [f"{q}\t{d}\t{r}" for q in run for r, (d, _) in enumerate(ranked(run[q]), 1)]
    assert ms.read_text().splitlines() == expected
    # A document whose id is the query's own id (as in ArguAna) is dropped; --hits still holds.
    from pyserini_moe.data.topics import load_topics

    qid = next(iter(run))
    top = ranked(run[qid])[0][0]
    renamed = tmp_path / "topics.tsv"
    renamed.write_text(f"{top}\t{load_topics(ws['topics'])[qid]}\n")  # the query, renamed
    kept, dropped = tmp_path / "kept.trec", tmp_path / "dropped.trec"
    for out, extra in ((kept, []), (dropped, ["--remove-query"])):
        assert run_main(search_cli.main, ["--topics", str(renamed), "--index",
                                          str(ws["root"] / "bm25"), "--output", str(out),
                                          "--hits", "3", "--quiet", *extra]) == 0
    assert ranked(read_trec_run(kept)[top])[0][0] == top
    hits = read_trec_run(dropped)[top]
    assert top not in hits and len(hits) == 3


def test_hybrid_flags_as_pyserini_names_them(ws, tmp_path) -> None:
    base = ["--retriever", "dense", "--index", str(ws["root"] / "flat"), "--bm25-index",
            str(ws["root"] / "bm25"), "--hits", "10", "--candidates", "20", "--alpha", "0.3"]
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    assert search(ws, *base, "--output", str(a), "--normalization", "--weight-on-dense") == 0
    dense, bm25 = tmp_path / "d.trec", tmp_path / "s.trec"
    assert search(ws, "--retriever", "dense", "--index", str(ws["root"] / "flat"), "--hits",
                  "20", "--output", str(dense)) == 0
    assert search(ws, "--index", str(ws["root"] / "bm25"), "--hits", "20",
                  "--output", str(bm25)) == 0
    expected = hybrid_fusion(read_trec_run(dense), read_trec_run(bm25), 0.3, True, True, k=10)
    got = read_trec_run(a)
    for qid in expected:
        assert [d for d, _ in ranked(got[qid])] == [d for d, _ in ranked(expected[qid])]
    assert search(ws, *base, "--output", str(b)) == 0
    assert read_trec_run(a) != read_trec_run(b)


def test_ef_search_on_hnsw_only(ws, tmp_path, capsys) -> None:
    assert search(ws, "--retriever", "dense", "--index", str(ws["root"] / "hnsw8"), "--output",
                  str(tmp_path / "h.trec"), "--ef-search", "64") == 0
    assert search(ws, "--retriever", "dense", "--index", str(ws["root"] / "flat"), "--output",
                  str(tmp_path / "f.trec"), "--ef-search", "64") == 2
    assert "applies to an HNSW index" in capsys.readouterr().err
