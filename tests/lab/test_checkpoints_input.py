"""Evaluating a training's checkpoints (:mod:`pyserini_moe.lab.checkpoints`): the evaluation
cache, and which training folders are seeds of one condition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.lab import checkpoints
from pyserini_moe.lab.checkpoints import training_folders
from tests.helpers import seed_training, seed_training_with_negatives

# --- analyze checkpoints' cache -------------------------------------------------------------------


def _fake_training(root: Path) -> Path:
    (root / "snapshots" / "step-2").mkdir(parents=True)
    (root / "snapshots" / "step-2" / "model.bin").write_bytes(b"weights")
    (root / "train_log.jsonl").write_text(json.dumps({"step": 2, "val_loss": 0.5}) + "\n")
    (root / "dev_topics.tsv").write_text("q0\twhat\n")
    (root / "dev_qrels.txt").write_text("q0 0 d0 1\n")
    return root


def _counting() -> tuple[list[int], object]:
    calls: list[int] = []

    def searcher(*_args: object) -> dict:
        calls.append(1)
        return {"dev": {"ndcg@10": float(len(calls))}}
    return calls, searcher


def test_checkpoints_cache_is_keyed_by_the_qrels_contents(tiny_corpus, tmp_path) -> None:
    folder = _fake_training(tmp_path / "t")
    calls, searcher = _counting()
    evaluate = lambda: checkpoints.evaluate_training(  # noqa: E731
        folder, str(tiny_corpus), [], ["ndcg@10"], searcher=searcher)
    evaluate()
    evaluate()
    assert len(calls) == 1  # cached
    (folder / "dev_qrels.txt").write_text("q0 0 d1 1\n")  # same name, other judgments
    assert evaluate()[0].metrics["dev"]["ndcg@10"] == 2.0 and len(calls) == 2
    (folder / "snapshots" / "step-2" / "model.bin").write_bytes(b"other weights")
    evaluate()
    assert len(calls) == 3


@pytest.mark.parametrize("damage", ["", '{"settings": {"corpus": "tc", "te'])
def test_checkpoints_rewrites_a_damaged_cache(tiny_corpus, tmp_path, capsys, damage) -> None:
    folder = _fake_training(tmp_path / "t")
    cache = folder / "snapshots" / checkpoints.CACHE_FILE
    cache.write_text(damage)
    calls, searcher = _counting()
    checkpoints.evaluate_training(folder, str(tiny_corpus), [], ["ndcg@10"], searcher=searcher)
    assert len(calls) == 1 and "not a readable evaluation cache" in capsys.readouterr().err
    assert json.loads(cache.read_text())["steps"]["2"]["metrics"] == {"dev": {"ndcg@10": 1.0}}


# --- analyze checkpoints --------------------------------------------------------------------------


def test_one_training_folder_under_two_labels_is_refused(tmp_path) -> None:
    """One training reported as two seeds, sd 0."""
    folder = tmp_path / "snap"
    folder.mkdir()
    with pytest.raises(UserError, match=f"^--train-dir: {folder} and {folder} are one training "
                                        "folder"):
        training_folders([f"42={folder}", f"43={folder}"])
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(UserError, match="are one training folder"):
        training_folders([f"42={folder}", f"2={tmp_path / 'link'}"])


# --- analyze checkpoints, two recipes as two seeds ------------------------------------------------


def test_checkpoints_takes_seeds_of_one_recipe(tmp_path) -> None:
    from pyserini_moe.lab.checkpoints import check_one_condition, training_folders

    folders = training_folders([seed_training(tmp_path / "s1", 1, 0.05),
                                seed_training(tmp_path / "s2", 2, 0.05)])
    check_one_condition(folders)  # seeds, data seeds and output folders differ: one condition


# --- analyze checkpoints, negatives of two conditions as two seeds --------------------------------


def test_checkpoints_takes_each_seeds_own_round_one_negatives(tmp_path) -> None:
    from pyserini_moe.lab.checkpoints import check_one_condition, training_folders

    folders = training_folders([
        seed_training_with_negatives(tmp_path / "s42", 42, run="work/run1/detr-s42.train.trec",
                                     model="work/detr-s42/last"),
        seed_training_with_negatives(tmp_path / "s43", 43, run="work/run1/detr-s43.train.trec",
                                     model="work/detr-s43/last")])
    check_one_condition(folders)  # each seed's own round 1: one condition
