"""Cases of the twelfth hostile pass: ``fuse`` tuning on dev runs that miss the dev qrels'
queries (H12-51, H12-52, H12-53) and ``--alpha -inf`` (H12-49); ``analyze came-competition`` on
a log cut mid-line (H12-73), its ``--log`` syntax (H12-71) and ``--bins`` default (H12-76);
``analyze --plot`` not a PNG name (H12-70); ``train --set`` of an empty or unknown section
(H12-37, H12-38); the set-aside note when the process id is reused (H12-39); a one-seed
regression row (H12-46); ``sizes`` of a tiny backbone (H12-58); ``pretrain --help`` (H12-75)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.errors import UserError
from pyserini_moe.search.fusion import optimize_weights
from pyserini_moe.validate import ConfigError

# -- fuse: tuning on dev runs (H12-51, H12-52, H12-53) ------------------------------------------


@pytest.fixture
def fuse_files(tmp_path: Path) -> Path:
    """Two test runs of q1-q2; two dev runs of q3-q4 (the dense one missing q4) and two of other
    queries (q8-q9); qrels judging q3-q5."""
    (tmp_path / "d.trec").write_text("q1 Q0 d1 1 3.0 t\nq2 Q0 d2 1 3.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\nq2 Q0 d1 1 3.0 t\n")
    (tmp_path / "dev-d.trec").write_text("q3 Q0 d3 1 3.0 t\nq3 Q0 d4 2 2.0 t\n")
    (tmp_path / "dev-b.trec").write_text("q3 Q0 d4 1 3.0 t\nq3 Q0 d3 2 2.0 t\n"
                                         "q4 Q0 d4 1 3.0 t\nq4 Q0 d3 2 2.0 t\n")
    (tmp_path / "other-d.trec").write_text("q8 Q0 d3 1 3.0 t\nq9 Q0 d4 1 3.0 t\n")
    (tmp_path / "other-b.trec").write_text("q8 Q0 d4 1 3.0 t\nq9 Q0 d3 1 3.0 t\n")
    (tmp_path / "qrels.txt").write_text("q3 0 d3 1\nq4 0 d4 1\nq5 0 d5 1\n")
    return tmp_path


@pytest.mark.parametrize("method, extra", [("hybrid", []), ("hybrid", ["--weight-on-dense"]),
                                           ("linear", []), ("wsum", []),
                                           ("wsum", ["--norm", "min-max"])])
def test_dev_runs_of_no_judged_query_are_refused(fuse_argv, fuse_files, capsys, error_line, method,
                                                 extra) -> None:
    """H12-52: hybrid and linear "tuned" on all-zero scores (linear dropped the first run);
    H12-53: wsum died in ranx with "max() arg is an empty sequence"."""
    argv = fuse_argv(fuse_files, method, ("other-d.trec", "other-b.trec"), *extra)
    assert error_line(fuse.main, argv, capsys) == (
        f"error: --dev-runs {fuse_files / 'other-d.trec'} holds none of the 3 queries the dev "
        "qrels judge: tuning would score it 0 under every weighting (the dev runs of another "
        "split?)")
    assert not (fuse_files / "f.trec").exists()


def test_dev_runs_missing_a_judged_query_get_the_coverage_warning(fuse_argv, fuse_files, capsys) -> None:
    """H12-51: the dense dev run lacks judged q4, which counted as its miss in silence; the
    same runs given as --runs get "the runs hold different queries"."""
    assert run_main(fuse.main, fuse_argv(fuse_files, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"warning: the dev runs hold different judged queries ({fuse_files / 'dev-d.trec'}: 1, "
        f"{fuse_files / 'dev-b.trec'}: 2; 2 in all, of 3 in --dev-qrels); a judged query missing "
        "from a dev run scores as that system's miss, which biases the tuning against it"]


@pytest.mark.parametrize("qrels", [{"q9": {"d1": 1}}, {}, {"q1": {"d1": 0}},
                                   {"q1": {"d9": 1}}])
def test_wsum_tuning_never_reaches_ranx_with_nothing_to_tune(qrels) -> None:
    """H12-53 at the library: no judged query in the runs, no qrels, nothing judged relevant,
    nothing relevant retrieved: one UserError, not ranx's ValueError."""
    runs = [{"q1": {"d1": 1.0, "d2": 0.5}}, {"q1": {"d2": 1.0, "d1": 0.2}}]
    for method in ("wsum", "linear"):
        with pytest.raises(UserError):
            optimize_weights(runs, qrels, method)


# -- fuse --alpha -inf (H12-49) -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["-inf", "-INF", "-nan"])
def test_a_negative_infinite_alpha_gets_the_finite_number_refusal(fuse_files, capsys,
                                                                  value) -> None:
    """argparse took ``-inf`` for a flag: "argument --alpha: expected one argument"."""
    argv = ["--runs", str(fuse_files / "d.trec"), str(fuse_files / "b.trec"), "--method",
            "hybrid", "--alpha", value, "--output", str(fuse_files / "f.trec")]
    with pytest.raises(SystemExit) as exited:
        fuse.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: argument --alpha: expected a finite number, got {value!r}")


def test_a_negative_alpha_in_exponent_form_is_read_as_a_number(fuse_files, capsys,
                                                               error_line) -> None:
    argv = ["--runs", str(fuse_files / "d.trec"), str(fuse_files / "b.trec"), "--method",
            "hybrid", "--alpha", "-1e-3", "--output", str(fuse_files / "f.trec")]
    assert error_line(fuse.main, argv, capsys) == (
        "error: --alpha must be >= 0 (the weight of the second run), got -0.001")


# -- analyze came-competition: a log cut mid-line (H12-73), --log syntax (H12-71) --------------

def _log(path: Path, steps: int, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(
        {"step": i + 1, "loss": 1.0, "weight_lexical": 0.5, "weight_local": 0.3,
         "weight_global": 0.2, "loss_lexical": 1.0, "loss_local": 2.0, "loss_global": 3.0}) + "\n"
        for i in range(steps)) + tail)
    return path


def test_a_log_cut_in_its_last_line_is_summarised_with_one_warning(tmp_path, capsys) -> None:
    log = _log(tmp_path / "train_log.jsonl", 3, '{"step": 4, "loss": 1.0, "weight_lex')
    assert run_main(analyze_main, ["came-competition", "--log", f"came={log}",
                                   "--bins", "1"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"warning: {log}: line 4, the last, is cut off (a training "
                                "stopped while writing it): summarising the 3 complete steps "
                                "before it"]
    assert "| 1-3 | 0.500 | 0.300 | 0.200 |" in out


def test_a_log_broken_inside_is_refused_naming_the_line(tmp_path, capsys, error_line) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    log.write_text(log.read_text().replace('"step": 2', '"step": 2,,', 1) + log.read_text())
    assert error_line(analyze_main, ["came-competition", "--log", f"came={log}"], capsys) == (
        f"error: {log}: line 2 is not a JSON record: not a whole training log")


def test_a_log_without_its_name_is_told_the_log_syntax(tmp_path, capsys, error_line) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    assert error_line(analyze_main, ["came-competition", "--log", str(log)], capsys) == (
        f"error: --log {str(log)!r}: expected NAME=LOG, e.g. came=work/came/train_log.jsonl")


# -- analyze --plot not a PNG name (H12-70) --------------------------------------------------------

@pytest.mark.parametrize("name", ["a8.txt", "a8.pdf", "a8"])
def test_a_plot_name_that_is_not_a_png_is_refused(tmp_path, capsys, error_line, name) -> None:
    log = _log(tmp_path / "train_log.jsonl", 2)
    plot = tmp_path / name
    assert error_line(analyze_main, ["came-competition", "--log", f"came={log}", "--plot",
                                     str(plot)], capsys) == (
        f"error: --plot {plot}: the plot is written as a PNG image: give a file name ending in "
        ".png")
    assert not plot.exists()
    assert run_main(analyze_main, ["came-competition", "--log", f"came={log}", "--plot",
                                   str(tmp_path / "a8.PNG")]) == 0


# -- --help defaults (H12-75, H12-76) -------------------------------------------------------------

def _help_blocks(text: str) -> dict[str, str]:
    """``--flag`` -> its help block, from an argparse help text."""
    blocks: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and stripped.startswith("--"):
            flag = stripped.split()[0].rstrip(",")
            blocks[flag] = stripped
        elif flag is not None and line.startswith("    ") and stripped:
            blocks[flag] += " " + stripped
        else:
            flag = None
    return blocks


def test_every_pretrain_flag_has_a_help_text_and_its_default() -> None:
    from pyserini_moe.cli.pretrain import build_parser

    parser = build_parser()
    blocks = _help_blocks(parser.format_help())
    for action in parser._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        flag = action.option_strings[-1]
        assert action.help, flag
        if action.default not in (None, False, [], ()) and not action.required:
            assert "default" in blocks[flag], blocks[flag]
    for flag in ("--max-steps", "--learning-rate", "--warmup-ratio", "--variant", "--seed"):
        assert "(default: " in blocks[flag], blocks[flag]


def test_came_competition_bins_says_its_default(capsys) -> None:
    with pytest.raises(SystemExit):
        analyze_main(["came-competition", "--help"])
    assert "(default: 10)" in _help_blocks(capsys.readouterr().out)["--bins"]


# -- train --set training..max_steps / Training.max_steps (H12-37, H12-38) ----------------------

def test_an_empty_field_name_in_a_set_is_blamed_on_the_set(siamese_recipe) -> None:
    with pytest.raises(ConfigError) as refused:
        siamese_recipe.with_settings(["training..max_steps=1"])
    assert str(refused.value) == (
        "--set training..max_steps=1: 'training..max_steps' has an empty field name (a dot too "
        "many?): expected dotted field names, e.g. training.max_steps=1000")


def test_an_unknown_section_a_set_makes_is_blamed_on_the_set(siamese_recipe) -> None:
    with pytest.raises(ConfigError) as refused:
        siamese_recipe.with_settings(["Training.max_steps=1"])
    assert str(refused.value) == ("--set Training.max_steps=1: Training: unknown field (known: "
                                  "data, model, output_dir, training)")
    with pytest.raises(ConfigError, match=r"^--set training\.foo\.bar=1: training\.foo: "
                                          "unknown field"):
        siamese_recipe.with_settings(["training.foo.bar=1"])


# -- the set-aside note when the process id is reused (H12-39) ----------------------------------

def _trainer(recipe, toy_data, tiny_bert: Path):
    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    torch.manual_seed(0)
    return Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                   progress=False)


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
        _trainer(recipe, toy_data, tiny_bert).train(resume=True)


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


# -- a one-seed regression row (H12-46) ------------------------------------------------------------

def test_a_one_seed_row_shows_no_sd_and_no_spread_footnote() -> None:
    from pyserini_moe.lab.regress import Outcome, format_table

    one = Outcome("one", "ndcg@10", 0.1077, 0.25, 0.001, "FAIL", "hand-computed", {1: 0.25})
    table = format_table([one], {})
    assert table.splitlines()[-1].endswith("FAIL  (seed 1: 0.2500)")
    assert "sd" not in table.splitlines()[-1] and "spread" not in table
    two = Outcome("two", "ndcg@10", 0.5, 0.5, 0.1, "OK", "hand-computed", {1: 0.4, 2: 0.6})
    table = format_table([one, two], {})
    assert "(mean of 2 seeds, sd 0.1414: 1: 0.4000, 2: 0.6000)" in table
    assert table.splitlines()[-1].startswith("tolerance 'spread' of a multi-seed row")


# -- sizes of a tiny backbone (H12-58) -------------------------------------------------------------

def test_sizes_of_a_tiny_backbone_tell_the_models_apart(tiny_bert, capsys) -> None:
    from pyserini_moe.cli import sizes

    assert run_main(sizes.main, ["--backbone", str(tiny_bert)]) == 0
    rows = dict(line.strip("| ").split(" | ") for line in capsys.readouterr().out.splitlines()[2:]
                if "cannot be built" not in line)
    assert "0.0M" not in rows.values() and "0.1M" not in rows.values()
    assert rows["siamese"] != rows["colbert"] and rows["siamese"].endswith("M")
    assert sizes.size(42_123) == "0.042123M" and sizes.size(109_482_240) == "109.5M"
