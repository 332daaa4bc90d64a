"""Unusual input to the ``regress`` command (:mod:`pyserini_moe.cli.regress`): work and
results folders that are files, indexes or inside a collection, conditions and seeds no
selected file holds, regression files given twice, and ``--smoke`` beside flags it cannot
honour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli import regress, run_main
from pyserini_moe.cli import regress as regress_cli
from pyserini_moe.cli.regress import main
from pyserini_moe.cli.regress import main as regress_main
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import write_meta
from pyserini_moe.lab import smoke as smoke_module
from pyserini_moe.lab.regress import REPO_ROOT
from tests.helpers import refused, regression_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("smoke", [False, True], ids=["run", "smoke"])
def test_a_work_dir_that_is_an_index_or_a_file_is_refused(tmp_path, capsys, error_line,
                                                          smoke) -> None:
    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    target = "regressions/bm25-paper.yaml" if smoke else "regressions/bm25-scifact.yaml"
    flags = ["--smoke"] if smoke else ["--dry-run"]
    assert error_line(regress.main, [target, "--work-dir", str(index), *flags], capsys) == (
        f"error: --work-dir {index} is an index: name a folder of its own (made if missing)")
    assert sorted(p.name for p in index.iterdir()) == ["pyserini_moe_index.json"]
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    assert error_line(regress.main, [target, "--work-dir", str(afile), *flags], capsys) == (
        f"error: --work-dir {afile} is a file: name a folder (made if missing)")


def test_a_results_dir_that_is_a_training_run_is_refused(tmp_path: Path, capsys,
                                                         error_line) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("output_dir: run\n")
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "--results-dir",
                                     str(run), "--dry-run"], capsys) == (
        f"error: --results-dir {run} is a training run: name a folder of its own (made if "
        "missing)")


def test_results_pages_of_a_run_elsewhere_stay_out_of_the_repository(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    work = two_conditions.parent / "elsewhere"
    assert main([str(two_conditions), "--work-dir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--output {work / 'results'}" in out
    assert str(REPO_ROOT / "docs" / "results") not in out


def test_dry_run_shows_expected_values_and_runs_nothing(
        two_conditions: Path, capsys: pytest.CaptureFixture) -> None:
    work = two_conditions.parent / "w"
    assert main([str(two_conditions), "--work-dir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(("train ", "search "))]
    assert len(table) == 2 and all("0.7500" in line and "PLAN" in line for line in table)
    assert not (work / "deps" / "model.trec").exists()


def test_a_dry_run_that_would_evaluate_is_refused(error_line, capsys) -> None:
    """``--dry-run --evaluate-only``: the second flag was silently ignored."""
    line = error_line(regress_cli.main, [str(ROOT / "regressions" / "came-protocol.yaml"),
                                         "--dry-run", "--evaluate-only"], capsys)
    assert "--dry-run prints the plan and evaluates nothing" in line


def test_a_scale_that_leaves_no_file_is_refused(error_line, capsys) -> None:
    """``regress --scale paper`` on local files ran nothing and exited 0 in silence."""
    line = error_line(regress_cli.main, [str(ROOT / "regressions" / "came-protocol.yaml"),
                                         "--scale", "paper", "--dry-run"], capsys)
    assert "--scale paper leaves none of the files given (they are local-scale)" in line


def test_a_condition_only_in_a_file_scale_drops_is_refused(capsys, error_line) -> None:
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-paper.yaml",
                                     "--scale", "local", "--condition", "bm25.dl19-passage",
                                     "--dry-run"], capsys) == (
        "error: --condition bm25.dl19-passage: regressions/bm25-paper.yaml holds it, a "
        "paper-scale file that --scale local leaves out: drop --scale or the condition")


def test_a_file_without_the_condition_runs_none_of_its_steps(capsys) -> None:
    assert run_main(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-classic.yaml",
                                   "--condition", "bm25-flat.scifact.test", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "note: regressions/bm25-classic.yaml holds none of --condition: skipped" in err
    assert "cranfield" not in out and "--corpus scifact" in out


def test_regress_names_only_the_conditions_the_dropped_file_holds(capsys, error_line) -> None:
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "regressions/bm25-paper.yaml",
                                     "--scale", "local", "--condition", "bm25-flat.scifact.test",
                                     "--condition", "bm25.dl19-passage", "--dry-run"], capsys) == (
        "error: --condition bm25.dl19-passage: regressions/bm25-paper.yaml holds it, a "
        "paper-scale file that --scale local leaves out: drop --scale or the condition")


def test_a_work_dir_inside_an_index_or_a_collection_is_refused(tmp_path, collection, capsys,
                                                               error_line) -> None:
    from pyserini_moe.index.meta import write_meta

    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    for work, where, what in ((index / "sub", index, "an index"),
                              (collection, None, "a collection"),
                              (collection / "work", collection, "a collection")):
        said = what if where is None else f"inside {where}, {what}"
        assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir", str(work),
                                         "--dry-run"], capsys) == (
            f"error: --work-dir {work} is {said}: name a folder of its own (made if missing)")
    (tmp_path / "proj").mkdir()  # a user's recipe above the work folder is not a training run
    (tmp_path / "proj" / "recipe.yaml").write_text("output_dir: x\n")
    assert run_main(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir",
                                   str(tmp_path / "proj" / "work"), "--dry-run"]) == 0


def test_a_work_dir_that_is_a_file_is_said_so(tmp_path: Path, capsys) -> None:
    """The runner said "[Errno 20] Not a directory: '<file>/<regression>'"."""
    from pyserini_moe.cli import regress, run_main

    work = tmp_path / "work"
    work.write_text("a file")
    code = run_main(regress.main, ["regressions/bm25-scifact.yaml", "--work-dir", str(work),
                                   "--dry-run"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --work-dir {work} is a file: name a folder (made if missing)")


def test_regress_names_a_folder_given_as_a_file(tmp_path, capsys) -> None:
    refused(regress.main, [str(tmp_path), "--dry-run"],
            f"{tmp_path} is a folder: name its regression files", capsys)


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


# --- regress --smoke, one file twice --------------------------------------------------------------


def _paper_file(folder: Path, name: str = "mix") -> Path:
    (folder / "qrels.txt").write_text("q1 0 d1 1\n")
    (folder / "plain.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    doc = {"name": name, "scale": "paper", "conditions": [
        {"name": "plain", "run": str(folder / "plain.trec"), "steps": [],
         "qrels": str(folder / "qrels.txt"), "source": "x",
         "metrics": {"ndcg@10": {"expected": None}}}]}
    path = folder / f"{name}-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("smoke", [["--smoke"], []])
def test_regress_refuses_one_file_twice_with_or_without_smoke(smoked, tmp_path, capsys,
                                                              smoke, error_line) -> None:
    path = _paper_file(tmp_path)
    error = error_line(regress_main, [str(path), f"{tmp_path}/./{path.name}", *smoke, "--work-dir",
                                  str(tmp_path / "w")], capsys)
    assert error == (f"error: {path} and {tmp_path}/./{path.name} are one regression file: give "
                     "each once")
    assert smoked == [] and not (tmp_path / "w").exists()


def test_smoke_refuses_two_files_of_one_name(smoked, tmp_path, capsys, error_line) -> None:
    first, second = _paper_file(tmp_path), _paper_file(tmp_path)
    error = error_line(regress_main, [str(first), str(second), "--smoke", "--work-dir",
                                  str(tmp_path / "w")], capsys)
    assert error.startswith("error: several files are named mix:")
    assert smoked == []


# --- regress --smoke with a condition of a local-scale file ---------------------------------------


def _regression_file(folder: Path, name: str, scale: str, condition: str) -> Path:
    (folder / "qrels.txt").write_text("q1 0 d1 1\n")
    doc = {"name": name, "scale": scale, "conditions": [
        {"name": condition, "run": str(folder / "r.trec"), "steps": [],
         "qrels": str(folder / "qrels.txt"), "source": "x",
         "metrics": {"ndcg@10": {"expected": None}}}]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_smoke_names_the_local_file_of_a_condition(tmp_path, capsys, monkeypatch, error_line) -> None:
    calls: list = []
    monkeypatch.setattr(smoke_module, "smoke", lambda regs, work: calls.append(regs) or 0)
    local = _regression_file(tmp_path, "loc", "local", "flat.test")
    paper = _regression_file(tmp_path, "pap", "paper", "big.test")
    error = error_line(regress_main, [str(local), str(paper), "--smoke", "--condition", "flat.test",
                                  "--work-dir", str(tmp_path / "w")], capsys)
    assert error == (f"error: --condition flat.test is in {local}, a local-scale file, which "
                     "--smoke skips (it runs paper-scale files only): run it without --smoke, or "
                     "name a condition of a paper-scale file")
    assert run_main(regress_main, [str(local), str(paper), "--smoke", "--work-dir",
                                   str(tmp_path / "w")]) == 0
    assert capsys.readouterr().err == (f"note: --smoke skips {local}, a local-scale file (it runs "
                                       "paper-scale files only)\n")
    assert [r.name for r in calls[0]] == ["pap"]


def test_an_unknown_regression_condition_runs_nothing(bm25_ws, tmp_path, capsys) -> None:
    spec = tmp_path / "r.yaml"
    spec.write_text(json.dumps({
        "name": "r", "description": "d", "scale": "local",
        "steps": [f"touch {tmp_path / 'ran'}"],
        "conditions": [{"name": "c1", "run": "x.trec", "qrels": "scifact:test",
                        "metrics": {"ndcg@10": None}, "source": "test"}]}))
    refused(regress.main, ["--condition", "nosuch", str(spec), "--work-dir", str(tmp_path / "w")],
            "no such condition", capsys)
    assert not (tmp_path / "ran").exists()


def test_a_work_folder_with_a_space_is_one_argument(tmp_path: Path) -> None:
    work = tmp_path / "my work"
    assert regress_main([str(regression_file(tmp_path)), "--work-dir", str(work)]) == 0
    assert (work / "tiny" / "copy.trec").is_file() and not (tmp_path / "my").exists()


def test_a_relative_work_folder_is_where_the_runner_looks(tmp_path: Path, monkeypatch) -> None:
    path = regression_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert regress_main([str(path), "--work-dir", "rel"]) == 0
    assert (tmp_path / "rel" / "tiny" / "copy.trec").is_file()  # steps run from the repository
    assert (tmp_path / "rel" / "tiny" / "report.json").is_file()


def test_a_seed_no_condition_trains_with_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--seed 99: no condition"):
        regress_main([str(regression_file(tmp_path)), "--seed", "99", "--work-dir", str(tmp_path / "w")])
    assert not (tmp_path / "w").exists()


def test_two_files_of_one_name_are_refused(tmp_path: Path) -> None:
    first, second = regression_file(tmp_path), regression_file(tmp_path)
    with pytest.raises(UserError, match="several files are named tiny"):
        regress_main([str(first), str(second), "--work-dir", str(tmp_path / "w")])


@pytest.mark.parametrize("flag", ["--work-dir", "--results-dir"])
def test_a_folder_under_a_file_is_refused(tmp_path: Path, capsys, error_line, flag) -> None:
    """'--work-dir <file>/w' printed the file's banner, then "[Errno 20] Not a directory"."""
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    extra = [] if flag == "--work-dir" else ["--work-dir", str(tmp_path / "w")]
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", flag, str(afile / "w"),
                                     "--dry-run", *extra], capsys) == (
        f"error: {flag} {afile / 'w'}: {afile} is a file, not a folder: name a folder (made if "
        "missing)")
    assert afile.read_text() == "mine" and not (tmp_path / "w").exists()
