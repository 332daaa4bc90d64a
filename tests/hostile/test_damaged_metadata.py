"""Hostile input: damaged metadata and checkpoints are one message naming the file (no JSON or
pickle traceback, no suggestion to load untrusted pickles)."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.index.meta import META_FILE, read_meta
from pyserini_moe.modeling import SiameseBiEncoder, load_model


def test_a_damaged_index_metadata_file(tmp_path) -> None:
    (tmp_path / META_FILE).write_text('{"kind": "dense", ')
    with pytest.raises(ValueError, match=rf"{META_FILE}: the index metadata is damaged"):
        read_meta(tmp_path)


def test_a_damaged_model_metadata_file(tiny_bert, tmp_path) -> None:
    torch.manual_seed(0)
    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    meta = next(p for p in folder.iterdir() if p.name == "pyserini_moe.json")
    meta.write_text("{not json")
    with pytest.raises(ValueError, match="the model metadata is damaged"):
        load_model(folder, device="cpu")


def _trainer(toy_data, tiny_bert, recipe):
    """A two-step Siamese training on the toy data, the same each time it is made."""
    from pyserini_moe.train.trainer import Trainer

    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    return Trainer(model, recipe, toy_data(), progress=False)


def test_a_damaged_training_checkpoint_says_start_again(toy_data, tiny_bert, tmp_path,
                                                        siamese_recipe) -> None:
    from pyserini_moe.train.trainer import CHECKPOINT_DIR, STATE_FILE

    _trainer(toy_data, tiny_bert, siamese_recipe).train()
    state = tmp_path / "run" / CHECKPOINT_DIR / STATE_FILE
    state.write_bytes(state.read_bytes()[:200])
    with pytest.raises(ValueError, match="training checkpoint is damaged.*start again with "
                                         "--overwrite") as err:
        _trainer(toy_data, tiny_bert, siamese_recipe).train(resume=True)
    assert "weights_only=False" not in str(err.value)


def test_a_checkpoint_replaced_by_a_pickle_holding_code_is_not_loaded(toy_data, tiny_bert,
                                                                     tmp_path, siamese_recipe):
    """Issue 39: a state.pt holding code was called damaged with torch's text (it never ran)."""
    import os

    from pyserini_moe.train.trainer import CHECKPOINT_DIR, STATE_FILE

    class Code:
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "ran"),)

    _trainer(toy_data, tiny_bert, siamese_recipe).train()
    state = tmp_path / "run" / CHECKPOINT_DIR / STATE_FILE
    torch.save({"model": Code()}, state)
    with pytest.raises(ValueError) as err:
        _trainer(toy_data, tiny_bert, siamese_recipe).train(resume=True)
    assert str(err.value) == (f"{state}: not loaded: it holds code or objects a safe load "
                              "refuses; start again with --overwrite")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("damage", ["state", "progress", "recipe"])
def test_a_refused_resume_changes_nothing_in_the_run_folder(toy_data, tiny_bert, tmp_path,
                                                            siamese_recipe, damage) -> None:
    """Damaged state.pt or progress.json, or a recipe changed since the checkpoint: the same
    advice for both damaged files, and recipe.yaml, the dev split and the models stay as the
    checkpointed run left them (they were rewritten before the refusal)."""
    import dataclasses

    from pyserini_moe.train.trainer import CHECKPOINT_DIR, PROGRESS_FILE, STATE_FILE, Trainer

    def trainer(config) -> Trainer:
        torch.manual_seed(0)
        model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
        return Trainer(model, config, toy_data(), progress=False)

    trainer(siamese_recipe).train()
    run = tmp_path / "run"
    config = siamese_recipe
    if damage == "state":
        (run / CHECKPOINT_DIR / STATE_FILE).write_bytes(b"\0" * 200)
    elif damage == "progress":
        (run / CHECKPOINT_DIR / PROGRESS_FILE).write_text('{"step": ')
    else:
        config = dataclasses.replace(config, training=dataclasses.replace(
            config.training, temperature=0.5))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    message = "recipe changed" if damage == "recipe" else "damaged.*start again with --overwrite"
    with pytest.raises(ValueError, match=message):
        trainer(config).train(resume=True)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
