"""Cases of the eighth hostile pass, and the two left from the seventh: a query encoder whose
precision cannot match the index refused before its ONNX export (H7-50)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pyserini_moe.cli.search import main as search_main
from pyserini_moe.index.meta import meta_path


@pytest.fixture(scope="module")
def ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    return model_index_run(tmp_path_factory.mktemp("round8"))




def _topics(root: Path) -> Path:
    topics = root / "topics.tsv"
    topics.write_text("q0\tword one\n")
    return topics


# H7-50: --backend onnx-int8 on an index the fp32 model built --------------------------------

def test_int8_queries_on_an_fp32_index_are_refused_before_the_export(ws, capsys, error_line) -> None:
    message = error_line(search_main, ["--index", str(ws["index"]), "--topics", str(_topics(ws["root"])),
                                   "--output", str(ws["root"] / "out.trec"),
                                   "--backend", "onnx-int8"], capsys)
    assert message.endswith(f"{ws['index']} was built by the fp32 model (PyTorch or --backend "
                            "onnx), so a --backend onnx-int8 query encoder cannot match its "
                            "vectors: search with --backend torch or onnx, or rebuild the index "
                            "with --backend onnx-int8")
    assert not (ws["model"] / "onnx").exists()  # nothing exported into the input model
    assert not (ws["root"] / "out.trec").exists()


def test_fp32_queries_on_an_int8_index_are_refused_before_the_export(ws, tmp_path, capsys,
                                                                     error_line) -> None:
    index = tmp_path / "int8"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).symlink_to(path)
    (index / meta_path(index).name).unlink()
    meta = json.loads(meta_path(ws["index"]).read_text())
    meta["encoder_fingerprint"] += "-int8-matmul-per-channel"
    meta_path(index).write_text(json.dumps(meta))
    message = error_line(search_main, ["--index", str(index), "--topics", str(_topics(tmp_path)),
                                   "--output", str(tmp_path / "out.trec"), "--backend", "onnx"],
                     capsys)
    assert "was built by an int8 ONNX encoder, so a --backend onnx query encoder cannot match " \
           "its vectors: search with --backend onnx-int8" in message
    assert not (ws["model"] / "onnx").exists()


# H8-02: index --overwrite judged a dense index by every kind's files --------------------------

@pytest.mark.parametrize("user_files", [["vectors.npy", "docids.txt"], ["vectors.jsonl"],
                                        ["offsets.npy"]])
def test_a_dense_index_holds_only_a_dense_indexs_files(ws, tmp_path, user_files) -> None:
    from pyserini_moe.io import refuse_foreign_folder

    index = tmp_path / "dense"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).write_bytes(path.read_bytes())
    refuse_foreign_folder(index, "pyserini_moe_index.json")  # its own files: replaceable
    for name in user_files:
        (index / name).write_text("the user's")
    with pytest.raises(FileExistsError, match=f"holds files this toolkit did not write \\(e.g. "
                                              f"{sorted(user_files)[0]}\\)"):
        refuse_foreign_folder(index, "pyserini_moe_index.json")


def test_an_index_of_unreadable_kind_may_hold_any_index_kinds_files(tmp_path) -> None:
    from pyserini_moe.io import refuse_foreign_folder

    index = tmp_path / "old"
    index.mkdir()
    (index / "pyserini_moe_index.json").write_text("not json")
    for name in ("docid", "index", "vectors.npy", "segments_1"):
        (index / name).write_text("x")
    refuse_foreign_folder(index, "pyserini_moe_index.json")


# H8-03: a folder of an index and encoded queries is refused for that reason -----------------

def test_a_folder_of_two_kinds_of_output_is_named_as_such(ws, tmp_path) -> None:
    from pyserini_moe.io import refuse_foreign_folder

    index = tmp_path / "mixed"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).write_bytes(path.read_bytes())
    (index / "embedding.pkl").write_bytes(b"x")
    for marker in ("embedding.pkl", "pyserini_moe_index.json", None):
        with pytest.raises(FileExistsError, match=f"^{index} holds an index and encoded queries "
                                                  "together: --overwrite replaces a folder of "
                                                  "one kind of output only"):
            refuse_foreign_folder(index, marker)


# H8-07: an interrupted train --overwrite left a mix of two runs, the old checkpoint deleted ----

def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _trainer(recipe, toy_data, tiny_bert: Path, **training):
    import dataclasses

    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    torch.manual_seed(0)
    recipe = dataclasses.replace(recipe, training=dataclasses.replace(recipe.training,
                                                                      **training))
    return Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                   progress=False)


def _interrupt_at(monkeypatch, step: int) -> None:
    from pyserini_moe.train.trainer import Trainer

    real = Trainer._train_step

    def train_step(self, group, loop, at, *args):
        if at + 1 == step:
            raise KeyboardInterrupt
        return real(self, group, loop, at, *args)

    monkeypatch.setattr(Trainer, "_train_step", train_step)


def test_an_interrupted_replacement_puts_the_earlier_run_back(siamese_recipe, toy_data,
                                                              tiny_bert, monkeypatch) -> None:
    out = siamese_recipe.output_dir
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    before = _tree(out)
    assert "checkpoint/state.pt" in before and "best/pyserini_moe.json" in before
    _interrupt_at(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        _trainer(siamese_recipe, toy_data, tiny_bert, max_steps=3).train(overwrite=True)
    assert _tree(out) == before  # the earlier run, whole: resumable, its recipe and logs
    assert not list(out.parent.glob(f".{out.name}.old-*"))


def test_a_replacement_with_a_checkpoint_is_the_run_kept(siamese_recipe, toy_data, tiny_bert,
                                                         monkeypatch) -> None:
    out = siamese_recipe.output_dir
    _trainer(siamese_recipe, toy_data, tiny_bert).train()
    _interrupt_at(monkeypatch, 3)  # after the new run's first checkpoint (step 1)
    with pytest.raises(KeyboardInterrupt):
        _trainer(siamese_recipe, toy_data, tiny_bert, max_steps=4, eval_every=1).train(
            overwrite=True)
    progress = json.loads((out / "checkpoint" / "progress.json").read_text())
    assert progress["step"] == 2  # the new run's, which --resume continues
    assert "max_steps: 4" in (out / "recipe.yaml").read_text()
    assert not list(out.parent.glob(f".{out.name}.old-*"))


# H8-10, H8-12: a setting given twice with two values --------------------------------------------

def test_a_flag_given_twice_with_two_values_is_refused(capsys) -> None:
    from pyserini_moe.cli import ArgumentParser

    parser = ArgumentParser(prog="x")
    parser.add_argument("--hits", "--k", type=int, default=10)
    parser.add_argument("--faiss-params")
    assert parser.parse_args(["--hits", "3", "--hits", "3"]).hits == 3  # the same value: harmless
    for argv, said in ((["--hits", "3", "--hits", "5"], "--hits 3 and --hits 5"),
                       (["--hits", "3", "--k", "5"], "--hits 3 and --k 5"),
                       (["--faiss-params", "efSearch=3", "--faiss-params", "efSearch=5"],
                        "--faiss-params efSearch=3 and --faiss-params efSearch=5")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert capsys.readouterr().err.strip().endswith(f"error: {said} set the same thing: "
                                                        "give it once")


def test_an_encoder_option_given_twice_is_refused() -> None:
    from pyserini_moe.cli.args import parse_options
    from pyserini_moe.errors import UserError

    assert parse_options(["inference=all", "inference= all"]) == {"inference": "all"}
    with pytest.raises(UserError, match="^--encoder-option inference is given twice \\(all and "
                                        "top1\\): give it once$"):
        parse_options(["inference=all", "inference=top1"])


def test_the_library_fusion_refuses_a_normalisation_for_rrf() -> None:
    """H8-22 through the library: ranx's borda before rrf scrambled the ranking."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.fusion import fuse

    runs = [{"q": {"a": 3.0, "b": 2.0}}, {"q": {"a": 1.0, "c": 0.5}}]
    assert next(iter(fuse(runs, "rrf")["q"])) == "a"
    with pytest.raises(UserError, match="^rrf fuses ranks, not scores: pass norm=None, not "
                                        "'borda'$"):
        fuse(runs, "rrf", norm="borda")


# H8-70: data.negatives read by nobody when no hard negative is drawn -----------------------

def test_in_batch_only_training_refuses_a_negatives_source_and_mines_nothing(tmp_path) -> None:
    from pyserini_moe.train.config import from_dict
    from pyserini_moe.train.data import NEGATIVES_RUN, load_training_data
    from pyserini_moe.validate import ConfigError

    run = tmp_path / "round1.trec"
    run.write_text("q0 Q0 d1 1 1.0 t\n")
    recipe = {"output_dir": "out", "model": {"type": "siamese"},
              "data": {"collection": "scifact", "num_negatives": 0,
                       "negatives": {"source": "run", "run": str(run)}},
              "training": {"learning_rate": 1.0e-5}}
    with pytest.raises(ConfigError, match="^r.yaml: data.negatives.source: not read when "
                                          "data.num_negatives is 0"):
        from_dict(recipe, "r.yaml")
    recipe["data"]["negatives"] = {"depth": 3}  # H9-60: a depth nobody reads
    with pytest.raises(ConfigError, match="^r.yaml: data.negatives.depth: not read when "):
        from_dict(recipe, "r.yaml")
    del recipe["data"]["negatives"]
    config = from_dict(recipe, "r.yaml").data
    data = load_training_data(config, tmp_path / "work", progress=False)
    assert not (tmp_path / "work" / NEGATIVES_RUN).exists()  # no BM25 run over the queries
    assert data.candidates and all(len(c) == 0 for c in data.candidates.values())


# H8-11: one recipe field set twice on the command line -----------------------------------------

def test_set_of_one_field_to_two_values_is_refused(siamese_recipe) -> None:
    from pyserini_moe.validate import ConfigError

    same = siamese_recipe.with_settings(["training.max_steps=1", "training.max_steps= 1"])
    assert same.training.max_steps == 1
    with pytest.raises(ConfigError, match="^--set training.max_steps is given twice \\(1 and 2\\): "
                                          "give it once$"):
        siamese_recipe.with_settings(["training.max_steps=1", "training.max_steps=2"])



# H9-01: an ONNX export holds what its record says it wrote ---------------------------------------

def test_an_export_holds_only_the_files_it_records(tmp_path) -> None:
    from pyserini_moe.io import refuse_foreign_folder

    export = tmp_path / "export"
    export.mkdir()
    written = ["passage-dense.onnx", "query-dense.onnx", "tokenizer.json", "vocab.txt"]
    for name in written:
        (export / name).write_text("x")
    (export / "pyserini_moe_onnx.json").write_text(json.dumps(
        {"written": [*written, "pyserini_moe_onnx.json"]}))
    refuse_foreign_folder(export, "pyserini_moe_onnx.json")
    for name in ("notes.onnx", "merges.txt"):  # a graph and a BPE file the export never wrote
        (export / name).write_text("the user's")
        with pytest.raises(FileExistsError, match=f"did not write \\(e.g. {name}\\)"):
            refuse_foreign_folder(export, "pyserini_moe_onnx.json")
        (export / name).unlink()
    # an export from before the record (H10-02): its graphs by the names it records
    (export / "pyserini_moe_onnx.json").write_text(json.dumps(
        {"files": {"query/dense": "query-dense.onnx", "passage/dense": "passage-dense.onnx"}}))
    (export / "merges.txt").write_text("x")
    refuse_foreign_folder(export, "pyserini_moe_onnx.json")
    (export / "my-distilled.onnx").write_text("the user's")
    with pytest.raises(FileExistsError, match="did not write \\(e.g. my-distilled.onnx\\)"):
        refuse_foreign_folder(export, "pyserini_moe_onnx.json")


# H9-25, H9-26: settings a search would not honour ------------------------------------------------

def test_encoded_queries_refuse_the_encoders_term_cut() -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="--query-max-terms \\(the encoder's cut\\) do not apply"):
        SearchSettings(retriever="impact", index="ix", encoded_queries="q.jsonl",
                       query_max_terms=5)


@pytest.mark.parametrize("weights", [[0.0, 0.0], [0.0, 0.0, 0.0]])
def test_fusion_weights_all_zero_are_refused(weights) -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="not all 0 \\(every document would score 0\\)"):
        SearchSettings(retriever="fused", index=["a", "b", "c"][:len(weights)], fusion="wsum",
                       fusion_weights=weights)


# H9-43: a training run's folder named as the model -----------------------------------------------

def test_a_training_folder_named_as_a_model_points_at_its_best(ws, tmp_path) -> None:
    import shutil

    from pyserini_moe.modeling.backbone import resolve_backbone
    from pyserini_moe.modeling.base import load_model

    run = tmp_path / "run"
    shutil.copytree(ws["model"], run / "best")
    (run / "recipe.yaml").write_text("model: {type: siamese}\n")
    said = f"(a training run? give its best/: {run / 'best'})"
    with pytest.raises(FileNotFoundError, match=re.escape(said)):
        load_model(run)
    with pytest.raises(ValueError, match=re.escape(said)):
        resolve_backbone(run)


def test_a_cached_export_of_the_other_precision_is_not_reused(tmp_path) -> None:
    """H10-03: an fp32 export written into <model>/onnx/int8 served int8 searches."""
    from pyserini_moe.cli.args import _exported_from

    export = tmp_path / "model" / "onnx" / "int8"
    export.mkdir(parents=True)
    (export / "pyserini_moe_onnx.json").write_text(json.dumps({"int8": False}))
    assert not _exported_from(export, str(tmp_path / "model"), {}, int8=True)


@pytest.mark.parametrize("method", ["wsum", "linear"])
def test_weights_that_overflow_the_fused_scores_are_refused(method) -> None:
    """H10-27/28: weights of 1e308 gave every document the score inf, ranked by docid."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.fusion import fuse

    runs = [{"q": {"a": 3.0, "b": 2.0}}, {"q": {"a": 1.0, "c": 0.5}}]
    assert fuse(runs, method, params={"weights": [1.0, 2.0]})["q"]
    with pytest.raises(UserError, match=f"^{method}: the fused scores of query 'q' are not "
                                        "finite"):
        fuse(runs, method, params={"weights": [1e308, 1e308]})
