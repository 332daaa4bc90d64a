"""Seventh hostile pass (work/hostile7/report.md), outputs: --overwrite judges a folder by what it
holds, at every depth (a user's ``_notes.txt`` is no Lucene segment, a user's files in an index's
``doc_vectors/`` or a pre-training's ``model/`` are not the toolkit's), a training folder is named
as one, training never replaces an earlier training without --overwrite nor trains into an index
or a folder of other files, and encode_queries --overwrite replaces only impact queries."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.io import refuse_foreign_folder
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.pretrain import main as pretrain_main
from pyserini_moe.search.encoded_queries import _check_output, encode_queries
from pyserini_moe.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round7"))


def _err(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _index(ws: dict[str, Path], folder: Path) -> int:
    return run_main(index_cli.main, ["--retriever", "dense", "--corpus", str(ws["corpus"]),
                                     "--encoder", str(ws["model"]), "--index", str(folder),
                                     "--device", "cpu", "--max-length", "64", "--overwrite",
                                     "--quiet"])


def _dense_copy(ws: dict[str, Path], folder: Path) -> Path:
    shutil.copytree(ws["index"], folder)
    return folder


# --- H7-01 / H7-02: a name starting with "_" is no Lucene segment; doc_vectors/ is looked in ---


@pytest.mark.parametrize("name", ["_notes.txt", "_thesis_v2.tex", "doc_vectors/thesis.tex",
                                  "doc_vectors/mine.bin"])
def test_index_overwrite_keeps_a_users_file(ws, tmp_path, capsys, name) -> None:
    folder = _dense_copy(ws, tmp_path / "ix")
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_text("mine")
    before = _files(folder)
    assert _index(ws, folder) == 2
    # a dense index writes no doc_vectors/ (an impact index does): the folder is named whole
    shown = name.split("/")[0] + "/" if "/" in name else name
    assert f"did not write (e.g. {shown})" in _err(capsys)
    assert _files(folder) == before


def test_lucenes_own_file_names_are_an_indexs(tmp_path) -> None:
    """The names of a Lucene 9 impact index (as Anserini writes them) stay the index's own."""
    folder = tmp_path / "lucene"
    folder.mkdir()
    names = ["pyserini_moe_index.json", "segments_1", "write.lock", "_0.cfs", "_0.cfe", "_0.si",
             "_0.fdm", "_0.fdt", "_0.fdx", "_0.fnm", "_0.nvd", "_0.nvm", "_0.tvd", "_0.tvm",
             "_0.tvx", "_0_1.liv", "_a.kdd", "_0_Lucene90_0.dvd", "_0_Lucene90_0.dvm",
             "_0_Lucene99_0.doc", "_0_Lucene99_0.pos", "_0_Lucene99_0.tim", "_0_Lucene99_0.tip",
             "_0_Lucene99_0.tmd"]
    for name in names:
        (folder / name).write_text("")
    refuse_foreign_folder(folder, "pyserini_moe_index.json")


# --- H7-02 / H7-03: a sub-folder is judged by what it holds -------------------------------------


def test_an_impact_indexs_own_doc_vectors_are_its_own(tmp_path) -> None:
    folder = tmp_path / "impact"
    (folder / "doc_vectors").mkdir(parents=True)
    for name in ("pyserini_moe_index.json", "_0.si", "segments_1", "doc_vectors/docids.txt",
                 "doc_vectors/vocab.json", "doc_vectors/indptr.i64", "doc_vectors/terms.i32",
                 "doc_vectors/weights.i32"):
        (folder / name).write_text("")
    refuse_foreign_folder(folder, "pyserini_moe_index.json")
    (folder / "doc_vectors" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"\(e\.g\. doc_vectors/notes\.txt\)"):
        refuse_foreign_folder(folder, "pyserini_moe_index.json")


def _pretrain(tiny_bert: Path, tiny_corpus: Path, output: Path, *extra: str) -> int:
    pq = output.parent / "pq.tsv"
    pq.write_text("d0\tcat sat\nd1\tdog\n", encoding="utf-8")
    return run_main(pretrain_main, ["--backbone", str(tiny_bert), "--output-dir", str(output),
                                    "--pseudo-queries", f"{tiny_corpus}={pq}", "--max-steps",
                                    "1", "--batch-size", "2", "--max-length", "16",
                                    "--context-max-length", "8", "--device", "cpu", "--quiet",
                                    *extra])


def test_pretrain_overwrite_keeps_a_users_files_in_its_model(tiny_bert, tiny_corpus, tmp_path,
                                                             capsys) -> None:
    out = tmp_path / "pt"
    assert _pretrain(tiny_bert, tiny_corpus, out) == 0
    (out / "model" / "NOTES.md").write_text("mine")
    (out / "model" / "mine").mkdir()
    (out / "model" / "mine" / "a.txt").write_text("mine")
    before = _files(out)
    assert _pretrain(tiny_bert, tiny_corpus, out, "--overwrite") == 2
    assert "did not write (e.g. model/NOTES.md), also model/mine/" in _err(capsys)
    assert _files(out) == before


# --- H7-04 / H7-09 / H7-10: training folders ----------------------------------------------------


def _trainer(recipe, toy_data, tiny_bert: Path, output: Path | None = None) -> Trainer:
    """A two-step Siamese training on the toy data, into ``output`` (default: the recipe's)."""
    torch.manual_seed(0)
    if output is not None:
        recipe = dataclasses.replace(recipe, output_dir=output)
    return Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                   progress=False)


def test_index_overwrite_names_a_training_folder_as_one(ws, siamese_recipe, toy_data, tiny_bert,
                                                        capsys) -> None:
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    before = _files(out)
    assert _index(ws, out) == 2
    assert "is a training run, not an index" in _err(capsys)
    assert _files(out) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_training_into_an_index_is_refused(ws, siamese_recipe, toy_data, tiny_bert, tmp_path,
                                           overwrite) -> None:
    folder = _dense_copy(ws, tmp_path / "ix")
    before = _files(folder)
    with pytest.raises(FileExistsError, match="is an index, not a training run"):
        _trainer(siamese_recipe, toy_data, tiny_bert, folder).train(overwrite=overwrite)
    assert _files(folder) == before


def test_a_finished_training_without_its_checkpoint_is_not_replaced(siamese_recipe, toy_data,
                                                                    tiny_bert) -> None:
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    shutil.rmtree(out / "checkpoint")  # to save space
    before = _files(out)
    with pytest.raises(FileExistsError, match="already holds a training run .*pass --overwrite"):
        _trainer(siamese_recipe, toy_data, tiny_bert).train()
    assert _files(out) == before


def test_a_users_recipe_and_logs_are_not_replaced(siamese_recipe, toy_data, tiny_bert) -> None:
    out = siamese_recipe.output_dir
    out.mkdir()
    for name in ("recipe.yaml", "train_log.jsonl", "negatives.trec"):
        (out / name).write_text("mine")
    with pytest.raises(FileExistsError, match="already holds a training run"):
        _trainer(siamese_recipe, toy_data, tiny_bert).train()
    assert _files(out) == {name: b"mine" for name in
                           ("negatives.trec", "recipe.yaml", "train_log.jsonl")}


@pytest.mark.parametrize("mine", ["notes.txt", "best/notes.txt", "checkpoint/notes.txt"])
def test_training_overwrite_refuses_a_run_holding_a_users_files(siamese_recipe, toy_data,
                                                                tiny_bert, mine) -> None:
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    (out / mine).write_text("mine")
    before = _files(out)
    with pytest.raises(FileExistsError, match=rf"did not write \(e\.g\. {mine}\)"):
        _trainer(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    assert _files(out) == before  # the checkpoint/ --overwrite deletes is still there


def test_a_run_beside_init_only_trains_and_is_replaced(siamese_recipe, toy_data,
                                                       tiny_bert) -> None:
    """--init-only's init/ is no earlier training, and stays beside the run replacing it."""
    out = siamese_recipe.output_dir
    init = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(out / "init")
    kept = _files(init)
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    assert _trainer(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    assert _files(init) == kept and (out / "best").is_dir()


# --- H7-48: encode_queries --overwrite replaces only impact queries -----------------------------


@pytest.mark.parametrize("text", ['{"_id": "d0", "title": "t", "text": "a corpus"}\n',
                                  "q0 Q0 d0 1 3.0 run\n", '{"id": "d0", "contents": "doc"}\n'])
def test_impact_queries_overwrite_no_other_file(tmp_path, text) -> None:
    output = tmp_path / "corpus.jsonl"
    output.write_text(text)
    with pytest.raises(FileExistsError, match="is not impact encoded queries"):
        encode_queries(tmp_path / "no-index", "impact", {"q0": "cat"}, output, overwrite=True)
    assert output.read_text() == text


def test_impact_queries_written_before_are_replaced(tmp_path) -> None:
    output = tmp_path / "queries.jsonl"
    output.write_text(json.dumps({"id": "q0", "contents": "cat", "vector": {"cat": 35}}) + "\n")
    _check_output(output, "impact", overwrite=True)
    output.write_text("")
    _check_output(output, "impact", overwrite=True)
