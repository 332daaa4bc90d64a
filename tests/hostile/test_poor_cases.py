"""The poor cases left from the hostile passes (work/note.md, issue 39): each was accepted or
dropped without a word; each is now one error line or one notice."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.modeling.base import Side, is_blank


@pytest.mark.parametrize("query", ["\u200b", " \u200b\ufeff ", "\u2060\t", ""])
def test_an_invisible_query_is_an_empty_query(tiny_bert: Path, query: str) -> None:  # S13
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    assert is_blank(query)
    with pytest.raises(UserError, match="cannot encode an empty query"):
        model.encode(["fine", query], Side.QUERY, 16)


def test_a_query_with_one_visible_character_is_not_blank() -> None:
    assert not is_blank("\u200bq") and not is_blank("é")


def test_qrels_of_another_collection_are_noticed(tmp_path: Path, capsys) -> None:  # E00
    from pyserini_moe.cli import run_main
    from pyserini_moe.eval import __main__ as eval_cli

    (tmp_path / "run.trec").write_text("1 Q0 d7 1 3.0 t\n2 Q0 d8 1 2.0 t\n")
    (tmp_path / "other.txt").write_text("1 0 x1 1\n2 0 x2 1\n")  # same query ids, other docs
    (tmp_path / "own.txt").write_text("1 0 d7 1\n2 0 x2 1\n")
    assert run_main(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                    str(tmp_path / "other.txt")]) == 0
    assert "none of its 2 documents for the judged queries is judged in these qrels: are they " \
           "another collection's?" in capsys.readouterr().err
    assert run_main(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                    str(tmp_path / "own.txt")]) == 0
    assert "another collection" not in capsys.readouterr().err


def test_a_training_refused_for_its_data_leaves_no_folder(tmp_path: Path, capsys) -> None:  # T02
    from pyserini_moe.cli import run_main
    from pyserini_moe.train import __main__ as train_cli

    recipe = Path(__file__).resolve().parents[2] / "encoders" / "taser-detr-protocol-minilm.yaml"
    out = tmp_path / "model"
    assert run_main(train_cli.main, ["--config", str(recipe), "--output-dir", str(out), "--set",
                                     "data.collection=nosuch", "--quiet"]) == 2
    assert "unknown collection 'nosuch'" in capsys.readouterr().err
    assert not out.exists()


def test_a_conversion_refused_for_its_input_leaves_no_folder(tmp_path: Path, capsys) -> None:
    """D04 / D05: a failed write removes the folders made for its output (and only those)."""
    from pyserini_moe import dpr
    from pyserini_moe.cli import run_main

    (tmp_path / "bad.tsv").write_text("id\ttext\ttitle\nx\n")
    (tmp_path / "bad.csv").write_text("")
    out = tmp_path / "new" / "deeper"
    assert run_main(dpr.main, ["wiki", "--input", str(tmp_path / "bad.tsv"), "--output",
                               str(out / "corpus.jsonl.gz"), "--quiet"]) == 2
    assert not (tmp_path / "new").exists()
    assert run_main(dpr.main, ["qa", "--input", str(tmp_path / "bad.csv"), "--output",
                               str(out / "topics.jsonl")]) == 2
    assert not (tmp_path / "new").exists()
    capsys.readouterr()


def test_a_failed_write_keeps_folders_that_were_there(tmp_path: Path) -> None:
    from pyserini_moe.io import atomic_path

    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "a" / "out.txt"):
        raise RuntimeError
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "a").exists()
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "kept" / "b" / "out.txt") as tmp:
        (tmp.parent / "other.txt").write_text("written beside it")  # not the writer's: kept
        raise RuntimeError
    assert (tmp_path / "kept" / "b" / "other.txt").is_file()


@pytest.mark.parametrize("name, keep", [("snapshots", True), ("best", False)])
def test_a_file_where_the_training_writes_a_folder_is_refused_first(toy_data, tiny_bert,
                                                                     siamese_recipe, name,
                                                                     keep) -> None:  # T08
    import dataclasses

    import torch

    from pyserini_moe.train.trainer import LOG_FILE, Trainer

    recipe = dataclasses.replace(siamese_recipe, training=dataclasses.replace(
        siamese_recipe.training, keep_snapshots=keep))
    recipe.output_dir.mkdir(parents=True)
    (recipe.output_dir / name).write_text("a file in the way")
    torch.manual_seed(0)
    trainer = Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                      progress=False)
    with pytest.raises(UserError, match=f"{name} is a file where the training writes a folder"):
        trainer.train()
    assert not (recipe.output_dir / LOG_FILE).exists()  # refused before the first step
