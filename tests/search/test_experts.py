"""One model, several indexes: CoT-MoTE's dense (Faiss) and sparse (Lucene impact) indexes from one
checkpoint, searched by Pyserini's own searchers and fused by ``--retriever fused``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pyserini_moe import _java
from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.modeling import CotMoteEncoder, Side
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import __main__ as search_cli
from pyserini_moe.search.fusion import came_sum

_java.bootstrap()

from pyserini_moe.encode import DenseQueryEncoder, ImpactQueryEncoder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
QUERIES = {"q0": "what is dense retrieval", "q1": "cat sat on the mat",
           "q2": "mixture of expert model", "q3": "sparse query"}
FACTOR = 100


@pytest.fixture(scope="module")
def cotmote(tiny_bert, tmp_path_factory) -> str:
    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, sparse_top_k=12, device="cpu")
    with torch.no_grad():  # passage experts differ from query experts, as after training
        for block in model.expert_layers:
            block.experts[1].intermediate.dense.weight.mul_(1.5)
    return str(model.save(tmp_path_factory.mktemp("models") / "cotmote"))


@pytest.fixture(scope="module")
def indexes(tiny_corpus, cotmote, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("indexes")
    for kind in ("dense", "impact"):
        assert index_cli.main(["--retriever", kind, "--corpus", str(tiny_corpus), "--index",
                               str(out / kind), "--encoder", cotmote, "--device", "cpu",
                               "--quiet"]) == 0
    return {"dense": out / "dense", "impact": out / "impact"}


def search(corpus: Path, out: Path, *args: str) -> dict:
    assert search_cli.main([*args, "--topics", f"{corpus}:test", "--output", str(out),
                            "--device", "cpu", "--quiet"]) == 0
    return read_trec_run(out)


def test_one_checkpoint_serves_faiss_and_lucene_impact_and_pyserini_agrees(
        tiny_corpus, cotmote, indexes, tmp_path) -> None:
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.lucene import LuceneImpactSearcher

    dense = search(tiny_corpus, tmp_path / "d.trec", "--retriever", "dense", "--index",
                   str(indexes["dense"]), "--hits", "10")
    sparse = search(tiny_corpus, tmp_path / "s.trec", "--retriever", "impact", "--index",
                    str(indexes["impact"]), "--hits", "10")
    faiss_searcher = FaissSearcher(str(indexes["dense"]), DenseQueryEncoder(cotmote, device="cpu"))
    impact_searcher = LuceneImpactSearcher(str(indexes["impact"]),
                                           ImpactQueryEncoder(cotmote, device="cpu"))
    for qid, text in QUERIES.items():
        hits = faiss_searcher.search(text, k=10)
        assert {h.docid: pytest.approx(h.score, abs=1e-5) for h in hits} == dense[qid]
        hits = impact_searcher.search(text, k=10)
        assert {h.docid: pytest.approx(float(h.score)) for h in hits} == sparse[qid]
    # Lucene keeps only the docid: a 1,000-hit search loads no vector (they live in doc_vectors/)
    stored = impact_searcher.doc(hits[0].docid)
    assert stored.raw() is None and stored.contents() is None
    assert (indexes["impact"] / "doc_vectors" / "terms.i32").stat().st_size > 0


def test_exact_rescoring_needs_the_doc_vectors(tiny_corpus, indexes, tmp_path, capsys) -> None:
    import shutil

    old = tmp_path / "old-impact"  # as built by an older version: no doc_vectors/
    shutil.copytree(indexes["impact"], old)
    shutil.rmtree(old / "doc_vectors")
    args = ["--retriever", "fused", "--index", str(indexes["dense"]), str(old), "--fusion",
            "exact", "--topics", f"{tiny_corpus}:test", "--output", str(tmp_path / "f.trec"),
            "--device", "cpu", "--quiet"]
    assert run_main(search_cli.main, args) == 2
    assert "has no doc_vectors/" in capsys.readouterr().err
    assert not (tmp_path / "f.trec").exists()


def test_exact_fusion_is_the_models_hybrid_score(tiny_corpus, cotmote, indexes, tmp_path) -> None:
    from pyserini_moe.data.beir import BeirCollection
    from pyserini_moe.modeling import load_model

    fused = search(tiny_corpus, tmp_path / "h.trec", "--retriever", "fused", "--index",
                   str(indexes["dense"]), str(indexes["impact"]), "--fusion", "exact",
                   "--candidates", "5", "--hits", "30", "--expert-runs", str(tmp_path / "e"))
    experts = {k: read_trec_run(tmp_path / f"e.{k}.trec") for k in ("dense", "impact")}
    model = load_model(cotmote, device="cpu")
    docs = {d.id: d.contents for d in BeirCollection.load(tiny_corpus).corpus()}
    for qid, text in QUERIES.items():
        union = set(experts["dense"][qid]) | set(experts["impact"][qid])
        assert set(fused[qid]) == union and len(experts["dense"][qid]) == 5
        q = model.encode([text], Side.QUERY)
        p = model.encode([docs[d] for d in sorted(union)], Side.PASSAGE)
        q_sparse = torch.round(q.sparse * FACTOR)  # what the impact index compares
        p_sparse = torch.round(p.sparse * FACTOR)
        expected = (q.dense @ p.dense.T + q_sparse @ p_sparse.T / FACTOR ** 2)[0]
        np.testing.assert_allclose([fused[qid][d] for d in sorted(union)], expected.numpy(),
                                   rtol=1e-5, atol=1e-4)
    # the expert runs are in the model's units: impact scores divided by the factor squared
    sparse = search(tiny_corpus, tmp_path / "s.trec", "--retriever", "impact", "--index",
                    str(indexes["impact"]), "--hits", "5")
    for qid in QUERIES:
        assert experts["impact"][qid] == {d: pytest.approx(s / FACTOR ** 2)
                                          for d, s in sparse[qid].items()}


def test_came_sum_fusion_matches_the_fusion_library(tiny_corpus, indexes, tmp_path) -> None:
    fused = search(tiny_corpus, tmp_path / "f.trec", "--retriever", "fused", "--index",
                   str(indexes["dense"]), str(indexes["impact"]), "--candidates", "6",
                   "--hits", "10", "--expert-runs", str(tmp_path / "e"))
    runs = [read_trec_run(tmp_path / f"e.{k}.trec") for k in ("dense", "impact")]
    expected = came_sum(runs, k=10)
    for qid in QUERIES:
        assert fused[qid] == {d: pytest.approx(s, abs=1e-4) for d, s in expected[qid].items()}


def test_fused_search_errors(tiny_corpus, indexes, tmp_path, capsys) -> None:
    base = ["--topics", f"{tiny_corpus}:test", "--output", str(tmp_path / "x.trec"), "--quiet"]
    assert run_main(search_cli.main, ["--retriever", "dense", "--index", str(indexes["dense"]),
                                      str(indexes["impact"]), *base]) == 2
    assert "--retriever fused" in capsys.readouterr().err
    assert run_main(search_cli.main, ["--retriever", "fused", "--index", str(indexes["dense"]),
                                      *base]) == 2
    assert "at least two indexes" in capsys.readouterr().err
    assert run_main(search_cli.main, ["--retriever", "fused", "--index", str(indexes["dense"]),
                                      str(indexes["dense"]), *base]) == 2
    assert "same kind" in capsys.readouterr().err
    assert run_main(search_cli.main, ["--retriever", "fused", "--index", str(indexes["dense"]),
                                      str(indexes["impact"]), "--fusion", "linear", *base]) == 2
    assert "--fusion-weights" in capsys.readouterr().err
    assert not (tmp_path / "x.trec").exists()


def test_came_expert_runs_are_what_pyserinis_own_searchers_return(tiny_corpus, bert3,
                                                                   tmp_path) -> None:
    """CAME's three indexes from one pass; the fused search's lexical and global expert runs are
    the runs of Pyserini's LuceneImpactSearcher and FaissSearcher with our query encoders."""
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.lucene import LuceneImpactSearcher

    from pyserini_moe.modeling import CameEncoder

    torch.manual_seed(0)
    model = CameEncoder.from_backbone(bert3, shared_layers=1, dim=16, pooling="mean", device="cpu")
    with torch.no_grad():  # some terms above 0, as after training, but not in every document:
        # Pyserini's impact searcher drops query terms of idf 0 (min_idf=0 keeps idf > 0 only)
        model.heads["lexical"].bias.add_(0.5)
    came = str(model.save(tmp_path / "came"))
    kinds = ("impact", "multivector", "dense")
    paths = [str(tmp_path / kind) for kind in kinds]
    assert index_cli.main(["--retriever", *kinds, "--corpus", str(tiny_corpus), "--index", *paths,
                           "--encoder", came, "--device", "cpu", "--quiet"]) == 0
    fused = search(tiny_corpus, tmp_path / "f.trec", "--retriever", "fused", "--index", *paths,
                   "--candidates", "6", "--hits", "10", "--expert-runs", str(tmp_path / "e"))
    experts = [read_trec_run(tmp_path / f"e.{kind}.trec") for kind in kinds]
    assert fused == {q: {d: pytest.approx(s, abs=1e-4) for d, s in run.items()}
                     for q, run in came_sum(experts, k=10).items()}
    lexical, local, global_ = experts
    assert local == search(tiny_corpus, tmp_path / "m.trec", "--retriever", "multivector",
                           "--index", paths[1], "--hits", "6")
    faiss_searcher = FaissSearcher(paths[2], DenseQueryEncoder(came, device="cpu"))
    impact_searcher = LuceneImpactSearcher(paths[0], ImpactQueryEncoder(came, device="cpu"))
    for qid, text in QUERIES.items():
        hits = faiss_searcher.search(text, k=6)
        assert {h.docid: pytest.approx(h.score, abs=1e-5) for h in hits} == global_[qid]
        hits = impact_searcher.search(text, k=6)
        assert {h.docid: pytest.approx(float(h.score) / FACTOR ** 2) for h in hits} == lexical[qid]
    assert len(lexical) == len(global_) == len(QUERIES)


def test_static_pruning_and_term_counts(tiny_corpus, cotmote, indexes, tmp_path, capsys) -> None:
    from pyserini_moe.index.doc_vectors import DocVectors
    from pyserini_moe.index.meta import read_meta

    full = read_meta(indexes["impact"])
    assert full.doc_max_terms is None and full.terms_per_doc > 5
    pruned = tmp_path / "pruned"
    assert index_cli.main(["--retriever", "impact", "--corpus", str(tiny_corpus), "--index",
                           str(pruned), "--encoder", cotmote, "--device", "cpu", "--quiet",
                           "--doc-max-terms", "5"]) == 0
    meta = read_meta(pruned)
    assert meta.doc_max_terms == 5 and meta.terms_per_doc <= 5
    store, whole = DocVectors(pruned / "doc_vectors"), DocVectors(indexes["impact"] / "doc_vectors")
    assert len(store.terms) <= 5 * len(store.rows) < len(whole.terms)
    capsys.readouterr()
    search(tiny_corpus, tmp_path / "p.trec", "--retriever", "impact", "--index", str(pruned),
           "--query-max-terms", "3")
    said = capsys.readouterr().err
    terms = float(said.split(" terms a query")[0].rsplit("; ", 1)[1])
    assert 0 < terms <= 3
