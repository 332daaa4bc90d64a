"""Unusual input to the ``encode-queries`` command (:mod:`pyserini_moe.cli.encode_queries`):
counts below one, queries a model encodes to NaN, and ``--overwrite`` of a folder that is
not (only) its own output."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.encode_queries import main as encode_queries_main
from tests.helpers import err_text, kept, user_files

pytestmark = pytest.mark.usefixtures("one_thread")


def _encode_queries(index: Path, corpus: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    code = run_main(encode_queries_main, ["--index", str(index), "--topics", f"{corpus}:test",
                                          "--output", str(out), "--device", "cpu", *extra])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_model_whose_queries_encode_to_nan_writes_no_encoded_queries(
        nan_query_dpr, tiny_corpus, tmp_path, capsys) -> None:
    code, err = _encode_queries(nan_query_dpr["index"], tiny_corpus, tmp_path / "enc", capsys)
    assert code == 2 and "encodes to NaN or infinite values" in err
    assert not (tmp_path / "enc").exists()


@pytest.mark.parametrize("flags", [["--batch-size", "0"], ["--batch-size", "-1"],
                                   ["--query-max-length", "-3"]])
def test_encode_queries_refuses_counts_below_one(ws, tmp_path, capsys, flags) -> None:
    with pytest.raises(SystemExit) as done:  # argparse refuses it before any work
        _encode_queries(ws["index"], ws["corpus"], tmp_path / "enc", capsys, *flags)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2 and err.endswith(f"argument {flags[0]}: must be >= 1, got {flags[1]}")
    assert not (tmp_path / "enc").exists()


def test_encode_queries_overwrites_its_own_folder_only(ws, tmp_path, capsys) -> None:
    out = tmp_path / "enc"
    assert _encode_queries(ws["index"], ws["corpus"], out, capsys)[0] == 0
    (out / "embedding.pkl").write_bytes(b"stale")
    code, err = _encode_queries(ws["index"], ws["corpus"], out, capsys)
    assert code == 2 and err == f"error: {out} already exists; pass --overwrite to replace it"
    assert _encode_queries(ws["index"], ws["corpus"], out, capsys, "--overwrite")[0] == 0
    assert (out / "embedding.pkl").read_bytes() != b"stale"

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    code, err = _encode_queries(ws["index"], ws["corpus"], notes, capsys, "--overwrite")
    assert code == 2 and err.startswith(f"error: {notes} holds no embedding.pkl")
    assert (notes / "todo.txt").read_text() == "mine"


def test_encode_queries_overwrite_keeps_user_files_beside_the_queries(ws, tmp_path,
                                                                      capsys) -> None:
    out = tmp_path / "equ"
    argv = ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test", "--output",
            str(out), "--device", "cpu", "--overwrite"]
    assert run_main(encode_queries_main, argv) == 0
    user_files(out)
    (out / "mine").mkdir()
    assert run_main(encode_queries_main, argv) == 2
    assert "holds files this toolkit did not write (e.g. mine/), also notes.txt, sub/" \
        in err_text(capsys)
    assert kept(out) and (out / "embedding.pkl").is_file()


@pytest.mark.parametrize("name", ["x.jsonl", "x.json", "x.pkl", "x.tsv", "x.txt", "x.trec",
                                  "x.pkl.gz", "x.JSONL"])
def test_dense_queries_named_like_a_file_are_refused(ws, tmp_path, capsys, name) -> None:
    out = tmp_path / name
    code, err = _encode_queries(ws["index"], ws["corpus"], out, capsys)
    assert code == 2 and err == (
        f"error: --output {out}: a dense index's queries are a folder holding embedding.pkl "
        f"(Pyserini's encoded-queries layout), not a {out.suffix.lower()} file: name it without "
        f"the suffix, e.g. {tmp_path / 'x'}")
    assert not out.exists()


def test_impact_queries_are_said_to_be_encoded_for_an_impact_index(tiny_bert, tiny_corpus,
                                                                   tmp_path, capsys) -> None:
    import torch

    from pyserini_moe.cli import index as index_cli
    from pyserini_moe.modeling import CotMoteEncoder

    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, sparse_top_k=12, device="cpu")
    index = tmp_path / "impact"
    assert index_cli.main(["--retriever", "impact", "--corpus", str(tiny_corpus), "--index",
                           str(index), "--encoder", str(model.save(tmp_path / "model")),
                           "--device", "cpu", "--quiet"]) == 0
    out = tmp_path / "q.jsonl"
    code, err = _encode_queries(index, tiny_corpus, out, capsys)
    assert code == 0 and err == f"4 queries encoded for an impact index into {out}"
