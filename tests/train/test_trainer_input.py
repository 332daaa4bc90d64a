"""The trainer (:mod:`pyserini_moe.train.trainer`) with damaged checkpoints, a diverging loss
and output folders that hold an earlier run, an index or a user's files: it refuses in one
message and never loses the earlier run."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.modeling.folder import load_model
from pyserini_moe.train.trainer import Trainer
from tests.helpers import dense_copy, folder_files, trainer_into


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
    """A state.pt holding code was called damaged with torch's text (it never ran)."""
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


def _diverging_trainer(config, toy_data, tiny_bert, nan_when):
    """A trainer whose model's loss hook returns NaN when ``nan_when(training, call)`` holds
    (``call``: 1-based count of the loss computations of that mode)."""
    from pyserini_moe.train.trainer import Trainer  # noqa: PLC0415

    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    loss_of, calls = model.compute_loss, {True: 0, False: 0}

    def compute_loss(*args, **kwargs) -> torch.Tensor:
        loss = loss_of(*args, **kwargs)
        calls[model.training] += 1
        return loss * float("nan") if nan_when(model.training, calls[model.training]) else loss

    model.compute_loss = compute_loss
    return Trainer(model, config, toy_data(), progress=False)


def _strict_log(out: Path) -> list[dict]:
    """The training log, refusing NaN / Infinity (not JSON, though Python's json writes them)."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"train_log.jsonl holds {constant}")

    return [json.loads(line, parse_constant=refuse)
            for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_a_nan_loss_stops_training_at_its_step(toy_data, tiny_bert, siamese_recipe) -> None:
    config = siamese_recipe.with_settings(["training.eval_every=1", "training.max_steps=3"])
    trainer = _diverging_trainer(config, toy_data, tiny_bert, lambda training, call: training and call == 2)
    with pytest.raises(UserError, match=r"^training diverged at step 2: the loss is nan; "):
        trainer.train()
    out = config.output_dir
    assert [entry["step"] for entry in _strict_log(out)] == [1]
    best = load_model(out / "best", device="cpu")  # step 1's model, the last sound one
    assert all(torch.isfinite(p).all() for p in best.parameters())
    assert not (out / "last").exists() and not (out / "train_summary.json").exists()


def test_a_nan_validation_loss_saves_no_best_model(toy_data, tiny_bert, siamese_recipe) -> None:
    config = siamese_recipe.with_settings(["training.eval_every=1"])
    trainer = _diverging_trainer(config, toy_data, tiny_bert, lambda training, call: not training)
    with pytest.raises(UserError, match="^training diverged at step 1: the validation loss is "
                                        "nan; "):
        trainer.train()
    out = config.output_dir
    assert not (out / "train_log.jsonl").exists()  # step 1's entry would hold the NaN
    assert not (out / "best").exists() and not (out / "checkpoint").exists()


@pytest.mark.parametrize("name, keep", [("snapshots", True), ("best", False)])
def test_a_file_where_the_training_writes_a_folder_is_refused_first(toy_data, tiny_bert,
                                                                     siamese_recipe, name,
                                                                     keep) -> None:

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


def _dead_pid() -> int:
    """The id of a process that has ended (what a SIGKILLed training leaves in its names)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)


# --- the earlier run a killed --overwrite left in .<output>.old-PID -------------------------------


def _trainer_of(recipe, toy_data, tiny_bert: Path):
    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    torch.manual_seed(0)
    return Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                   progress=False)


def _left_aside(out: Path) -> Path:
    """What ``train --overwrite`` SIGKILLed before its first checkpoint leaves: the output folder
    empty, the earlier run in the hidden ``.<output>.old-<its pid>``."""
    aside = out.parent / f".{out.name}.old-{_dead_pid()}"
    (aside / "checkpoint").mkdir(parents=True)
    (aside / "checkpoint" / "state.pt").write_bytes(b"the earlier run")
    out.mkdir()
    return aside


def _said(caplog, out: Path, aside: Path) -> None:
    lines = [r.getMessage() for r in caplog.records if str(aside) in r.getMessage()]
    assert lines == [f"warning: {aside} holds an earlier run of {out}, set aside by an --overwrite that "
                     f"was killed: move its contents back into {out} to keep it, or delete it"]
    assert (aside / "checkpoint" / "state.pt").read_bytes() == b"the earlier run"  # not deleted


def test_resume_names_the_earlier_run_a_killed_overwrite_set_aside(siamese_recipe, toy_data,
                                                                   tiny_bert, caplog) -> None:
    out = siamese_recipe.output_dir
    aside = _left_aside(out)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"), \
            pytest.raises(FileNotFoundError, match="nothing to resume"):
        _trainer_of(siamese_recipe, toy_data, tiny_bert).train(resume=True)
    _said(caplog, out, aside)


def test_a_new_overwrite_names_the_earlier_run_and_keeps_it(siamese_recipe, toy_data, tiny_bert,
                                                            caplog) -> None:
    out = siamese_recipe.output_dir
    aside = _left_aside(out)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        _trainer_of(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    _said(caplog, out, aside)
    assert (out / "best").is_dir()


def _aside(out: Path, pid: int) -> Path:
    aside = out.parent / f".{out.name}.old-{pid}"
    (aside / "checkpoint").mkdir(parents=True)
    (aside / "checkpoint" / "state.pt").write_bytes(b"the earlier run")
    out.mkdir(exist_ok=True)
    return aside


def _notes(caplog, aside: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if str(aside) in r.getMessage()]


def _resume(recipe, toy_data, tiny_bert, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"), \
            pytest.raises(FileNotFoundError, match="nothing to resume"):
        _trainer_of(recipe, toy_data, tiny_bert).train(resume=True)


def test_a_set_aside_run_whose_pid_another_live_process_has_is_noted(siamese_recipe, toy_data,
                                                                     tiny_bert, caplog) -> None:
    out = siamese_recipe.output_dir
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        aside = _aside(out, other.pid)  # the killed training's id, now an unrelated process's
        _resume(siamese_recipe, toy_data, tiny_bert, caplog)
    finally:
        other.kill()
        other.wait()
    assert _notes(caplog, aside) == [
        f"warning: {aside} holds an earlier run of {out}, set aside by an --overwrite that was killed: "
        f"move its contents back into {out} to keep it, or delete it"]


def test_a_run_set_aside_by_a_running_training_is_not_noted(siamese_recipe, toy_data,
                                                            tiny_bert, caplog) -> None:
    """The training that set it aside holds its lock while it runs (here a stand-in that takes
    the same lock): no note while it may still put the run back."""
    out = siamese_recipe.output_dir
    aside = _aside(out, 4_000_000)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True); time.sleep(60)", str(aside)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _resume(siamese_recipe, toy_data, tiny_bert, caplog)
        assert _notes(caplog, aside) == []
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    caplog.clear()
    _resume(siamese_recipe, toy_data, tiny_bert, caplog)  # its holder is gone: noted
    assert len(_notes(caplog, aside)) == 1


# --- train: --max-steps beyond the epochs ---------------------------------------------------------


@pytest.mark.parametrize(("max_steps", "warned"), [(50, True), (2, False)])
def test_max_steps_the_epochs_cannot_hold_is_said(siamese_recipe, toy_data, tiny_bert, caplog,
                                                  max_steps, warned) -> None:
    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    recipe = siamese_recipe.with_settings([f"training.max_steps={max_steps}"])
    torch.manual_seed(0)
    trainer = Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe,
                      toy_data(), progress=False)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        steps = trainer.train()["metrics"]["steps"]
    said = [r.getMessage() for r in caplog.records if "epoch(s) hold" in r.getMessage()]
    assert said == ([f"warning: max_steps {max_steps} is more than the 1 epoch(s) hold: training "
                     f"stops after {steps} steps (raise --epochs to train longer)"]
                    if warned else [])
    assert steps == (steps if warned else max_steps) and (steps < max_steps) == warned


# --- training folders -----------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_training_into_an_index_is_refused(ws, siamese_recipe, toy_data, tiny_bert, tmp_path,
                                           overwrite) -> None:
    folder = dense_copy(ws, tmp_path / "ix")
    before = folder_files(folder)
    with pytest.raises(FileExistsError, match="is an index, not a training run"):
        trainer_into(siamese_recipe, toy_data, tiny_bert, folder).train(overwrite=overwrite)
    assert folder_files(folder) == before


def test_a_finished_training_without_its_checkpoint_is_not_replaced(siamese_recipe, toy_data,
                                                                    tiny_bert) -> None:
    trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    shutil.rmtree(out / "checkpoint")  # to save space
    before = folder_files(out)
    with pytest.raises(FileExistsError, match="already holds a training run .*pass --overwrite"):
        trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    assert folder_files(out) == before


def test_a_users_recipe_and_logs_are_not_replaced(siamese_recipe, toy_data, tiny_bert) -> None:
    out = siamese_recipe.output_dir
    out.mkdir()
    for name in ("recipe.yaml", "train_log.jsonl", "negatives.trec"):
        (out / name).write_text("mine")
    with pytest.raises(FileExistsError, match="already holds a training run"):
        trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    assert folder_files(out) == {name: b"mine" for name in
                                 ("negatives.trec", "recipe.yaml", "train_log.jsonl")}


@pytest.mark.parametrize("mine", ["notes.txt", "best/notes.txt", "checkpoint/notes.txt"])
def test_training_overwrite_refuses_a_run_holding_a_users_files(siamese_recipe, toy_data,
                                                                tiny_bert, mine) -> None:
    trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    out = siamese_recipe.output_dir
    (out / mine).write_text("mine")
    before = folder_files(out)
    with pytest.raises(FileExistsError, match=rf"did not write \(e\.g\. {mine}\)"):
        trainer_into(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    assert folder_files(out) == before  # the checkpoint/ --overwrite deletes is still there


def test_a_run_beside_init_only_trains_and_is_replaced(siamese_recipe, toy_data,
                                                       tiny_bert) -> None:
    """--init-only's init/ is no earlier training, and stays beside the run replacing it."""
    out = siamese_recipe.output_dir
    init = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(out / "init")
    kept = folder_files(init)
    trainer_into(siamese_recipe, toy_data, tiny_bert).train()
    assert trainer_into(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    assert folder_files(init) == kept and (out / "best").is_dir()


# --- an interrupted train --overwrite left a mix of two runs, the old checkpoint deleted ----------


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _trainer_with(recipe, toy_data, tiny_bert: Path, **training):

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
    _trainer_with(siamese_recipe, toy_data, tiny_bert).train()
    before = _tree(out)
    assert "checkpoint/state.pt" in before and "best/pyserini_moe.json" in before
    _interrupt_at(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        _trainer_with(siamese_recipe, toy_data, tiny_bert, max_steps=3).train(overwrite=True)
    assert _tree(out) == before  # the earlier run, whole: resumable, its recipe and logs
    assert not list(out.parent.glob(f".{out.name}.old-*"))


def test_a_replacement_with_a_checkpoint_is_the_run_kept(siamese_recipe, toy_data, tiny_bert,
                                                         monkeypatch) -> None:
    out = siamese_recipe.output_dir
    _trainer_with(siamese_recipe, toy_data, tiny_bert).train()
    _interrupt_at(monkeypatch, 3)  # after the new run's first checkpoint (step 1)
    with pytest.raises(KeyboardInterrupt):
        _trainer_with(siamese_recipe, toy_data, tiny_bert, max_steps=4, eval_every=1).train(
            overwrite=True)
    progress = json.loads((out / "checkpoint" / "progress.json").read_text())
    assert progress["step"] == 2  # the new run's, which --resume continues
    assert "max_steps: 4" in (out / "recipe.yaml").read_text()
    assert not list(out.parent.glob(f".{out.name}.old-*"))


@pytest.mark.parametrize("key", ["query_max_length", "passage_max_length"])
def test_a_length_beyond_the_backbones_positions_is_refused_at_the_start(
        key, siamese_recipe, toy_data, tiny_bert) -> None:
    """The tiny BERT has BERT's 512 positions: a longer passage length failed at the first long
    batch, a longer query length was saved with the model and refused at every search."""
    config = siamese_recipe.with_settings([f"data.{key}=513"])
    with pytest.raises(UserError, match=rf"^data.{key} 513 is above the 512 token positions of "
                                        "the siamese model's backbone: set it to 512 or less$"):
        _trainer(toy_data, tiny_bert, config)
    assert not config.output_dir.exists()
