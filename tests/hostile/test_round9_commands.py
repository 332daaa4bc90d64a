"""Cases of the ninth hostile pass in analyze, eval, regress, dpr and convert: negatives of
another condition counted as a seed's, runs sharing no query with the qrels, a training without
held-out queries, a user's file in the way of analyze's outputs, one metric as two columns, one
model in two folders, comparison settings with one run, ``--max-p``'s range, ``--smoke`` with a
condition of a local file, outputs named for another format, a corpus beside another one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pyserini_moe.cli import convert as convert_cli
from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.cli.regress import main as regress_main
from pyserini_moe.lab import smoke as smoke_module


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs over two judged queries, a run of other queries, and the qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq2 Q0 d2 1 3.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d4 1 9.0 b\nq2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "other.trec").write_text("x1 Q0 d1 1 3.0 o\nx2 Q0 d2 1 3.0 o\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


def _count(ws: Path, *more: str) -> list[str]:
    return ["expert-count", "--runs", f"1={ws / 'a.trec'}", f"3={ws / 'b.trec'}", "--qrels",
            str(ws / "qrels.txt"), "--quiet", *more]


# H9-39: analyze checkpoints, negatives of two conditions as two seeds ---------------------------

def _training(folder: Path, seed: int, **negatives) -> str:
    folder.mkdir()
    recipe = {"model": {"type": "siamese"}, "data": {"collection": "tc", "seed": seed,
                                                     "negatives": {"source": "run", **negatives}},
              "training": {"seed": seed}, "output_dir": str(folder)}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return f"{seed}={folder}"


@pytest.mark.parametrize("field, one, other", [("run", "negA.trec", "negB.trec"),
                                               ("model", "work/model", "work/sbmoe/best"),
                                               ("run", "work/s1.trec", "work/s1-b.trec")])
def test_checkpoints_refuses_negatives_of_another_condition(tmp_path, capsys, field, one,
                                                            other, error_line) -> None:
    first = _training(tmp_path / "s1", 1, **{field: one})
    second = _training(tmp_path / "s2", 2, **{field: other})
    error = error_line(analyze_main, ["checkpoints", "--train-dir", first, second, "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error.startswith(f"error: --train-dir {first} and {second}: their recipes differ in "
                            f"data.negatives.{field} ({one!r} vs {other!r}), not only in the seed")
    assert error.endswith(f"(a seed's own {field} may differ from another seed's only by the seed "
                          "number in its path, e.g. detr-s42.train.trec and detr-s43.train.trec)")


def test_checkpoints_takes_each_seeds_own_round_one_negatives(tmp_path) -> None:
    from pyserini_moe.lab.checkpoints import check_one_condition, training_folders

    folders = training_folders([
        _training(tmp_path / "s42", 42, run="work/run1/detr-s42.train.trec",
                  model="work/detr-s42/last"),
        _training(tmp_path / "s43", 43, run="work/run1/detr-s43.train.trec",
                  model="work/detr-s43/last")])
    check_one_condition(folders)  # each seed's own round 1: one condition


# H9-40: analyze checkpoints of a training without held-out queries -------------------------------

def test_checkpoints_says_a_training_held_out_no_queries(tmp_path, capsys, error_line) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    recipe = {"data": {"collection": "tc", "validation_fraction": 0.0}, "training": {"seed": 1}}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    error = error_line(analyze_main, ["checkpoints", "--train-dir", str(folder), "--corpus", "tc",
                                  "--quiet"], capsys)
    assert error == (f"error: {folder} was trained with data.validation_fraction 0: it held out "
                     "no queries, so neither the validation-loss nor the dev rule can pick a step; "
                     "train with data.validation_fraction above 0 to compare its checkpoints")


# H9-44: analyze expert-count of runs sharing no query with the qrels ------------------------------

@pytest.mark.parametrize("ones, baseline, name", [("other.trec", [], "the 1-expert"),
                                                  ("a.trec", ["other.trec"], "the baseline")])
def test_expert_count_refuses_a_run_of_other_queries(ws, capsys, ones, baseline, name, error_line) -> None:
    argv = ["expert-count", "--runs", f"1={ws / ones}", f"3={ws / 'b.trec'}", "--qrels",
            str(ws / "qrels.txt"), "--quiet", *[f for b in baseline for f in ("--baseline",
                                                                              str(ws / b))]]
    error = error_line(analyze_main, argv, capsys)
    assert error == (f"error: {name} run {ws / 'other.trec'}: none of its 2 queries is in the "
                     f"qrels {ws / 'qrels.txt'} (wrong --qrels?)")


# H9-46: analyze expert-count with one metric twice ------------------------------------------------

def test_expert_count_shows_a_metric_given_twice_once(ws, capsys) -> None:
    assert run_main(analyze_main, _count(ws, "--metrics", "ndcg@10", "ndcg@10")) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "experts" in line
                  and line.startswith("|"))
    assert header == "| experts | ndcg@10 |"


# H9-13: analyze outputs over a user's file --------------------------------------------------------

@pytest.mark.parametrize("flag, name", [("--output", "notes.md"), ("--plot", "notes.md"),
                                        ("--plot", "picture.png")])
def test_analyze_refuses_to_replace_a_users_file(ws, capsys, flag, name, error_line) -> None:
    target = ws / name
    target.write_bytes(b"my precious notes\n" if name.endswith(".md")
                       else b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    error = error_line(analyze_main, _count(ws, flag, str(target)), capsys)
    assert error == (f"error: {flag} {target} exists and is not a file analyze wrote: analyze "
                     "replaces only its own earlier output; name another file or move this one")
    assert target.read_bytes().startswith((b"my precious", b"\x89PNG"))


def test_analyze_replaces_its_own_outputs(ws, capsys) -> None:
    argv = _count(ws, "--output", str(ws / "c.md"), "--plot", str(ws / "c.png"))
    assert run_main(analyze_main, argv) == 0
    assert run_main(analyze_main, argv) == 0  # its own report and plot: replaced
    assert (ws / "c.md").read_text().startswith("SB-MoE against the number of experts")


# H9-47: analyze divergence of one model in two folders --------------------------------------------

def test_divergence_refuses_one_model_in_two_folders(tiny_bert, tiny_corpus, tmp_path,
                                                     capsys, error_line) -> None:
    from pyserini_moe.modeling import SiameseBiEncoder

    best = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "best")
    last = tmp_path / "last"
    shutil.copytree(best, last)
    error = error_line(analyze_main, ["divergence", "--model", f"a={best}", f"b={last}", "--corpus",
                                  str(tiny_corpus), "--topics", f"{tiny_corpus}:test", "--qrels",
                                  f"{tiny_corpus}:test", "--device", "cpu"], capsys)
    assert error.startswith(f"error: --model a={best} and --model b={last} hold the same model "
                            "(fingerprint ")
    assert error.endswith("give models that differ")


# H9-27, H9-28: eval's comparison settings with one run, --max-p's range ---------------------------

@pytest.mark.parametrize("extra, flags", [(["--stat-test", "fisher"], "--stat-test sets"),
                                          (["--max-p", "0.01", "--stat-test", "tukey"],
                                           "--stat-test, --max-p set"),
                                          (["--baseline", "a.trec"], "--baseline sets")])
def test_eval_refuses_comparison_settings_with_one_run(ws, capsys, extra, flags, error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(ws / "a.trec"), "--qrels", str(ws / "qrels.txt"),
                                   *extra], capsys)
    assert error.startswith(f"error: {flags} how runs are compared, but a.trec is the only run "
                            "given: nothing is compared; add the runs to compare it with")


@pytest.mark.parametrize("value", ["0", "1", "1.5"])
def test_eval_max_p_says_its_range(ws, capsys, value, error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(ws / "a.trec"), str(ws / "b.trec"), "--qrels",
                                   str(ws / "qrels.txt"), "--max-p", value], capsys)
    assert error == f"error: --max-p {float(value):g}: must be above 0 and below 1 (e.g. 0.05)"


# H9-49: regress --smoke with a condition of a local-scale file -----------------------------------

def _regression(folder: Path, name: str, scale: str, condition: str) -> Path:
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
    local = _regression(tmp_path, "loc", "local", "flat.test")
    paper = _regression(tmp_path, "pap", "paper", "big.test")
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


# H9-57, H9-59: outputs named for another format ---------------------------------------------------

@pytest.mark.parametrize("what, name, meaning, usual", [
    ("--qrels", "q.tsv", "tab-separated values", "q.txt"),
    ("--qrels", "q.trec.gz", "a TREC run", "q.txt.gz"),
    ("--topics", "t.trec", "a TREC run", "t.tsv"),
    ("--topics", "t.csv", "comma-separated values", "t.tsv")])
def test_convert_refuses_an_output_named_for_another_format(ws, capsys, what, name, meaning,
                                                            usual, error_line) -> None:
    (ws / "topics.tsv").write_text("q1\tcat\n")
    source = str(ws / ("topics.tsv" if what == "--topics" else "qrels.txt"))
    error = error_line(convert_cli.main, [what, source, "--output", str(ws / name)], capsys)
    assert error.startswith(f"error: --output {ws / name}: convert writes ")
    assert error.endswith(f", not {meaning}; name it {ws / usual}")
    assert not (ws / name).exists()


@pytest.mark.parametrize("command, name, usual", [("qa", "q.tsv", "q.jsonl"),
                                                  ("qa", "q.trec", "q.jsonl"),
                                                  ("merge-runs", "m.jsonl", "m.trec")])
def test_dpr_refuses_an_output_named_for_another_format(tmp_path, capsys, command, name,
                                                        usual, error_line) -> None:
    (tmp_path / "in.csv").write_text("who?\t['x']\n")
    (tmp_path / "in.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    source = ["--input", str(tmp_path / "in.csv")] if command == "qa" else \
        ["--runs", str(tmp_path / "in.trec")]
    error = error_line(dpr_cli.main, [command, *source, "--output", str(tmp_path / name)], capsys)
    assert error.startswith(f"error: --output {tmp_path / name}: dpr {command} writes ")
    assert error.endswith(f"; name it {tmp_path / usual}")
    assert not (tmp_path / name).exists()


# H9-14: dpr wiki, a gzipped corpus beside a plain one ---------------------------------------------

def test_dpr_wiki_refuses_a_corpus_beside_another(tmp_path, capsys, error_line) -> None:
    (tmp_path / "psgs_w100.tsv").write_text("id\ttext\ttitle\n1\tsome text\tT\n")
    folder = tmp_path / "beir"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    target = folder / "corpus.jsonl.gz"
    error = error_line(dpr_cli.main, ["wiki", "--quiet", "--input", str(tmp_path / "psgs_w100.tsv"),
                                  "--output", str(target)], capsys)
    assert error == (f"error: --output {target}: {folder} already holds corpus.jsonl, and a "
                     "folder with both corpus.jsonl and corpus.jsonl.gz is refused by index "
                     "(which is the corpus?); write elsewhere or move corpus.jsonl away")
    assert not target.exists()
