"""Indexes built from a model's encodings: several kinds from ONE encoding pass give the indexes
that one-kind builds give, and a failure in one leaves none of them behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pyserini_moe import _java
from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index import encoded
from pyserini_moe.index.encoded import BuildSettings, build_indexes
from pyserini_moe.modeling import CameEncoder

_java.bootstrap()

pytestmark = pytest.mark.usefixtures("one_thread")
KINDS = ("impact", "multivector", "dense")


@pytest.fixture(scope="module")
def came(bert3, tmp_path_factory) -> str:
    torch.manual_seed(0)
    model = CameEncoder.from_backbone(bert3, shared_layers=1, device="cpu")
    return str(model.save(tmp_path_factory.mktemp("models") / "came"))


def index(corpus: Path, encoder: str, kinds: list[str], folders: list[Path], *extra: str) -> int:
    return run_main(index_cli.main, ["--retriever", *kinds, "--index", *map(str, folders),
                                     "--corpus", str(corpus), "--encoder", encoder,
                                     "--device", "cpu", "--batch-size", "7", "--quiet", *extra])


def search(corpus: Path, folder: Path, kind: str, out: Path) -> str:
    from pyserini_moe.search import __main__ as search_cli

    assert search_cli.main(["--retriever", kind, "--index", str(folder), "--topics",
                            f"{corpus}:test", "--output", str(out), "--hits", "10",
                            "--device", "cpu", "--quiet"]) == 0
    return out.read_text()


def test_one_pass_builds_the_indexes_of_one_kind_builds(tiny_corpus, came, tmp_path) -> None:
    together = [tmp_path / f"together-{k}" for k in KINDS]
    assert index(tiny_corpus, came, list(KINDS), together) == 0
    for kind, joint in zip(KINDS, together):
        alone = tmp_path / f"alone-{kind}"
        assert index(tiny_corpus, came, [kind], [alone]) == 0
        meta = json.loads((joint / "pyserini_moe_index.json").read_text())
        assert meta["kind"] == kind and meta == json.loads((alone / "pyserini_moe_index.json")
                                                           .read_text())
        assert search(tiny_corpus, joint, kind, tmp_path / "a.trec") == \
            search(tiny_corpus, alone, kind, tmp_path / "b.trec")
    import faiss

    dense = [faiss.read_index(str(f / "index")) for f in (together[2], tmp_path / "alone-dense")]
    np.testing.assert_array_equal(dense[0].reconstruct_n(0, dense[0].ntotal),
                                  dense[1].reconstruct_n(0, dense[1].ntotal))
    np.testing.assert_array_equal(np.load(together[1] / "vectors.npy"),
                                  np.load(tmp_path / "alone-multivector" / "vectors.npy"))


def test_a_failing_index_leaves_none_of_the_folders(tiny_corpus, came, tmp_path,
                                                    monkeypatch) -> None:
    def lucene_fails(*args, **kwargs):
        raise RuntimeError("Lucene failed")

    # Lucene fails after the whole corpus was encoded and the dense index was complete.
    monkeypatch.setattr(encoded, "lucene_impact_index", lucene_fails)
    kinds = ("dense", "multivector", "impact")
    with pytest.raises(RuntimeError, match="Lucene failed"):
        build_indexes(BuildSettings(str(tiny_corpus), came, {k: tmp_path / k for k in kinds},
                                    device="cpu", progress=False))
    assert not any(tmp_path.iterdir())  # no index, no temporary folder


@pytest.mark.parametrize("kinds,folders,message", [
    (["dense", "impact"], ["a"], "1 --index folder"),
    (["dense", "dense"], ["a", "b"], "twice"),
    (["bm25", "dense"], ["a", "b"], "its own command"),
    (["dense", "impact"], ["a", "a"], "its own output folder"),
])
def test_command_line_errors(tiny_corpus, came, tmp_path, capsys, kinds, folders,
                             message) -> None:
    assert index(tiny_corpus, came, kinds, [tmp_path / f for f in folders]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_compressed_multivector_from_the_command_line(tiny_corpus, came, tmp_path,
                                                      capsys) -> None:
    folder = tmp_path / "mv-pq"
    assert index(tiny_corpus, came, ["multivector"], [folder], "--compression", "pq8") == 0
    meta = json.loads((folder / "pyserini_moe_index.json").read_text())
    assert meta["compression"] == "pq8" and meta["bytes_per_token"] == 10
    assert len(search(tiny_corpus, folder, "multivector", tmp_path / "pq.trec").splitlines()) > 0
    assert index(tiny_corpus, came, ["multivector"], [tmp_path / "bad"], "--compression",
                 "pq7") == 2
    assert "--compression 'pq7'" in capsys.readouterr().err
    assert index(tiny_corpus, came, ["multivector"], [tmp_path / "s"], "--compression", "pq8",
                 "--shard-id", "0", "--shard-num", "2") == 2
    assert "applies to whole indexes" in capsys.readouterr().err
    assert index(tiny_corpus, came, ["dense"], [tmp_path / "d"], "--compression", "pq8") == 2
    assert "--compression applies to multivector" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("bad", "s", "d"))


def test_sorted_batches_and_two_tokenizer_workers_change_nothing_but_rounding(
        tiny_corpus, came, tmp_path) -> None:
    """Length buckets change how texts are padded, never which vector a docid gets: the indexes
    of all three kinds search as the plain build does (same docids in the same order, scores
    within 1e-5)."""
    plain = [tmp_path / f"plain-{k}" for k in KINDS]
    bucketed = [tmp_path / f"bucketed-{k}" for k in KINDS]
    assert index(tiny_corpus, came, list(KINDS), plain) == 0
    assert index(tiny_corpus, came, list(KINDS), bucketed, "--length-bucket", "3",
                 "--tokenizer-workers", "2") == 0
    for kind, a, b in zip(KINDS, plain, bucketed):
        runs = [search(tiny_corpus, f, kind, tmp_path / f"{f.name}.trec").splitlines()
                for f in (a, b)]
        assert [line.split()[:4] for line in runs[0]] == [line.split()[:4] for line in runs[1]]
        scores = [[float(line.split()[4]) for line in run] for run in runs]
        np.testing.assert_allclose(scores[0], scores[1], atol=1e-5, rtol=0)
    import faiss

    dense = [faiss.read_index(str(f / "index")) for f in (plain[2], bucketed[2])]
    np.testing.assert_allclose(dense[0].reconstruct_n(0, dense[0].ntotal),
                               dense[1].reconstruct_n(0, dense[1].ntotal), atol=1e-5)


@pytest.mark.parametrize("flag", ["--length-bucket", "--tokenizer-workers"])
def test_pipeline_flags_must_be_positive(tiny_corpus, came, tmp_path, capsys, flag) -> None:
    assert index(tiny_corpus, came, ["dense"], [tmp_path / "x"], flag, "0") == 2
    assert f"{flag} must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
