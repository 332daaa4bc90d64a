"""Third hostile pass (work/hostile3/report.md), outputs and indexes: --overwrite replaces only
a folder the toolkit wrote, outputs may not coincide or nest however they are spelled, Faiss
specs that cannot work are one line, a hybrid never mixes two corpora, a recipe in another
encoding is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.io import read_yaml
from pyserini_moe.modeling import ColbertEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round3"))


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_overwrite_never_deletes_a_folder_of_user_files(ws, tmp_path, capsys) -> None:  # H64
    precious = tmp_path / "precious"
    (precious / "sub").mkdir(parents=True)
    (precious / "notes.txt").write_text("keep")
    code = run_main(index_cli.main, ["--retriever", "bm25", "--corpus", str(ws["corpus"]),
                                     "--index", str(precious), "--overwrite", "--quiet"])
    assert code == 2 and "holds files this toolkit did not write (e.g. notes.txt)" in _err(capsys)
    assert (precious / "notes.txt").read_text() == "keep" and (precious / "sub").is_dir()
    # an index it wrote, and an empty folder, are still replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (ws["root"] / "bm25-again", empty):
        for _ in range(2):
            assert index_cli.main(["--retriever", "bm25", "--corpus", str(ws["corpus"]),
                                   "--index", str(folder), "--overwrite", "--quiet"]) == 0


@pytest.mark.parametrize("second", ["{a}/sparse", "{rel}"], ids=["nested", "same, spelled apart"])
def test_two_index_folders_may_not_nest_or_coincide(ws, tmp_path, capsys, monkeypatch,
                                                    second) -> None:  # H70, H71
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    a = tmp_path / "A"
    other = second.format(a=a, rel="x/../A")
    code = run_main(index_cli.main, ["--retriever", "dense", "multivector", "--corpus",
                                     str(ws["corpus"]), "--encoder", str(ws["model"]), "--index",
                                     str(a), other, "--device", "cpu", "--overwrite", "--quiet"])
    err = _err(capsys)  # BuildSettings says it first; the command line's check says it too
    assert code == 2 and "its own output folder, none inside another" in err
    assert not a.exists()


def test_expert_runs_may_not_overwrite_the_fused_run(ws, tmp_path, capsys) -> None:  # H44
    index = str(ws["index"])
    code = run_main(search_cli.main, ["--retriever", "fused", "--index", index, index,
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(tmp_path / "er.dense.trec"), "--expert-runs",
                                      str(tmp_path / "er"), "--device", "cpu", "--quiet"])
    assert code == 2 and "is also the output" in _err(capsys)
    assert not list(tmp_path.iterdir())


def test_eval_outputs_may_not_coincide(ws, tmp_path, capsys) -> None:  # H43
    from pyserini_moe.eval import __main__ as eval_cli  # noqa: PLC0415

    out = str(tmp_path / "x")
    code = run_main(eval_cli.main, ["--run", str(ws["root"] / "run.trec"), "--qrels",
                                    str(ws["root"] / "qrels.txt"), "--output", out, "--table",
                                    out, "--per-query", out])
    assert code == 2 and "one would overwrite the other" in _err(capsys)
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def colbert(tiny_bert, tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu").save(
        tmp_path_factory.mktemp("colbert") / "model")


@pytest.mark.parametrize(("spec", "said"), [
    ("ivf4,pq7", "does not fit the model's 16-dimensional token vectors"),  # H23
    ("ivf100000,pq4", "cannot be trained on this index's"),  # H22
])
def test_a_faiss_spec_that_cannot_work_is_one_line(ws, colbert, tmp_path, capsys, spec,
                                                   said) -> None:
    code = run_main(index_cli.main, ["--retriever", "multivector", "--corpus", str(ws["corpus"]),
                                     "--encoder", str(colbert), "--index", str(tmp_path / "mv"),
                                     "--faiss", spec, "--device", "cpu", "--quiet"])
    err = _err(capsys)
    assert code == 2 and said in err and "faiss::" not in err
    assert not (tmp_path / "mv").exists()


def test_a_hybrid_never_mixes_two_collections(ws, tmp_path, capsys) -> None:  # H82
    other = tmp_path / "other-corpus"
    other.mkdir()
    (other / "corpus.jsonl").write_text(json.dumps({"_id": "x1", "text": "cat sat"}) + "\n")
    bm25 = tmp_path / "bm25-other"
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(other), "--index", str(bm25),
                           "--quiet"]) == 0
    code = run_main(search_cli.main, ["--index", str(ws["index"]), "--bm25-index", str(bm25),
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(tmp_path / "h.trec"), "--device", "cpu", "--quiet"])
    err = _err(capsys)
    assert code == 2 and "hold different collections" in err and "other-corpus" in err
    assert not (tmp_path / "h.trec").exists()


def test_a_recipe_in_another_encoding_is_one_line(tmp_path) -> None:  # H10
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes("# caf\u00e9\noutput_dir: x\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"recipe.yaml: not UTF-8 text \(byte 5\)"):
        read_yaml(recipe, "recipe", UserError)


def test_an_index_rebuilt_while_a_search_opens_it_is_refused(ws, tmp_path, monkeypatch) -> None:
    """H91: the metadata (query encoder) and the vectors must come from one build."""
    import shutil  # noqa: PLC0415

    from pyserini_moe.index.meta import IndexMismatchError  # noqa: PLC0415
    from pyserini_moe.search import encoded  # noqa: PLC0415

    index = Path(shutil.copytree(ws["index"], tmp_path / "live"))
    read = encoded.open_index

    def rebuilt_meanwhile(*args, **kwargs):
        meta = read(*args, **kwargs)
        shutil.copytree(index, tmp_path / "new")  # an --overwrite rebuild renames a new folder
        index.rename(tmp_path / "old")
        (tmp_path / "new").rename(index)
        return meta

    monkeypatch.setattr(encoded, "open_index", rebuilt_meanwhile)
    with pytest.raises(IndexMismatchError, match="was replaced .* search again"):
        encoded.open_searcher("dense", index, device="cpu")
    monkeypatch.setattr(encoded, "open_index", read)
    assert encoded.open_searcher("dense", index, device="cpu").meta.kind == "dense"
