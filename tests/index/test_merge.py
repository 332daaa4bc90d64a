"""Sharded encoding and merging: N shards merged give the index one process builds (dense,
multi-vector, impact), and shards that do not belong together are refused."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest
import torch

from pyserini_moe import _java
from pyserini_moe.cli import run_main
from pyserini_moe.cli.merge import main as merge_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.encoded import Shard
from pyserini_moe.index.meta import read_meta
from pyserini_moe.index.multivector import MultiVectorIndex
from pyserini_moe.modeling import ColbertEncoder, SiameseBiEncoder, SpladeEncoder
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import __main__ as search_cli

pytestmark = pytest.mark.usefixtures("one_thread")
_java.bootstrap()


@pytest.fixture(scope="module")
def models(tiny_bert, tiny_mlm, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    return {"dense": str(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(out / "d")),
            "multivector": str(ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu")
                               .save(out / "m")),
            "impact": str(SpladeEncoder.from_backbone(tiny_mlm, device="cpu").save(out / "i"))}


def build(kind: str, corpus: Path, encoder: str, index: Path, *extra: str) -> Path:
    assert index_cli.main(["--retriever", kind, "--corpus", str(corpus), "--index", str(index),
                           "--encoder", encoder, "--device", "cpu", "--quiet",
                           "--batch-size", "7", *extra]) == 0
    return index


def shards(kind: str, corpus: Path, encoder: str, folder: Path, num: int = 3) -> list[str]:
    return [str(build(kind, corpus, encoder, folder / f"s{i}", "--shard-id", str(i),
                      "--shard-num", str(num))) for i in range(num)]


def test_shards_are_contiguous_equal_slices() -> None:
    assert [Shard(i, 3).span(30) for i in range(3)] == [(0, 10), (10, 20), (20, 30)]
    assert [Shard(i, 4).span(10) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert Shard(3, 4).span(6) == (6, 6)  # more shards than documents: an empty one
    with pytest.raises(ValueError, match="shard-id"):
        Shard(3, 3)


def test_merged_dense_shards_equal_the_single_process_index(tiny_corpus, models, tmp_path) -> None:
    single = build("dense", tiny_corpus, models["dense"], tmp_path / "single")
    parts = shards("dense", tiny_corpus, models["dense"], tmp_path)
    assert read_meta(parts[1]).shard == {"id": 1, "num": 3, "start": 10, "stop": 20}
    assert read_meta(parts[1]).num_docs == 10
    # any order on the command line: merged by shard id
    assert merge_main(["--shards", parts[2], parts[0], parts[1], "--index",
                       str(tmp_path / "merged"), "--quiet"]) == 0
    a = faiss.read_index(str(single / "index"))
    b = faiss.read_index(str(tmp_path / "merged" / "index"))
    assert (single / "docid").read_text() == (tmp_path / "merged" / "docid").read_text()
    np.testing.assert_allclose(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal),
                               atol=1e-5)
    meta = read_meta(tmp_path / "merged")
    assert meta.num_docs == 30 and meta.shard is None
    assert meta.encoder_fingerprint == read_meta(single).encoder_fingerprint


def test_merged_multivector_shards_equal_the_single_process_index(tiny_corpus, models,
                                                                  tmp_path) -> None:
    single = MultiVectorIndex(build("multivector", tiny_corpus, models["multivector"],
                                    tmp_path / "single"))
    parts = shards("multivector", tiny_corpus, models["multivector"], tmp_path)
    assert merge_main(["--shards", *parts, "--index", str(tmp_path / "merged"), "--quiet"]) == 0
    merged = MultiVectorIndex(tmp_path / "merged")
    assert merged.docids == single.docids
    np.testing.assert_array_equal(merged.offsets, single.offsets)
    np.testing.assert_allclose(np.asarray(merged.vectors, dtype=np.float32),
                               np.asarray(single.vectors, dtype=np.float32), atol=2e-3)
    assert merged.index.ntotal == single.index.ntotal


def test_merged_impact_shards_search_like_the_single_process_index(tiny_corpus, models,
                                                                  tmp_path) -> None:
    single = build("impact", tiny_corpus, models["impact"], tmp_path / "single")
    parts = shards("impact", tiny_corpus, models["impact"], tmp_path)
    assert read_meta(parts[0]).kind == "impact-shard"
    lines = sum(len((Path(p) / "vectors.jsonl").read_text().splitlines()) for p in parts)
    assert lines == 30
    assert merge_main(["--shards", *parts, "--index", str(tmp_path / "merged"), "--quiet"]) == 0
    runs = []
    for index in (single, tmp_path / "merged"):
        out = tmp_path / f"{index.name}.trec"
        assert search_cli.main(["--retriever", "impact", "--index", str(index), "--topics",
                                f"{tiny_corpus}:test", "--output", str(out), "--device", "cpu",
                                "--quiet"]) == 0
        runs.append(read_trec_run(out))
    assert runs[0] == runs[1]
    merged, whole = read_meta(tmp_path / "merged"), read_meta(single)
    assert merged.num_docs == 30 and merged.terms_per_doc == whole.terms_per_doc
    assert (tmp_path / "merged" / "doc_vectors" / "terms.i32").read_bytes() == \
        (single / "doc_vectors" / "terms.i32").read_bytes()


def test_shards_that_do_not_belong_together_are_refused(tiny_corpus, models, tmp_path,
                                                        capsys) -> None:
    parts = shards("dense", tiny_corpus, models["dense"], tmp_path / "a")
    out = ["--index", str(tmp_path / "merged")]
    assert run_main(merge_main, ["--shards", parts[0], parts[1], *out]) == 2
    assert "ids 0..2 of 3" in capsys.readouterr().err
    assert run_main(merge_main, ["--shards", parts[0], parts[0], parts[1], *out]) == 2
    assert "each once" in capsys.readouterr().err
    multi = shards("multivector", tiny_corpus, models["multivector"], tmp_path / "c")
    assert run_main(merge_main, ["--shards", parts[0], parts[1], multi[2], *out]) == 2
    assert "not shards of one encoding" in capsys.readouterr().err
    full = build("dense", tiny_corpus, models["dense"], tmp_path / "full")
    assert run_main(merge_main, ["--shards", str(full), *out]) == 2
    assert "not an index shard" in capsys.readouterr().err
    assert run_main(merge_main, ["--shards", str(tmp_path / "nowhere"), *out]) == 2
    assert "shard " + str(tmp_path / "nowhere") + " does not exist" in capsys.readouterr().err
    assert not (tmp_path / "merged").exists()
    assert run_main(index_cli.main, ["--corpus", str(tiny_corpus), "--index", str(tmp_path / "x"),
                                     "--shard-id", "0", "--shard-num", "2"]) == 2
    assert "BM25 indexes are not sharded" in capsys.readouterr().err
    assert run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "x"), "--encoder",
                                     models["dense"], "--shard-id", "0"]) == 2
    assert "go together" in capsys.readouterr().err


def test_more_shards_than_documents_are_refused_for_every_shard(tiny_corpus, models, tmp_path,
                                                                 capsys) -> None:
    """Shard 0 of 100 over 30 documents was written and shard 50 refused as empty, so the
    split could never be merged: refused for every shard, naming the most."""
    for shard in ("0", "50"):
        assert run_main(index_cli.main, [
            "--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
            str(tmp_path / f"s{shard}"), "--encoder", models["dense"], "--device", "cpu",
            "--shard-id", shard, "--shard-num", "100", "--quiet"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
            "error: --shard-num 100 is more shards than the 30 documents of collection")
        assert not (tmp_path / f"s{shard}").exists()


def test_searching_one_unmerged_shard_is_said(tiny_corpus, models, tmp_path, caplog) -> None:
    """H89: a shard's run covers its slice only; a forgotten merge is said, not silent."""
    import logging  # noqa: PLC0415

    from pyserini_moe.search.encoded import open_searcher  # noqa: PLC0415

    shard = build("dense", tiny_corpus, models["dense"], tmp_path / "s1", "--shard-id", "1",
                  "--shard-num", "3")
    with caplog.at_level(logging.WARNING):
        open_searcher("dense", shard, device="cpu")
    assert any("is shard 1 of 3" in r.getMessage() and "merge the shards to search the whole corpus"
               in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind, file", [("dense", "docid"), ("impact", "vectors.jsonl")])
def test_a_shard_that_lost_a_line_is_refused(tiny_corpus, models, tmp_path, capsys, kind,
                                             file) -> None:
    """Refused, not merged into an index whose metadata counts the lost document (impact) or
    whose docids are one short of its vectors (dense: "damaged" when searched)."""
    parts = shards(kind, tiny_corpus, models[kind], tmp_path)
    damaged = Path(parts[1]) / file
    damaged.write_text("".join(damaged.read_text().splitlines(keepends=True)[:-1]))
    assert run_main(merge_main, ["--shards", *parts, "--index", str(tmp_path / "merged"),
                                 "--quiet"]) == 2
    assert f"error: {damaged}: 9 documents, but the shard records 10" in capsys.readouterr().err
    assert not (tmp_path / "merged").exists()
