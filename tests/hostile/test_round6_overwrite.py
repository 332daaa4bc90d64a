"""Sixth hostile pass (work/hostile6/report.md), outputs: --overwrite replaces only a folder
holding nothing but what that kind of output writes (never a user's files put beside, a
collection or a model named by mistake), pre-training deletes nothing before its inputs are read
and leaves nothing half-written when interrupted, and a pseudo-query file's BOM is dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.encode_queries import main as encode_queries_main
from pyserini_moe.pretrain import main as pretrain_main
from pyserini_moe.train.pretrain import pseudo_query_pairs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round6"))


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _user_files(folder: Path) -> Path:
    """``folder`` with a user's notes and a sub-folder of theirs put in it."""
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "sub" / "y").write_text("mine")
    (folder / "notes.txt").write_text("keep")
    return folder


def _kept(folder: Path) -> bool:
    return (folder / "notes.txt").read_text() == "keep" and (folder / "sub" / "y").is_file()


def _pretrain(tiny_bert: Path, output: Path, *extra: str) -> int:
    return run_main(pretrain_main, ["--backbone", str(tiny_bert), "--output-dir", str(output),
                                    "--max-steps", "2", "--batch-size", "2", "--max-length",
                                    "16", "--context-max-length", "8", "--device", "cpu",
                                    "--quiet", *extra])


def _pseudo_queries(corpus: Path, tmp_path: Path, text: str = "d0\tcat sat\nd1\tdog\n") -> str:
    file = tmp_path / "pq.tsv"
    file.write_text(text, encoding="utf-8")
    return f"{corpus}={file}"


def test_pretrain_overwrite_keeps_a_folder_of_user_files(tiny_bert, tiny_corpus, tmp_path,
                                                         capsys) -> None:  # H6-80
    folder = _user_files(tmp_path / "pu")
    code = _pretrain(tiny_bert, folder, "--pseudo-queries",
                     _pseudo_queries(tiny_corpus, tmp_path), "--overwrite")
    assert code == 2 and "holds files this toolkit did not write (e.g. notes.txt), also sub/" \
        in _err(capsys)
    assert _kept(folder) and sorted(p.name for p in folder.iterdir()) == ["notes.txt", "sub"]


def test_pretrain_overwrite_whose_inputs_fail_keeps_the_earlier_output(
        tiny_bert, tiny_corpus, tmp_path, capsys) -> None:  # H6-81, H6-79
    out = tmp_path / "pt"
    pq = _pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 0
    before = sorted(p.name for p in out.iterdir())
    assert before == ["model", "pretrain_args.json", "pretrain_log.jsonl"]
    # the tiny corpus has no multi-sentence document: no examples, exit 2, nothing deleted
    assert _pretrain(tiny_bert, out, "--corpus", str(tiny_corpus), "--overwrite") == 2
    assert "no pre-training examples" in _err(capsys)
    assert sorted(p.name for p in out.iterdir()) == before and (out / "model").is_dir()
    # its own earlier output is replaced, and the card names where the model is
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq, "--overwrite") == 0
    assert 'load_model("model")' in (out / "model" / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.tsv", "pt"]


def test_an_interrupted_pretraining_leaves_nothing_and_reruns(tiny_bert, tiny_corpus, tmp_path,
                                                              capsys, monkeypatch) -> None:
    import pyserini_moe.train.pretrain as module  # noqa: PLC0415  # H6-79

    real = module._pass
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(module, "_pass", interrupted)
    out = tmp_path / "runs" / "p7"
    pq = _pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 130
    assert "interrupted" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.tsv"]  # not even runs/
    monkeypatch.setattr(module, "_pass", real)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 0  # not "already exists"
    assert (out / "model" / "pyserini_moe.json").is_file()


def test_a_pseudo_query_file_with_a_bom_reads_its_first_docid(tiny_corpus,
                                                              tmp_path) -> None:  # H6-37
    spec = _pseudo_queries(tiny_corpus, tmp_path, "\ufeffd0\tcat sat\r\nd1\tdog\r\n")
    pairs = pseudo_query_pairs(spec)
    assert [query for query, _ in pairs] == ["cat sat", "dog"]


def _index(ws: dict[str, Path], folder: Path) -> int:
    return run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(ws["corpus"]),
                                     "--encoder", str(ws["model"]), "--index", str(folder),
                                     "--device", "cpu", "--max-length", "64", "--overwrite",
                                     "--quiet"])


def test_index_overwrite_keeps_user_files_put_in_an_index(ws, tmp_path, capsys) -> None:  # H6-94
    folder = tmp_path / "ixu"
    shutil.copytree(ws["index"], folder)
    _user_files(folder)
    assert _index(ws, folder) == 2
    assert "holds files this toolkit did not write (e.g. notes.txt), also sub/" in _err(capsys)
    assert _kept(folder) and (folder / "pyserini_moe_index.json").is_file()
    shutil.rmtree(folder / "sub")
    (folder / "notes.txt").unlink()
    assert _index(ws, folder) == 0  # an index holding nothing else is still replaced


@pytest.mark.parametrize("source", ["corpus", "bert", "model"])
def test_index_overwrite_never_replaces_a_collection_or_a_model(ws, tiny_bert, tmp_path, capsys,
                                                                source) -> None:  # H6-96
    folder = tmp_path / "copy"
    shutil.copytree({"corpus": ws["corpus"], "bert": tiny_bert, "model": ws["model"]}[source],
                    folder)
    before = sorted(p.name for p in folder.iterdir())
    assert _index(ws, folder) == 2
    err = _err(capsys)
    assert ("is a model, not an index" if source == "model"
            else "holds files this toolkit did not write") in err
    assert sorted(p.name for p in folder.iterdir()) == before
    assert not (folder / "pyserini_moe_index.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # no temporary left


def test_encode_queries_overwrite_keeps_user_files_beside_the_queries(ws, tmp_path,
                                                                      capsys) -> None:  # H6-95
    out = tmp_path / "equ"
    argv = ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test", "--output",
            str(out), "--device", "cpu", "--overwrite"]
    assert run_main(encode_queries_main, argv) == 0
    _user_files(out)
    (out / "mine").mkdir()
    assert run_main(encode_queries_main, argv) == 2
    assert "holds files this toolkit did not write (e.g. mine/), also notes.txt, sub/" \
        in _err(capsys)
    assert _kept(out) and (out / "embedding.pkl").is_file()
