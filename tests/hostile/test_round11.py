"""Cases of the eleventh hostile pass: a ``--set`` of a whole section dropping an earlier
``--set`` inside it (H11-06), the earlier run a killed ``train --overwrite`` left aside and no
later start mentioned (H11-09), a one-seed regression row with an sd (H11-47), an ``eval`` seed
group mixing runs of two query sets (H11-54), and an empty seed-group label (H11-57)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli.eval import main as eval_main
from pyserini_moe.cli.train import main as train_main
from pyserini_moe.lab.regress import RegressionSpecError, load_regression
from pyserini_moe.validate import ConfigError


def _dead_pid() -> int:
    """The id of a process that has ended (what a SIGKILLed training leaves in its names)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)


# H11-06: --set training.max_steps=1 --set training={} -----------------------------------------

def test_a_whole_section_set_after_a_field_inside_it_is_refused(siamese_recipe, tmp_path, capsys,
                                                                error_line) -> None:
    recipe = tmp_path / "ok.yaml"
    recipe.write_text(yaml.safe_dump(siamese_recipe.to_dict()))
    argv = ["--config", str(recipe), "--output-dir", str(tmp_path / "out"),
            "--set", "training.max_steps=1", "--set", "training={}"]
    assert error_line(train_main, argv, capsys) == (
        "error: --set training={} replaces the whole of training, which the earlier --set "
        "training.max_steps=1 sets inside: the earlier one would be lost; give the field in the "
        "section's value, or drop one of them")
    assert not (tmp_path / "out").exists()


def test_a_field_a_whole_section_set_drops_blames_that_set(siamese_recipe) -> None:
    """The section first, then a field inside it, is an order that loses nothing; what the
    section's value lacks is its --set's, not the recipe file's (which has the field)."""
    changed = siamese_recipe.with_settings(["training={learning_rate: 0.01, batch_size: 2, device: cpu}",
                                            "training.max_steps=1"])
    assert changed.training.max_steps == 1 and changed.training.learning_rate == 0.01
    with pytest.raises(ConfigError, match=r"^--set training=\{\}: training\.learning_rate: "
                                          "missing required field$"):
        siamese_recipe.with_settings(["training={}", "training.max_steps=1"])


# H11-09: the earlier run a killed --overwrite left in .<output>.old-PID -------------------------

def _trainer(recipe, toy_data, tiny_bert: Path):
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
        _trainer(siamese_recipe, toy_data, tiny_bert).train(resume=True)
    _said(caplog, out, aside)


def test_a_new_overwrite_names_the_earlier_run_and_keeps_it(siamese_recipe, toy_data, tiny_bert,
                                                            caplog) -> None:
    out = siamese_recipe.output_dir
    aside = _left_aside(out)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        _trainer(siamese_recipe, toy_data, tiny_bert).train(overwrite=True)
    _said(caplog, out, aside)
    assert (out / "best").is_dir()


# H11-47: a one-seed row recording an sd ---------------------------------------------------------

def test_a_one_seed_row_with_an_sd_is_told_one_seed_has_none(tmp_path) -> None:
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    doc = {"name": "r", "conditions": [{
        "name": "one", "seeds": [1], "run": str(tmp_path / "s-{seed}.trec"),
        "qrels": str(tmp_path / "qrels.txt"), "source": "hand-computed",
        "metrics": {"ndcg@10": {"expected": 0.6, "sd": 0.0, "seeds": [0.6]}}}]}
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(RegressionSpecError) as refused:
        load_regression(path)
    assert str(refused.value) == (
        f"{path}: condition 'one': ndcg@10.sd: a condition of one seed has no sd (a spread needs "
        "at least 2 seeds): leave 'sd' out")
    del doc["conditions"][0]["metrics"]["ndcg@10"]["sd"]
    path.write_text(yaml.safe_dump(doc))
    assert load_regression(path).conditions[0].checks[0].expected == 0.6


# H11-54, H11-57: eval seed groups ---------------------------------------------------------------

@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Qrels of q1-q4; two seeds of a run of them, the second missing q4 (it retrieved nothing
    there); a run of other queries, q5-q8."""
    (tmp_path / "qrels.txt").write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(1, 5)))
    (tmp_path / "s-1.trec").write_text("".join(f"q{i} Q0 d{i} 1 3.0 s\n" for i in range(1, 5)))
    (tmp_path / "s-2.trec").write_text("".join(f"q{i} Q0 d{i} 1 3.0 s\n" for i in range(1, 4)))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "m-1.trec").write_text((tmp_path / "s-1.trec").read_text())
    (tmp_path / "other" / "m-2.trec").write_text(
        "".join(f"q{i} Q0 d{i} 1 3.0 o\n" for i in range(5, 9)))
    return tmp_path


def test_a_seed_group_of_two_query_sets_is_refused(runs, capsys, error_line) -> None:
    argv = ["--run", f"a={runs / 'other'}/m-*.trec", "--qrels", str(runs / "qrels.txt")]
    assert error_line(eval_main, argv, capsys) == (
        "error: --run a: its seeds a/m-1.trec and a/m-2.trec answer different queries (4 judged "
        "queries only in the first, 0 only in the second): the seeds of one condition must be "
        "runs of the same topics")


def test_a_seed_that_retrieved_nothing_for_a_query_stays_a_seed(runs, capsys) -> None:
    from pyserini_moe.cli import run_main

    assert run_main(eval_main, ["--run", f"a={runs}/s-*.trec", "--qrels",
                                str(runs / "qrels.txt")]) == 0
    captured = capsys.readouterr()
    assert "a/s-2.trec: 1 of 4 judged queries have no results" in captured.err
    assert "| a " in captured.out


def test_an_empty_seed_group_label_is_named(runs, capsys, error_line) -> None:
    for label in ("", " "):
        spec = f"{label}={runs}/s-*.trec"
        assert error_line(eval_main, ["--run", spec, "--qrels", str(runs / "qrels.txt")],
                          capsys) == (f"error: --run {spec}: the label before '=' is empty: name "
                                      "the condition, e.g. --run 'NAME=PATTERN'")
