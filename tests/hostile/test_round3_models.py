"""Hostile input, third pass (work/hostile3/report.md): damaged model configs, a model whose query
side encodes NaN, ``encode_queries``'s counts and its own output folder, a trained model folder
without its metadata, and ``python -m pyserini_moe``. Each is one `error:` line and exit 2 from
the real command, or the command working, never a traceback or a silent success."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import run_main
from pyserini_moe.encode_queries import main as encode_queries_main
from pyserini_moe.errors import UserError
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.modeling import ColbertEncoder, DprBiEncoder, SiameseBiEncoder, SpladeEncoder
from pyserini_moe.modeling.base import MODEL_FILE, WEIGHTS_FILE, RetrievalModel
from pyserini_moe.search import __main__ as search_cli

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run: Callable[[Path], dict[str, Path]],
       tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round3"))


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


def _index(encoder: Path, corpus: Path, out: Path, capsys) -> tuple[int, str]:
    code = run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(corpus), "--index",
                                     str(out), "--encoder", str(encoder), "--device", "cpu",
                                     "--quiet"])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def _encode_queries(index: Path, corpus: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    code = run_main(encode_queries_main, ["--index", str(index), "--topics", f"{corpus}:test",
                                          "--output", str(out), "--device", "cpu", *extra])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def _edit_config(folder: Path, edit: str) -> Path:
    config = folder / "config.json"
    if edit == "truncated":
        config.write_text('{"model_type": "bert", "hidden_size": 32')
    else:
        field, value = edit.split("=")
        config.write_text(json.dumps({**json.loads(config.read_text()), field: value}))
    return config


@pytest.mark.parametrize("edit", ["num_attention_heads=two", "truncated"])
def test_a_saved_model_with_a_damaged_config_is_one_error_line(ws, tmp_path, capsys,
                                                               edit) -> None:  # H52, H53
    broken = tmp_path / "model"
    shutil.copytree(ws["model"], broken)
    config = _edit_config(broken, edit)
    code, err = _index(broken, ws["corpus"], tmp_path / "i", capsys)
    assert code == 2 and err.startswith(f"error: {config}: the model config is damaged")
    assert "save or copy the model again" in err and not (tmp_path / "i").exists()


@pytest.mark.parametrize("edit", ["hidden_size=big", "truncated"])
def test_a_backbone_with_a_damaged_config_is_one_error_line(tiny_bert, tiny_corpus, tmp_path,
                                                            capsys, edit) -> None:  # H54
    broken = tmp_path / "bert"
    shutil.copytree(tiny_bert, broken)
    config = _edit_config(broken, edit)
    code, err = _index(broken, tiny_corpus, tmp_path / "i", capsys)
    # (a truncated one was "not a local model folder and not loadable from the hub")
    assert code == 2 and err.startswith(f"error: {config}: the model config is damaged")
    assert not (tmp_path / "i").exists()


def test_a_model_whose_queries_encode_to_nan_fails_the_search(nan_query_dpr, tiny_corpus,
                                                              tmp_path, capsys) -> None:  # H55
    code = run_main(search_cli.main, ["--retriever", "dense", "--index",
                                      str(nan_query_dpr["index"]), "--topics",
                                      f"{tiny_corpus}:test", "--output", str(tmp_path / "run.trec"),
                                      "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err == ("error: query 'what is dense retrieval' encodes to NaN or "
                                 "infinite values (the model's weights are broken: a diverged "
                                 "training?)")
    assert not (tmp_path / "run.trec").exists()


def test_a_model_whose_queries_encode_to_nan_writes_no_encoded_queries(
        nan_query_dpr, tiny_corpus, tmp_path, capsys) -> None:  # H56
    code, err = _encode_queries(nan_query_dpr["index"], tiny_corpus, tmp_path / "enc", capsys)
    assert code == 2 and "encodes to NaN or infinite values" in err
    assert not (tmp_path / "enc").exists()


def _nan(model: RetrievalModel) -> RetrievalModel:
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return model.eval()


@pytest.mark.parametrize("kind", ["dense", "impact", "multivector"])
def test_every_query_encoder_refuses_non_finite_vectors(tiny_bert, tiny_mlm, kind) -> None:
    from pyserini_moe.encode.adapters import (
        DenseQueryEncoder,
        ImpactQueryEncoder,
        MultiVectorQueryEncoder,
    )

    encoder, model = {
        "dense": (DenseQueryEncoder, lambda: SiameseBiEncoder.from_backbone(tiny_bert,
                                                                            device="cpu")),
        "impact": (ImpactQueryEncoder, lambda: SpladeEncoder.from_backbone(tiny_mlm,
                                                                           device="cpu")),
        "multivector": (MultiVectorQueryEncoder,
                        lambda: ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu")),
    }[kind]
    torch.manual_seed(0)
    sound = encoder(model().eval(), max_length=16)
    assert len(sound.encode_batch(["cat", "the cat sat on the mat"])) == 2  # padding is not NaN
    broken = encoder(_nan(model()), max_length=16)
    with pytest.raises(UserError, match="query 'cat' encodes to NaN or infinite values"):
        broken.encode_batch(["cat", "dog"])


@pytest.mark.parametrize("flags", [["--batch-size", "0"], ["--batch-size", "-1"],
                                   ["--query-max-length", "-3"]])
def test_encode_queries_refuses_counts_below_one(ws, tmp_path, capsys, flags) -> None:  # H31, H33
    with pytest.raises(SystemExit) as done:  # argparse refuses it before any work
        _encode_queries(ws["index"], ws["corpus"], tmp_path / "enc", capsys, *flags)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2 and err.endswith(f"argument {flags[0]}: must be >= 1, got {flags[1]}")
    assert not (tmp_path / "enc").exists()


def test_encode_queries_overwrites_its_own_folder_only(ws, tmp_path, capsys) -> None:  # H68
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


def test_a_trained_model_without_its_metadata_is_refused(ws, tiny_bert, tmp_path,
                                                         capsys) -> None:  # H51
    torch.manual_seed(0)
    model = DprBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "dpr")
    (model / MODEL_FILE).unlink()
    code, err = _index(model, ws["corpus"], tmp_path / "i", capsys)
    assert code == 2 and err == (f"error: {model}: the model metadata ({MODEL_FILE}) is missing "
                                 f"beside a trained model's weights ({WEIGHTS_FILE}): the folder "
                                 "is incomplete; save or copy the model again")
    assert not (tmp_path / "i").exists()


def test_a_siamese_model_without_its_metadata_is_still_a_backbone(ws, tmp_path) -> None:
    """Its weights are transformers' own file and its sentence-transformers files say how it
    pools: read as a backbone it gives the trained model's vectors, so it is not refused."""
    from pyserini_moe.modeling.auto import load_encoder
    from pyserini_moe.modeling.base import Side, load_model

    bare = tmp_path / "siamese"
    shutil.copytree(ws["model"], bare)
    (bare / MODEL_FILE).unlink()
    texts = ["what is dense retrieval"]
    expected = load_model(ws["model"], "cpu").encode(texts, Side.QUERY).dense
    got = load_encoder(str(bare), device="cpu").encode(texts, Side.QUERY).dense
    assert torch.allclose(got, expected, atol=1e-5)


def test_python_m_pyserini_moe_is_the_console_script() -> None:  # H97
    done = subprocess.run([sys.executable, "-m", "pyserini_moe", "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: pyserini-moe COMMAND")
    assert "encode-queries" in done.stdout
    bare = subprocess.run([sys.executable, "-m", "pyserini_moe"], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: pyserini-moe COMMAND")


def test_the_package_door_is_thin() -> None:
    """Like every ``python -m`` door: it imports its command and nothing else."""
    door = Path(__file__).resolve().parents[2] / "pyserini_moe" / "__main__.py"
    imported = {node.module for node in ast.walk(ast.parse(door.read_text()))
                if isinstance(node, ast.ImportFrom)}
    assert imported == {"pyserini_moe.cli.main"}
