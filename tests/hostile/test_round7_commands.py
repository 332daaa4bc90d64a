"""Cases of the seventh hostile pass: recipe fields the chosen negatives source does not read,
``regress --smoke`` beside flags it cannot honour, a ``--seed`` no selected condition reads, one
training counted as two seeds, ``analyze`` counts out of range, one run file in two places."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.cli.regress import main as regress_main
from pyserini_moe.train.config import from_dict
from pyserini_moe.validate import ConfigError


def _usageerror_line(main, argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The last line of argparse's refusal (usage, then one error line; exit 2)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# H7-17: train recipes -------------------------------------------------------------------------

def _recipe(negatives: dict) -> dict:
    return {"output_dir": "out", "model": {"type": "siamese"},
            "data": {"collection": "scifact", "negatives": negatives},
            "training": {"learning_rate": 1.0e-5}}


@pytest.mark.parametrize("negatives, field", [
    ({"run": "round1.trec"}, "run"),
    ({"source": "bm25", "model": "m", "kind": "dense"}, "model"),
    ({"source": "bm25", "kind": "dense"}, "kind"),
    ({"source": "run", "run": __file__, "model": "m"}, "model"),
    ({"source": "model", "model": "m", "kind": "dense", "run": "r.trec"}, "run"),
])
def test_a_negatives_field_the_source_does_not_read_is_refused(negatives, field) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(_recipe(negatives), "encoders/r.yaml")
    message = str(info.value)
    assert message.startswith(f"encoders/r.yaml: data.negatives.{field}: not read when source "
                              f"is '{negatives.get('source', 'bm25')}'")
    assert "\n" not in message


def test_the_fields_a_source_reads_stay_accepted() -> None:
    assert from_dict(_recipe({"source": "run", "run": __file__})).data.negatives.run
    assert from_dict(_recipe({"source": "model", "model": "m", "kind": "dense"}))


def test_set_names_the_setting_the_source_ignores(siamese_recipe) -> None:
    with pytest.raises(ConfigError, match=r"^--set data.negatives.run=x.trec: not read when "
                                          "source is 'bm25'"):
        siamese_recipe.with_settings(["data.negatives.run=x.trec"])


# H7-22, H7-25, H7-26: regress ---------------------------------------------------------------

def _regression(folder: Path, scale: str = "paper") -> Path:
    """A file with an unseeded ``plain`` condition and a ``seeded`` one (seeds 1, 2)."""
    (folder / "qrels.txt").write_text("q1 0 d1 1\n")
    for name in ("plain", "s-1", "s-2"):
        (folder / f"{name}.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    common = {"steps": [], "qrels": str(folder / "qrels.txt"), "source": "x"}
    doc = {"name": "mix", "scale": scale, "conditions": [
        {"name": "plain", "run": str(folder / "plain.trec"),
         "metrics": {"ndcg@10": {"expected": None}}, **common},
        {"name": "seeded", "seeds": [1, 2], "run": str(folder / "s-{seed}.trec"),
         "metrics": {"ndcg@10": {"expected": 1.0, "sd": 0.0, "seeds": [1.0, 1.0]}}, **common}]}
    path = folder / "mix.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path




@pytest.mark.parametrize("flags", [["--dry-run"], ["--evaluate-only"], ["--seed", "1"],
                                   ["--results-dir", "elsewhere"]])
def test_smoke_refuses_a_flag_it_cannot_honour(flags, smoked, tmp_path, capsys, error_line) -> None:
    error = error_line(regress_main, [str(_regression(tmp_path)), "--smoke", *flags,
                                  "--work-dir", str(tmp_path / "w")], capsys)
    assert error == (f"error: --smoke runs every step for real on stand-ins: {flags[0]} cannot "
                     "go with it; run without --smoke for that")
    assert smoked == [] and not (tmp_path / "w").exists()


def test_smoke_runs_only_the_conditions_named(smoked, tmp_path) -> None:
    assert regress_main([str(_regression(tmp_path)), "--smoke", "--condition", "plain",
                         "--work-dir", str(tmp_path / "w")]) == 0
    [regs] = smoked
    assert [[c.name for c in reg.conditions] for reg in regs] == [["plain"]]


def test_smoke_refuses_an_unknown_condition_and_scale_local(smoked, tmp_path, capsys, error_line) -> None:
    path = str(_regression(tmp_path))
    assert "--condition nope: no such condition" in error_line(
        regress_main, [path, "--smoke", "--condition", "nope"], capsys)
    assert error_line(regress_main, [path, "--smoke", "--scale", "local"], capsys) == (
        "error: --smoke runs paper-scale files: --scale local leaves none; drop --scale")
    assert smoked == []


def test_a_seed_no_selected_condition_reads_is_refused(tmp_path, capsys, error_line) -> None:
    path = str(_regression(tmp_path, scale="local"))
    error = error_line(regress_main, [path, "--evaluate-only", "--seed", "1", "--condition", "plain",
                                  "--work-dir", str(tmp_path / "w")], capsys)
    assert error == ("error: --seed 1: no condition selected (plain) trains with it (their "
                     "seeds: none)")
    assert not (tmp_path / "w").exists()
    assert regress_main([path, "--evaluate-only", "--seed", "1", "--condition", "seeded",
                         "--work-dir", str(tmp_path / "w")]) == 0


# H7-27: analyze checkpoints -------------------------------------------------------------------

def test_two_folders_of_one_training_seed_are_refused(tmp_path, capsys, error_line) -> None:
    for name in ("s1", "s1-copy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "recipe.yaml").write_text(
            f"data:\n  collection: {tmp_path / 'tc'}\ntraining:\n  seed: 1\n")
    error = error_line(analyze_main, ["checkpoints", "--train-dir", str(tmp_path / "s1"),
                                  str(tmp_path / "s1-copy"), "--corpus", str(tmp_path / "tc"),
                                  "--quiet"], capsys)
    assert error == (f"error: --train-dir s1={tmp_path / 's1'} and s1-copy={tmp_path / 's1-copy'}"
                     ": both recipes trained with seed 1, one training twice; give one folder "
                     "per training seed")


# H7-31, H7-32: analyze counts -----------------------------------------------------------------

ENCODING = {"experts": ["--model", "m", "--topics", "t"],
            "routing": ["--model", "m", "--corpus", "c", "--topics", "t"],
            "divergence": ["--model", "a=m", "--corpus", "c", "--topics", "t", "--qrels", "q"],
            "checkpoints": ["--train-dir", "d", "--corpus", "c"]}


@pytest.mark.parametrize("value", ["-3", "0"])
@pytest.mark.parametrize("command, flag", [
    *((command, "--max-length") for command in ENCODING),
    ("experts", "--query-max-length"), ("divergence", "--query-max-length"),
    ("experts", "--batch-size"), ("experts", "--min-docs")])
def test_a_count_below_one_is_refused_by_argparse(command, flag, value, capsys) -> None:
    error = _usageerror_line(analyze_main, [command, *ENCODING[command], flag, value], capsys)
    assert error.endswith(f"argument {flag}: must be >= 1, got {value}")


@pytest.mark.parametrize("argv, flag", [
    (["came", "--expert-runs", "lexical=a", "local=b", "--qrels", "q"], "--depth"),
    (["came-competition", "--log", "x=a"], "--bins")])
def test_came_counts_below_one_are_refused_by_argparse(argv, flag, capsys) -> None:
    assert _usageerror_line(analyze_main, [*argv, flag, "0"], capsys).endswith(
        f"argument {flag}: must be >= 1, got 0")


# H7-34, H7-35: one run file in two places, overlap of short lists ------------------------------

def test_expert_count_refuses_one_run_for_two_counts_or_as_the_baseline(tmp_path, capsys, error_line) -> None:
    run = tmp_path / "dense.trec"
    run.write_text("q1 Q0 d1 1 3.0 t\n")
    same = f"{tmp_path}/./dense.trec"
    assert error_line(analyze_main, ["expert-count", "--runs", f"3={run}", f"6={same}", "--qrels",
                                 "q"], capsys) == (
        f"error: --runs 3={run} and --runs 6={same} are one run file: give each once")
    assert error_line(analyze_main, ["expert-count", "--runs", f"3={run}", "--baseline", same,
                                 "--qrels", "q"], capsys) == (
        f"error: --runs 3={run} and --baseline {same} are one run file: give each once")


def test_came_refuses_one_run_as_two_experts_or_as_a_fused_run(tmp_path, capsys, error_line) -> None:
    run = tmp_path / "ex.impact.trec"
    run.write_text("q1 Q0 d1 1 3.0 t\n")
    assert error_line(analyze_main, ["came", "--expert-runs", f"lexical={run}", f"local={run}",
                                 "--qrels", "q"], capsys) == (
        f"error: --expert-runs lexical={run} and --expert-runs local={run} are one run file: "
        "give each once")
    assert "are one run file" in error_line(
        analyze_main, ["came", "--expert-runs", f"lexical={run}", f"local={tmp_path / 'b'}",
                       "--fused", f"sum={run}", "--qrels", "q"], capsys)
