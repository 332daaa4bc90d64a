"""Hostile input: damaged model and index files, and a public BEIR name while offline, are one
`error:` line and exit 2 from the real command, not a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.search import __main__ as search_cli


@pytest.fixture(scope="module")
def model(tiny_bert, tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(
        tmp_path_factory.mktemp("m") / "siamese")


@pytest.fixture(scope="module")
def dense_index(tiny_corpus, model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(out), "--encoder", str(model), "--device", "cpu",
                           "--max-length", "64", "--quiet"]) == 0
    return out


def _search(index: Path, corpus: Path, out: Path, capsys) -> tuple[int, str]:
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(index), "--topics",
                                      f"{corpus}:test", "--output", str(out), "--device", "cpu",
                                      "--quiet"])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_truncated_weights_file_is_one_error_line(model, tiny_corpus, tmp_path, capsys) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    weights = broken / "model.safetensors"  # a Siamese model: the sentence-transformers layout
    weights.write_bytes(weights.read_bytes()[:1000])
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "i"), "--encoder", str(broken),
                                     "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith(f"error: {weights}: cannot read the weights")
    assert "damaged or incomplete" in err and not (tmp_path / "i").exists()


def test_a_docid_file_shorter_than_the_index_is_one_error_line(dense_index, tiny_corpus, tmp_path,
                                                               capsys) -> None:
    broken = tmp_path / "dense"
    shutil.copytree(dense_index, broken)
    lines = (broken / "docid").read_text().splitlines()
    (broken / "docid").write_text("\n".join(lines[:-3]) + "\n")
    code, err = _search(broken, tiny_corpus, tmp_path / "run.trec", capsys)
    assert code == 2 and "docid file and the Faiss index hold different numbers" in err
    assert not (tmp_path / "run.trec").exists()


def test_an_unreadable_faiss_file_is_one_error_line(dense_index, tiny_corpus, tmp_path,
                                                    capsys) -> None:
    broken = tmp_path / "dense"
    shutil.copytree(dense_index, broken)
    (broken / "index").write_bytes(b"not faiss")
    code, err = _search(broken, tiny_corpus, tmp_path / "run.trec", capsys)
    assert code == 2 and err.startswith(f"error: {broken}/index: Faiss cannot read it")


def test_a_public_beir_name_offline_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    code = run_main(index_cli.main, ["--retriever", "bm25", "--corpus", "nfcorpus", "--index",
                                     str(tmp_path / "i")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("error: collection 'nfcorpus': not in the local data "
                                        "folder ")  # where a local copy was looked for first
    assert ", and could not download the data set" in err
    assert not (tmp_path / "i").exists()


class _Code:
    """Pickles as a call of ``os.mkdir(marker)``: proof, if the folder appears, that it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def test_a_backbone_whose_pickled_weights_hold_code_is_not_loaded(tiny_bert, tiny_corpus,
                                                                  tmp_path, capsys) -> None:
    """Issue 39: a pytorch_model.bin holding code ended in torch's traceback (it never ran)."""
    evil = tmp_path / "evil"
    shutil.copytree(tiny_bert, evil)
    (evil / "model.safetensors").unlink()
    torch.save({"embeddings.word_embeddings.weight": _Code(tmp_path / "ran")},
               evil / "pytorch_model.bin")
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(tiny_corpus),
                                     "--index", str(tmp_path / "i"), "--encoder", str(evil),
                                     "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: {evil / 'pytorch_model.bin'}: not loaded: it holds code "
                                 "or objects a safe load refuses"]
    assert not (tmp_path / "ran").exists() and not (tmp_path / "i").exists()
