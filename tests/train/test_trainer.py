"""The training loop on a tiny random BERT: learning, best checkpoint, exact resume, hooks, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pyserini_moe.cli import run_main
from pyserini_moe.modeling.base import Encoded, Side
from pyserini_moe.modeling.biencoder import SiameseBiEncoder
from pyserini_moe.modeling.folder import load_model
from pyserini_moe.train import __main__ as train_cli
from pyserini_moe.train.collator import Collator
from pyserini_moe.train.config import from_dict
from pyserini_moe.train.loop import linear_schedule, set_seed
from pyserini_moe.train.trainer import Trainer, build_model, parameter_groups


def recipe(toy: Path, out: Path, **training: object) -> dict:
    return {
        "output_dir": str(out),
        "model": {"type": "siamese", "backbone": "TINY", "args": {"pooling": "mean"}},
        "data": {"collection": str(toy), "validation_fraction": 0.25, "seed": 3,
                 "num_negatives": 1, "query_max_length": 8, "passage_max_length": 8,
                 "negatives": {"source": "run", "run": str(toy / "negatives.trec")}},
        "training": {"learning_rate": 3e-3, "batch_size": 6, "epochs": 4, "temperature": 0.1,
                     "warmup_ratio": 0.1, "seed": 11, "device": "cpu", **training},
    }


def make(toy: Path, out: Path, tiny_bert: Path, **training: object) -> Trainer:
    raw = recipe(toy, out, **training)
    raw["model"]["backbone"] = str(tiny_bert)
    config = from_dict(raw, "toy.yaml")
    set_seed(config.training.seed)
    return Trainer(build_model(config.model, "cpu"), config, progress=False)


def read_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_training_learns_and_keeps_the_best_checkpoint(toy, tiny_bert, tmp_path):
    out = tmp_path / "run"
    trainer = make(toy, out, tiny_bert, eval_every=1)
    summary = trainer.train()
    log = read_log(out)
    losses = [e["loss"] for e in log]
    assert len(log) == summary["metrics"]["steps"] == 12  # 18 training pairs / 6, 4 epochs
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3
    assert [e["step"] for e in log] == list(range(1, 13)) and all(e["lr"] > 0 for e in log)

    val = {e["step"]: e["val_loss"] for e in log}
    metrics = summary["metrics"]
    assert metrics["best_val_loss"] == min(val.values())
    assert metrics["best_step"] == min(val, key=val.get) and metrics["val_loss"] == val[12]
    assert metrics["train_pairs"] == 18 and metrics["validation_queries"] == 6
    best = load_model(out / "best", device="cpu")
    assert Trainer(best, trainer.config, trainer.data, progress=False).evaluate() == pytest.approx(
        metrics["best_val_loss"], abs=1e-5)
    # the recipe's query length travels with every checkpoint (indexes record it for search)
    assert best.query_max_length == trainer.config.data.query_max_length
    last = load_model(out / "last", device="cpu")
    assert last.query_max_length == trainer.config.data.query_max_length
    assert Trainer(last, trainer.config, trainer.data, progress=False).evaluate() == pytest.approx(
        val[12], abs=1e-5)

    for name in ("recipe.yaml", "train_summary.json", "negatives.trec", "checkpoint/state.pt"):
        assert (out / name).is_file()
    saved = json.loads((out / "train_summary.json").read_text())
    assert saved["recipe"]["training"]["eval_every"] == 1 and saved["recipe_file"] == "toy.yaml"


def test_the_best_checkpoint_is_not_simply_the_last(toy, tiny_bert, tmp_path):
    """A learning rate too high to settle: validation loss goes back up, best/ stays behind."""
    out = tmp_path / "run"
    summary = make(toy, out, tiny_bert, learning_rate=0.05, warmup_ratio=0.0, epochs=2,
                   eval_every=1, max_grad_norm=None).train()
    val = [e["val_loss"] for e in read_log(out)]
    metrics = summary["metrics"]
    assert metrics["best_step"] == 1 + val.index(min(val)) < len(val)  # seeded: deterministic
    best = load_model(out / "best", device="cpu").state_dict()
    last = load_model(out / "last", device="cpu").state_dict()
    assert any(not torch.equal(best[k], last[k]) for k in best)


def test_resume_after_interruption_equals_an_uninterrupted_run(toy, tiny_bert, tmp_path,
                                                              monkeypatch):
    settings = {"epochs": 2, "eval_every": 2, "grad_accumulation": 2, "batch_size": 3}
    whole = make(toy, tmp_path / "whole", tiny_bert, **settings)
    whole.train()

    interrupted = make(toy, tmp_path / "cut", tiny_bert, **settings)
    original = Trainer._train_step
    calls = []

    def crash_on_fifth(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_train_step", crash_on_fifth)
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    monkeypatch.setattr(Trainer, "_train_step", original)
    assert [e["step"] for e in read_log(tmp_path / "cut")] == [1, 2, 3, 4]

    set_seed(999)  # the resumed process starts from a different random state
    resumed = make(toy, tmp_path / "cut", tiny_bert, **settings)
    summary = resumed.train(resume=True)
    # the summary's train loss covers the steps before the resume too, as the whole run's does
    assert summary["metrics"]["train_loss"] == pytest.approx(
        json.loads((tmp_path / "whole" / "train_summary.json").read_text())["metrics"]["train_loss"])

    a = load_model(tmp_path / "whole" / "last", device="cpu").state_dict()
    b = load_model(tmp_path / "cut" / "last", device="cpu").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    drop = ("elapsed",)
    strip = [{k: v for k, v in e.items() if k not in drop} for e in read_log(tmp_path / "whole")]
    assert strip == [{k: v for k, v in e.items() if k not in drop}
                     for e in read_log(tmp_path / "cut")]


def test_resume_and_restart_guards(toy, tiny_bert, tmp_path, caplog):
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        make(toy, out, tiny_bert, max_steps=2).train(resume=True)
    make(toy, out, tiny_bert, max_steps=2).train()
    with pytest.raises(FileExistsError, match="--resume"):
        make(toy, out, tiny_bert, max_steps=2).train()
    with pytest.raises(ValueError, match=r"recipe changed.*training\.learning_rate"):
        make(toy, out, tiny_bert, max_steps=3, learning_rate=1e-4).train(resume=True)
    before = load_model(out / "last", device="cpu").state_dict()
    summary = make(toy, out, tiny_bert, max_steps=3).train(resume=True)  # longer: allowed,
    assert summary["metrics"]["steps"] == 3
    after = load_model(out / "last", device="cpu").state_dict()
    # the resumed step learns at the rebuilt schedule's rate, not the finished run's last (0.0)
    assert read_log(out)[-1]["lr"] > 0 and not all(torch.equal(before[k], after[k]) for k in before)
    assert "training.max_steps 2 -> 3: the learning-rate schedule is rebuilt" in caplog.text  # said
    # shorter than the checkpoint: refused before the records are rewritten
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"checkpoint is at step 3, past the 2 steps of the new "
                                         r"length"):
        make(toy, out, tiny_bert, max_steps=2).train(resume=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert make(toy, out, tiny_bert, max_steps=1).train(overwrite=True)["metrics"]["steps"] == 1


def test_epochs_past_max_steps_are_never_counted(toy, tiny_bert, tmp_path):
    """``max_steps`` caps the run: the epochs after it are not walked (10**5 of them took
    minutes before the first step), and a larger count is a typo."""
    trainer = make(toy, tmp_path / "run", tiny_bert, max_steps=2, epochs=100_000)
    assert len(trainer._epoch_steps()) == 1
    assert trainer.train()["metrics"]["steps"] == 2
    with pytest.raises(ValueError, match=r"training\.epochs: must be <= 100,000"):
        make(toy, tmp_path / "more", tiny_bert, max_steps=2, epochs=10**20)


def test_parameter_groups_by_prefix_without_decay_on_biases_and_norms(toy, tiny_bert, tmp_path):
    trainer = make(toy, tmp_path, tiny_bert, weight_decay=0.1,
                   group_learning_rates={"backbone.encoder.layer.1.": 1e-1})
    groups = parameter_groups(trainer.model, trainer.cfg)
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"<default>", "<default> (no decay)", "backbone.encoder.layer.1.",
                            "backbone.encoder.layer.1. (no decay)"}
    assert by_name["backbone.encoder.layer.1."]["lr"] == 1e-1
    assert by_name["<default>"]["lr"] == 3e-3 and by_name["<default>"]["weight_decay"] == 0.1
    assert by_name["<default> (no decay)"]["weight_decay"] == 0.0
    assert sum(len(g["params"]) for g in groups) == len(list(trainer.model.parameters()))
    trainer = make(toy, tmp_path, tiny_bert, group_learning_rates={"experts.": 1e-4})
    with pytest.raises(ValueError, match=r"'experts\.'\] match no parameter"):
        parameter_groups(trainer.model, trainer.cfg)


def test_learned_routers_train_with_their_regulariser_and_a_glob_learning_rate(toy, tiny_bert,
                                                                              tmp_path):
    raw = recipe(toy, tmp_path / "taser", max_steps=2, group_learning_rates={"*.route.*": 1e-2})
    raw["model"] = {"type": "taser", "backbone": str(tiny_bert),
                    "args": {"router": "seq", "every": 1}}
    config = from_dict(raw, "taser.yaml")
    set_seed(config.training.seed)
    trainer = Trainer(build_model(config.model, "cpu"), config, progress=False)
    routed = {id(p) for g in parameter_groups(trainer.model, trainer.cfg)
              if g["name"].startswith("*.route.*") for p in g["params"]}
    routers = {id(p) for n, p in trainer.model.named_parameters() if ".route." in n}
    assert routed == routers and len(routers) == 2  # weight and bias of the one router
    trainer.train()
    log = read_log(tmp_path / "taser")
    assert len(log) == 2 and all(0 <= e["regularization"] <= 0.01 * 0.7 for e in log)


def test_taser_shared_trains_exactly_like_the_siamese_model(toy, tiny_bert, tmp_path, texts):
    """TASER-shared is the Siamese architecture with its FFNs moved into one-expert blocks: the
    same recipe and seed must give the same model, step for step."""
    encoded = {}
    for name, model in (("siamese", {"type": "siamese", "args": {"pooling": "mean"}}),
                        ("shared", {"type": "taser", "args": {"router": "shared", "every": 0,
                                                              "pooling": "mean",
                                                              "normalize": True}})):
        raw = recipe(toy, tmp_path / name, max_steps=3)
        raw["model"] = {**model, "backbone": str(tiny_bert)}
        config = from_dict(raw, f"{name}.yaml")
        set_seed(config.training.seed)
        trainer = Trainer(build_model(config.model, "cpu"), config, progress=False)
        start = trainer.model.eval().encode(texts, Side.PASSAGE).dense
        trainer.train()
        encoded[name] = trainer.model.eval().encode(texts, Side.PASSAGE).dense
        assert not torch.allclose(encoded[name], start, atol=1e-3)  # training moved it
    torch.testing.assert_close(encoded["shared"], encoded["siamese"], atol=1e-5, rtol=0)


def test_linear_schedule_warms_up_then_decays_without_zero_steps():
    factor = linear_schedule(10, 2)
    values = [factor(s) for s in range(10)]
    assert values[:3] == [0.5, 1.0, 1.0] and values[-1] == pytest.approx(1 / 8)
    assert all(a >= b for a, b in zip(values[1:], values[2:]))


class HookedModel(SiameseBiEncoder):
    """A dense model that also returns sparse weights and an aux loss and brings its own loss."""

    calls: list

    def forward(self, input_ids, attention_mask, side):
        dense = super().forward(input_ids, attention_mask, side).dense
        return Encoded(dense=dense, sparse=torch.relu(dense), aux_loss=dense.new_tensor(0.5))

    def compute_loss(self, q, p, positive_index, temperature):
        self.calls.append((positive_index.tolist(), temperature))
        return (q.dense @ p.dense.T).diagonal().sum() * 0 + 2.0


def test_loss_adds_flops_and_aux_and_honours_the_compute_loss_hook(toy, tiny_bert, tmp_path):
    trainer = make(toy, tmp_path, tiny_bert, flops_weight={"query": 1.0, "passage": 0.5})
    model = HookedModel(trainer.model.backbone, trainer.model.tokenizer)
    model.calls = []
    trainer = Trainer(model, trainer.config, progress=False)
    examples = trainer._data().epoch_batches(0, 4)[0]
    batch = Collator(model, 8, 8)(examples)
    loss, parts = trainer.loss(batch, flops_scale=0.5)
    q = model(**batch.queries, side=Side.QUERY)
    p = model(**batch.passages, side=Side.PASSAGE)
    fq = q.sparse.mean(0).pow(2).sum().item()
    fp = p.sparse.mean(0).pow(2).sum().item()
    assert model.calls == [([0, 1, 2, 3], 0.1)]
    # each pass's aux_loss reaches the loss through the one regularization channel
    assert parts["rank_loss"] == 2.0 and parts["regularization"] == 1.0  # 0.5 per side
    assert "aux_loss" not in parts
    assert parts["flops_query"] == pytest.approx(fq, rel=1e-4)
    assert loss.item() == pytest.approx(2.0 + 1.0 + 0.5 * (1.0 * fq + 0.5 * fp), rel=1e-4)


def test_cli_help_works():
    result = subprocess.run([sys.executable, "-m", "pyserini_moe.train", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    for flag in ("--config", "--output-dir", "--resume", "--max-steps", "--epochs", "--device"):
        assert flag in result.stdout


def test_cli_bad_config_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("output_dir: out\nmodel: {type: siamese}\ndata: {collection: scifact}\n"
                   "training: {learning_rate: 1.0e-5, batchsize: 4}\n")
    assert run_main(train_cli.main, ["--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "training.batchsize" in err and "\n" not in err
    assert run_main(train_cli.main, ["--config", str(tmp_path / "none.yaml")]) == 2


def recipe_file(toy: Path, tiny_bert: Path, tmp_path: Path) -> Path:
    """The toy recipe on the tiny BERT, as a YAML file for the command line."""
    raw = recipe(toy, tmp_path / "ignored", epochs=1)
    raw["model"]["backbone"] = str(tiny_bert)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_cli_trains_from_a_recipe_file(toy, tiny_bert, tmp_path, capsys):
    path = recipe_file(toy, tiny_bert, tmp_path)
    out = tmp_path / "out"
    assert run_main(train_cli.main, ["--config", str(path), "--output-dir", str(out),
                                     "--max-steps", "2", "--device", "cpu", "--quiet"]) == 0
    assert "trained 2 steps" in capsys.readouterr().err
    assert load_model(out / "best", device="cpu").model_type == "siamese"
    assert json.loads((out / "train_summary.json").read_text())["recipe"]["training"][
        "max_steps"] == 2


def test_cli_init_only_saves_the_untrained_start(toy, tiny_bert, tmp_path, capsys):
    path = recipe_file(toy, tiny_bert, tmp_path)
    out = tmp_path / "out"
    assert run_main(train_cli.main, ["--config", str(path), "--output-dir", str(out),
                                     "--init-only", "--device", "cpu"]) == 0
    assert "untrained model saved" in capsys.readouterr().err
    init = load_model(out / "init", device="cpu")
    assert init.model_type == "siamese"
    assert init.query_max_length == yaml.safe_load(path.read_text())["data"]["query_max_length"]
    assert not (out / "best").exists() and not (out / "train_log.jsonl").exists()


def test_cli_init_only_refuses_an_index_and_keeps_an_earlier_init(toy, tiny_bert, tmp_path,
                                                                   capsys):
    """--init-only saved init/ into any folder (an index) and replaced an earlier init/ (of
    another seed, say) without --overwrite."""
    path = recipe_file(toy, tiny_bert, tmp_path)
    index = tmp_path / "index"
    index.mkdir()
    (index / "pyserini_moe_index.json").write_text("{}")
    argv = ["--config", str(path), "--init-only", "--device", "cpu", "--quiet"]
    assert run_main(train_cli.main, [*argv, "--output-dir", str(index)]) == 2
    assert "is an index, not a training run" in capsys.readouterr().err
    assert sorted(p.name for p in index.iterdir()) == ["pyserini_moe_index.json"]
    out = tmp_path / "out"
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out)]) == 0
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out), "--seed", "7"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {out / 'init'} already exists; pass "
                                                    "--overwrite to replace it")
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out), "--overwrite"]) == 0
    # a training of another model there
    (out / "recipe.yaml").write_text("model: {type: sbmoe}\n")
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out), "--overwrite"]) == 2
    assert "holds a training of another model" in capsys.readouterr().err
    from pyserini_moe.train.config import load_config
    (out / "recipe.yaml").write_text(yaml.safe_dump(load_config(path, out).to_dict()))
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out), "--overwrite"]) == 0
    # the same model, its backbone spelt with a slash and a default argument written out
    recipe = load_config(path, out).to_dict()
    recipe["model"]["backbone"] = str(recipe["model"]["backbone"]) + "/"
    recipe["model"]["args"] = {"pooling": "mean"}
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert run_main(train_cli.main, [*argv, "--output-dir", str(out), "--overwrite"]) == 0, \
        capsys.readouterr().err


def test_held_out_queries_are_written_as_a_dev_split(toy, tiny_bert, tmp_path):
    """dev_topics.tsv / dev_qrels.txt hold exactly the validation queries (for tuning hybrids)."""
    from pyserini_moe.data.topics import load_qrels, load_topics

    path = recipe_file(toy, tiny_bert, tmp_path)
    out = tmp_path / "out"
    assert run_main(train_cli.main, ["--config", str(path), "--output-dir", str(out),
                                     "--max-steps", "1", "--device", "cpu", "--quiet"]) == 0
    topics, qrels = load_topics(str(out / "dev_topics.tsv")), load_qrels(str(out / "dev_qrels.txt"))
    assert topics and set(topics) == set(qrels)


def test_keep_snapshots_saves_the_model_of_every_validation(toy, tiny_bert, tmp_path):
    out = tmp_path / "run"
    make(toy, out, tiny_bert, epochs=2, eval_every=2, keep_snapshots=True).train()
    steps = [e["step"] for e in read_log(out) if "val_loss" in e]
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == \
        sorted(f"step-{s}" for s in steps)
    last = load_model(out / "last", device="cpu").state_dict()
    final = load_model(out / "snapshots" / f"step-{steps[-1]}", device="cpu").state_dict()
    assert all(torch.equal(last[k], final[k]) for k in last)
    make(toy, out, tiny_bert, epochs=1).train(overwrite=True)  # a new run drops the old ones
    assert not (out / "snapshots").exists()


def test_cli_seed_overrides_the_training_seed(toy, tiny_bert, tmp_path):
    raw = recipe(toy, tmp_path / "run", epochs=1)
    raw["model"]["backbone"] = str(tiny_bert)
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(raw))
    assert run_main(train_cli.main, ["--config", str(path), "--seed", "5", "--quiet"]) == 0
    saved = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert saved["recipe"]["training"]["seed"] == 5 and saved["recipe"]["data"]["seed"] == 3


def test_a_second_training_into_the_same_folder_is_refused_from_its_start(
        toy_data, siamese_recipe, tmp_path) -> None:
    """Two trainings into one new --output-dir both passed every check and the second replaced
    the first's model: the second is refused before it writes anything; the lock goes with the
    training that held it."""
    import fcntl
    import os

    from pyserini_moe.errors import UserError
    from pyserini_moe.train.trainer import Trainer, build_model

    lock = tmp_path / ".run.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first training, still running
    try:
        trainer = Trainer(build_model(siamese_recipe.model, "cpu"), siamese_recipe, toy_data(1),
                          progress=False)
        with pytest.raises(UserError, match="another training is writing into .*run now"):
            trainer.train()
        assert not (tmp_path / "run").exists()
    finally:
        os.close(fd)
    Trainer(build_model(siamese_recipe.model, "cpu"), siamese_recipe, toy_data(1),
            progress=False).train()
    assert (tmp_path / "run" / "last").is_dir() and not lock.exists()


def test_a_run_without_its_bar_says_how_far_it_is(toy, tiny_bert, tmp_path, monkeypatch, caplog):
    """Without a progress bar (--quiet, a regression's log) a line at most every
    QUIET_PROGRESS_SECONDS says the step, the loss and the time left: here every step."""
    import logging

    from pyserini_moe.train import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "QUIET_PROGRESS_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="pyserini_moe"):
        make(toy, tmp_path / "run", tiny_bert).train()
    said = [r.getMessage() for r in caplog.records if "left" in r.getMessage()]
    assert len(said) == 12 and said[0].startswith("step 1 of 12, loss ")
    assert said[-1].startswith("step 12 of 12") and said[-1].endswith("about 0 s left")
