"""The regression runner: schema validation, OK/FAIL/ERROR/SKIP logic, dry runs, exit codes."""

import sys
from pathlib import Path

import pytest
import yaml

from pyserini_moe import regress
from pyserini_moe.lab.regress import RegressionSpecError, load_regression, run_regression

QRELS = "q1 0 d1 1\nq2 0 d2 1\n"
# q1 finds its relevant doc at rank 1, q2 at rank 2: MRR@10 = (1 + 1/2) / 2 = 0.75.
RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "run.trec").write_text(RUN)
    return tmp_path


def write_yaml(tmp_path: Path, doc: dict, name: str = "reg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def condition(files: Path, expected: float, **extra) -> dict:
    return {"name": extra.pop("name", "c"), "run": str(files / "run.trec"),
            "qrels": str(files / "qrels.txt"), "metrics": {"mrr@10": expected},
            "tolerance": 0.01, "source": "hand-computed", **extra}


def statuses(rows) -> list[str]:
    return [r.status for r in rows]


def test_within_tolerance_is_ok_and_outside_is_fail(files):
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        condition(files, 0.755, name="ok"), condition(files, 0.70, name="fail")]}))
    rows, times = run_regression(reg, files / "work")
    assert statuses(rows) == ["OK", "FAIL"]
    assert rows[0].measured == pytest.approx(0.75)
    assert set(times) == {"ok", "fail"}


def test_tolerance_boundary_passes(files):
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        condition(files, 0.76)]}))
    assert statuses(run_regression(reg, files / "work")[0]) == ["OK"]


def test_steps_run_with_placeholders_and_failing_step_is_error(files):
    copy = f"{{python}} -c \"import shutil; shutil.copy('{files / 'run.trec'}', '{{work}}/made.trec')\""
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        condition(files, 0.75, name="made", steps=[copy], run="{work}/made.trec"),
        condition(files, 0.75, name="broken", steps=["{python} -c \"raise SystemExit(3)\""]),
    ]}))
    rows, _ = run_regression(reg, files / "work")
    assert statuses(rows) == ["OK", "ERROR"]
    assert "exit 3" in rows[1].note
    assert (files / "work" / "made.trec").is_file()


def test_evaluate_only_runs_no_step_and_scores_the_runs_already_made(files):
    (files / "work").mkdir()
    (files / "work" / "made.trec").write_text(RUN)
    reg = load_regression(write_yaml(files, {"name": "r", "steps": [
        "{python} -c \"raise SystemExit(4)\""], "conditions": [
        condition(files, 0.75, name="made", steps=["{python} -c \"raise SystemExit(5)\""],
                  run="{work}/made.trec"),
        condition(files, 0.75, name="absent", run="{work}/absent.trec")]}))
    rows, _ = run_regression(reg, files / "work", evaluate_only=True)
    assert statuses(rows) == ["OK", "ERROR"]  # nothing ran, so the absent run stays absent
    assert rows[0].measured == pytest.approx(0.75)
    assert statuses(run_regression(reg, files / "work")[0]) == ["ERROR", "ERROR"]  # steps fail


def test_paper_scale_without_data_or_gpu_is_skipped_with_reason(files, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    reg = load_regression(write_yaml(files, {
        "name": "paper", "scale": "paper",
        "requires": {"data": ["$NO_SUCH_DIR/collection.tsv"], "gpu": True},
        "steps": ["{python} -c \"raise SystemExit('must not run')\""],
        "conditions": [condition(files, 0.75)]}))
    rows, times = run_regression(reg, files / "work")
    assert statuses(rows) == ["SKIP"] and times == {}
    assert "$NO_SUCH_DIR/collection.tsv" in rows[0].note and "GPU" in rows[0].note


def test_paper_scale_runs_when_requirements_hold(files):
    reg = load_regression(write_yaml(files, {
        "name": "paper", "scale": "paper", "requires": {"data": [str(files / "qrels.txt")]},
        "conditions": [condition(files, 0.75)]}))
    assert statuses(run_regression(reg, files / "work")[0]) == ["OK"]


def test_dry_run_prints_commands_and_runs_nothing(files, capsys):
    reg = load_regression(write_yaml(files, {"name": "r", "steps": ["{python} -c \"open('{work}/x','w')\""],
                                             "conditions": [condition(files, 0.75)]}))
    rows, _ = run_regression(reg, files / "work", dry_run=True)
    out = capsys.readouterr().out
    assert sys.executable in out and "-c" in out
    assert not (files / "work" / "x").exists() and statuses(rows) == ["PLAN"]


@pytest.mark.parametrize("selection, printed", [
    (None, ["train", "search-a", "search-b", "print"]),
    (["a"], ["train", "search-a", "print"]),  # search-a reads the model that train writes
    (["b"], ["search-b", "print"]),  # nothing of b needs the model: no training
])
def test_a_condition_selection_runs_only_the_file_steps_it_reads(files, capsys, selection,
                                                                 printed):
    steps = {"train": "{python} -m pyserini_moe.train --output-dir {work}/model",
             "search-a": "{python} -m pyserini_moe.search --encoder {work}/model "
                         "--output {work}/a.trec",
             "search-b": "{python} -m pyserini_moe.search --output {work}/b.trec",
             "print": "{python} -c \"print('outputs unnamed: always run')\""}
    reg = load_regression(write_yaml(files, {"name": "r", "steps": list(steps.values()),
                                             "conditions": [
        condition(files, 0.75, name="a", run="{work}/a.trec"),
        condition(files, 0.75, name="b", run="{work}/b.trec")]}))
    run_regression(reg, files / "work", dry_run=True, only=selection)
    ran = [line for line in capsys.readouterr().out.splitlines() if "$ " in line]
    marks = {"train": "pyserini_moe.train", "search-a": "a.trec", "search-b": "b.trec",
             "print": "always run"}  # a text only that step's command line holds
    assert len(ran) == len(printed)
    assert [name for name, mark in marks.items() if any(mark in line for line in ran)] == printed


@pytest.mark.parametrize("doc, message", [
    ({"conditions": []}, "missing field 'name'"),
    ({"name": "r", "conditions": []}, "'conditions' is empty"),
    ({"name": "r", "scale": "huge", "conditions": [{}]}, "scale must be one of"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r", "qrels": "q", "source": "s",
                                   "metrics": {"ndgc@10": 0.5}}]}, "unknown metric 'ndgc@10'"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r", "qrels": "q",
                                   "metrics": {"ndcg@10": 0.5}}]}, "missing field 'source'"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r", "qrels": "q", "source": "s",
                                   "metrics": {"ndcg@10": "high"}}]}, "expected a number"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r", "qrels": "q", "source": "s",
                                   "metrics": {"ndcg@10": 0.5}}] * 2}, "duplicate condition"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r", "qrels": "q", "source": "s",
                                   "metrics": {"ndcg@10": 1.5}}]}, r"1.5 is outside \[0, 1\]"),
    ({"name": "r", "conditions": [{"name": "c", "run": "r{seed}", "qrels": "q", "source": "s",
                                   "seeds": [1, 2], "metrics": {"ndcg@10": {
                                       "expected": 0.5, "sd": 1.4142, "seeds": [1.5, -0.5],
                                       "tolerance": 0.1}}}]}, r"1.5 is outside \[0, 1\]"),
    ({"name": "r", "requires": {"cpu": 2}, "conditions": [{}]}, "'requires' may only"),
    ({"name": "r", "requires": {"data": ["scifcat"]}, "conditions": [{}]},
     "unknown collection 'scifcat' \\(did you mean 'scifact'\\?\\)"),
    ({"name": "r", "requires": {"data": "scifact"}, "conditions": [{}]}, "must be a list"),
])
def test_schema_errors_name_file_and_field(tmp_path, doc, message):
    path = write_yaml(tmp_path, doc)
    with pytest.raises(RegressionSpecError, match=message) as err:
        load_regression(path)
    assert str(path) in str(err.value)


def test_required_data_paths_and_known_names_are_accepted(tmp_path):
    doc = {"name": "r", "requires": {"data": ["msmarco", "cranfield", "$BEIR_DIR/x/corpus.jsonl",
                                              "/elsewhere/collection.tsv"]},
           "conditions": [{"name": "c", "run": "r", "qrels": "q", "source": "s",
                           "metrics": {"ndcg@10": 0.5}}]}
    assert load_regression(write_yaml(tmp_path, doc)).requires["data"][0] == "msmarco"


def test_main_exit_codes_and_table(files, capsys):
    ok = write_yaml(files, {"name": "good", "conditions": [condition(files, 0.75)]}, "ok.yaml")
    bad = write_yaml(files, {"name": "bad", "conditions": [condition(files, 0.5)]}, "bad.yaml")
    work = ["--work-dir", str(files / "work")]
    assert regress.main([str(ok), *work]) == 0
    out = capsys.readouterr().out
    assert "mrr@10" in out and "OK" in out and (files / "work" / "good" / "report.json").is_file()
    assert regress.main([str(ok), str(bad), *work]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_unmeasured_metrics_are_reported_unset_and_do_not_fail(files, capsys):
    pending = write_yaml(files, {"name": "new", "conditions": [condition(files, None)]},
                         "new.yaml")
    reg = load_regression(pending)
    rows, _ = run_regression(reg, files / "work")
    assert statuses(rows) == ["UNSET"] and rows[0].measured == pytest.approx(0.75)
    assert regress.main([str(pending), "--work-dir", str(files / "work")]) == 0
    out = capsys.readouterr().out
    assert "UNSET" in out and "0.7500" in out and "no expected value" in out


def test_main_reports_bad_file_without_traceback(tmp_path, capsys):
    from pyserini_moe.cli import run_main

    assert run_main(regress.main, [str(tmp_path / "missing.yaml")]) == 2
    assert "regression file not found" in capsys.readouterr().err


def test_shipped_regression_files_are_valid():
    """Every YAML in regressions/ validates (paper-scale ones included)."""
    files = sorted((Path(__file__).resolve().parents[2] / "regressions").glob("*.yaml"))
    assert files
    for f in files:
        assert load_regression(f).conditions


# DPR-style answer accuracy: q0 finds "Paris" at rank 2, q1 never finds "prophet", q2 (CuratedTREC
# style regex) at rank 1: top1 = 1/3, top2 = 2/3.
PASSAGES = ('id\ttext\ttitle\n1\t"Aaron is a prophet"\tAaron\n2\t"Paris is in France"\tParis\n'
            '3\t"The cat sat"\tCat\n')
ANSWERS = ('{"_id": "0", "text": "capital of france", "answers": ["Paris"]}\n'
           '{"_id": "1", "text": "who is aaron", "answers": ["prophet"]}\n'
           '{"_id": "2", "text": "where is paris", "answers": ["Fran[a-z]e"]}\n')
ANSWER_RUN = "0 Q0 3 1 2.0 t\n0 Q0 2 2 1.0 t\n1 Q0 3 1 1.0 t\n2 Q0 2 1 1.0 t\n"


@pytest.fixture
def dpr_files(tmp_path: Path) -> Path:
    (tmp_path / "psgs_w100.tsv").write_text(PASSAGES)
    (tmp_path / "answers.jsonl").write_text(ANSWERS)
    (tmp_path / "run.trec").write_text(ANSWER_RUN)
    return tmp_path


def answer_condition(files: Path, **extra) -> dict:
    return {"name": extra.pop("name", "acc"), "run": str(files / "run.trec"),
            "answers": str(files / "answers.jsonl"), "passages": str(files / "psgs_w100.tsv"),
            "regex": True, "metrics": {"top1": 1 / 3, "top2": 2 / 3}, "tolerance": 0.001,
            "source": "hand-computed", **extra}


def test_answer_accuracy_condition(dpr_files):
    reg = load_regression(write_yaml(dpr_files, {"name": "r", "conditions": [
        answer_condition(dpr_files),
        answer_condition(dpr_files, name="plain-match", regex=False, metrics={"top2": 1 / 3})]}))
    rows, _ = run_regression(reg, dpr_files / "work")
    assert statuses(rows) == ["OK", "OK", "OK"]
    assert [r.metric for r in rows] == ["top1", "top2", "top2"]


def test_answer_accuracy_with_wrong_passages_is_error(dpr_files):
    (dpr_files / "other.tsv").write_text("id\ttext\ttitle\n1\tx\tX\n")
    reg = load_regression(write_yaml(dpr_files, {"name": "r", "conditions": [
        answer_condition(dpr_files, passages=str(dpr_files / "other.tsv"))]}))
    rows, _ = run_regression(reg, dpr_files / "work")
    assert set(statuses(rows)) == {"ERROR"} and "not in it" in rows[0].note


@pytest.mark.parametrize("change, message", [
    ({"qrels": "q.txt"}, "exactly one of 'qrels'"),
    ({"passages": None}, "missing field 'passages'"),
    ({"metrics": {"ndcg@10": 0.5}}, "'ndcg@10': a condition with 'answers' measures top-k"),
    ({"metrics": {"top0": 0.5}}, "'top0'"),
    ({"regex": "yes"}, "'regex' must be true or false"),
])
def test_answer_condition_schema_errors(tmp_path, change, message):
    cond = {k: v for k, v in {**answer_condition(tmp_path), **change}.items() if v is not None}
    path = write_yaml(tmp_path, {"name": "r", "conditions": [cond]})
    with pytest.raises(RegressionSpecError, match=message) as err:
        load_regression(path)
    assert str(path) in str(err.value) and "condition 'acc'" in str(err.value)


def test_topk_metric_with_qrels_is_rejected(files):
    path = write_yaml(files, {"name": "r", "conditions": [
        condition(files, 0.75, metrics={"top20": 0.5})]})
    with pytest.raises(RegressionSpecError, match="needs 'answers' and 'passages'"):
        load_regression(path)
    path = write_yaml(files, {"name": "r", "conditions": [
        condition(files, 0.75, regex=True)]})
    with pytest.raises(RegressionSpecError, match="'regex' goes with 'answers'"):
        load_regression(path)


def seeded(files: Path, metrics: dict, seeds: list[int], **extra) -> dict:
    """A condition whose steps write one run per seed: seed 1 finds q2's doc at rank 2, seed 2
    at rank 1 (MRR@10 0.75 and 1.0)."""
    ranks = {1: RUN, 2: RUN.replace("q2 Q0 d1 1 3.0", "q2 Q0 d1 1 1.0")}
    write = ("{python} -c \"import sys, shutil; shutil.copy(sys.argv[1] + '/run-s{seed}.trec', "
             "'{work}/made-s{seed}.trec')\" " + str(files))
    for seed, text in ranks.items():
        (files / f"run-s{seed}.trec").write_text(text)
    return {"name": "seeded", "seeds": seeds, "steps": [write], "run": "{work}/made-s{seed}.trec",
            "qrels": str(files / "qrels.txt"), "metrics": metrics, "source": "hand-computed",
            **extra}


def test_a_multi_seed_condition_runs_every_seed_and_checks_the_mean(files, capsys):
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        seeded(files, spec, [1, 2])]}))
    check = reg.conditions[0].checks[0]
    # 2 seeds: 1.96 * 0.1768 * sqrt(2 / 2) = 0.3465
    assert check.seeds == (0.75, 1.0) and check.tolerance == pytest.approx(0.3465)
    rows, _ = run_regression(reg, files / "work")
    assert statuses(rows) == ["OK"]
    assert rows[0].measured == pytest.approx(0.875)
    assert rows[0].seeds == {1: pytest.approx(0.75), 2: pytest.approx(1.0)}
    assert rows[0].sd == pytest.approx(0.1768, abs=1e-4)
    assert (files / "work" / "made-s1.trec").is_file() and (files / "work" / "made-s2.trec").is_file()
    from pyserini_moe.lab.regress import format_table

    table = format_table(rows, {})
    assert "mean of 2 seeds, sd 0.1768: 1: 0.7500, 2: 1.0000" in table
    assert "tolerance 'spread'" in table
    # the mean against the file: one seed alone (0.75) would fail a tighter file
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [seeded(files, {
        "mrr@10": {"expected": 0.95, "sd": 0.0707, "seeds": [0.9, 1.0], "tolerance": 0.01}},
        [1, 2])]}, name="tight.yaml"))
    assert statuses(run_regression(reg, files / "work")[0]) == ["FAIL"]


def test_dry_run_prints_each_seed_s_steps(files, capsys):
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        seeded(files, {"mrr@10": None}, [7, 8])]}))
    run_regression(reg, files / "work", dry_run=True)
    out = capsys.readouterr().out
    assert "made-s7.trec" in out and "made-s8.trec" in out and "{seed}" not in out


@pytest.mark.parametrize("change, message", [
    ({"seeds": [1, 1]}, "distinct integers"),
    ({"seeds": []}, "distinct integers"),
    ({"run": "{work}/made.trec"}, "needs '{seed}' in its run"),
    ({"metrics": {"mrr@10": 0.8}}, "records each seed's value"),
    ({"metrics": {"mrr@10": {"expected": 0.8, "sd": 0.1768, "seeds": [0.75, 1.0]}}},
     "is not the mean of its seeds"),
    ({"metrics": {"mrr@10": {"expected": 0.875, "sd": 0.1, "seeds": [0.75, 1.0]}}},
     "is not the standard deviation"),
    ({"metrics": {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0, 1.0]}}},
     "3 value"),
])
def test_multi_seed_rows_are_checked_for_consistency(files, change, message):
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0]}}
    doc = {"name": "r", "conditions": [{**seeded(files, spec, [1, 2]), **change}]}
    with pytest.raises(RegressionSpecError, match=message.replace("{", "\\{").replace("}", "\\}")):
        load_regression(write_yaml(files, doc))


def test_seed_placeholder_without_seeds_is_refused(files):
    doc = {"name": "r", "conditions": [condition(files, 0.75, run="{work}/x-s{seed}.trec")]}
    with pytest.raises(RegressionSpecError, match="names no 'seeds'"):
        load_regression(write_yaml(files, doc))
    doc = {"name": "r", "conditions": [condition(files, None, tolerance="spread")]}
    with pytest.raises(RegressionSpecError, match="needs the values of at least 2 seeds"):
        load_regression(write_yaml(files, doc))


def test_two_queues_share_a_condition_s_seeds_then_evaluate_only_checks_the_mean(files):
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        seeded(files, spec, [1, 2])]}))
    rows, _ = run_regression(reg, files / "work", only_seeds=[2])
    assert statuses(rows) == ["SEEDS"] and rows[0].seeds == {2: pytest.approx(1.0)}
    assert not (files / "work" / "made-s1.trec").exists()
    run_regression(reg, files / "work", only_seeds=[1])
    rows, _ = run_regression(reg, files / "work", evaluate_only=True)
    assert statuses(rows) == ["OK"] and rows[0].measured == pytest.approx(0.875)


def test_seed_placeholder_in_the_file_steps_is_refused(files):
    doc = {"name": "r", "steps": ["{python} -c pass {seed}"], "conditions": [condition(files, 0.75)]}
    with pytest.raises(RegressionSpecError, match="file's own steps"):
        load_regression(write_yaml(files, doc))


# --- per-seed values of the wrong YAML type, sd without seeds, {seed} in qrels

@pytest.mark.parametrize("values, message", [
    (0.5, "in the order of the condition's seeds, got float 0.5"),  # not a traceback
    ({1: 0.75, 2: 1.0}, "got dict"),  # the seed ids must not be read as the values
    ("0.75 1.0", "got str"),  # not read letter by letter
])
def test_per_seed_values_must_be_a_list(files, values, message):
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": values}}
    doc = {"name": "r", "conditions": [seeded(files, spec, [1, 2])]}
    with pytest.raises(RegressionSpecError, match=rf"mrr@10\.seeds: expected a list.*{message}"):
        load_regression(write_yaml(files, doc))


def test_an_sd_without_seeds_is_refused(files):  # not accepted and read nowhere
    doc = {"name": "r", "conditions": [condition(
        files, None, metrics={"mrr@10": {"expected": 0.75, "sd": 0.5}})]}
    with pytest.raises(RegressionSpecError, match="only a condition with 'seeds' records an sd"):
        load_regression(write_yaml(files, doc))


def test_an_unmeasured_metric_of_a_spread_condition_is_told_its_way_out(files):
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0]},
            "ndcg@10": {"expected": None}}
    doc = {"name": "r", "conditions": [seeded(files, spec, [1, 2], tolerance="spread")]}
    with pytest.raises(RegressionSpecError, match=r"takes its own tolerance \(\{expected: null, "
                                                  r"tolerance: 0\.01\}\)"):
        load_regression(write_yaml(files, doc))
    spec["ndcg@10"]["tolerance"] = 0.01
    reg = load_regression(write_yaml(files, doc, name="ok.yaml"))
    assert [c.expected for c in reg.conditions[0].checks] == [0.875, None]


def test_qrels_may_name_the_seed(files):  # the path is not read without the seed
    for seed in (1, 2):
        (files / f"qrels-s{seed}.txt").write_text(QRELS)
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    doc = {"name": "r", "conditions": [seeded(files, spec, [1, 2],
                                              qrels=str(files / "qrels-s{seed}.txt"))]}
    rows, _ = run_regression(load_regression(write_yaml(files, doc)), files / "work")
    assert statuses(rows) == ["OK"]
    doc = {"name": "r", "conditions": [condition(files, 0.75, qrels=str(files / "q-{seed}.txt"))]}
    with pytest.raises(RegressionSpecError, match="names no 'seeds'"):
        load_regression(write_yaml(files, doc, name="unseeded.yaml"))


def test_each_seed_s_per_query_values_are_kept_for_the_verdicts(files, capsys):
    # runs and models stay on one machine; the per-query values the test over seeds reads are
    # kept (with --work-dir: in <work-dir>/per-query/<file>/), one file a seed
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    path = write_yaml(files, {"name": "r", "conditions": [seeded(files, spec, [1, 2])]})
    from pyserini_moe.cli import run_main

    assert run_main(regress.main, [str(path), "--work-dir", str(files / "w")]) == 0
    kept = files / "w" / "per-query" / "r"
    assert sorted(p.name for p in kept.iterdir()) == ["seeded.s1.tsv", "seeded.s2.tsv"]
    assert (kept / "seeded.s1.tsv").read_text().splitlines() == [
        "run\tqid\tmrr@10", "seeded\tq1\t1.000000", "seeded\tq2\t0.500000"]
    assert (kept / "seeded.s2.tsv").read_text().splitlines()[2] == "seeded\tq2\t1.000000"
    # a one-seed condition (no seeds) keeps nothing: it is the same run every time
    path = write_yaml(files, {"name": "plain", "conditions": [condition(files, 0.75)]},
                      name="plain.yaml")
    assert run_main(regress.main, [str(path), "--work-dir", str(files / "w")]) == 0
    assert not (files / "w" / "per-query" / "plain").exists()


def test_evaluate_only_measures_a_seed_whose_run_is_gone_from_its_kept_values(files, capsys):
    # seeds trained in other sittings: the run of seed 1 went with its machine, its per-query
    # values were kept; seed 2's run is here. One row, without training seed 1 again.
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        seeded(files, spec, [1, 2])]}))
    work, keep = files / "work", files / "kept"
    run_regression(reg, work, keep=keep)
    (work / "made-s1.trec").unlink()
    rows, _ = run_regression(reg, work, evaluate_only=True, keep=keep)
    assert statuses(rows) == ["OK"] and rows[0].seeds == {1: pytest.approx(0.75),
                                                          2: pytest.approx(1.0)}
    assert "seeded seed 1: no run" in capsys.readouterr().err
    assert (keep / "seeded.s1.tsv").is_file()  # read, not rewritten from nothing
    (keep / "seeded.s1.tsv").unlink()  # neither run nor kept values: the seed is not measured
    rows, _ = run_regression(reg, work, evaluate_only=True, keep=keep)
    assert statuses(rows) == ["ERROR"]


def test_a_page_step_reads_the_kept_per_query_values_of_every_seed(files):
    # {kept}: the file's folder of kept per-query values, whichever sitting trained each seed
    spec = {"mrr@10": {"expected": 0.875, "sd": 0.1768, "seeds": [0.75, 1.0],
                       "tolerance": "spread"}}
    page = ("{python} -c \"import glob, sys; open(sys.argv[2], 'w').write("
            "' '.join(sorted(p.rsplit('/', 1)[1] for p in glob.glob(sys.argv[1]))))\" "
            "'{kept}/seeded.s?.tsv' '{work}/page.txt'")
    reg = load_regression(write_yaml(files, {"name": "r", "conditions": [
        seeded(files, spec, [1, 2]),
        condition(files, 0.75, name="page", steps=[page])]}))
    rows, _ = run_regression(reg, files / "work", keep=files / "kept")
    assert statuses(rows) == ["OK", "OK"]
    assert (files / "work" / "page.txt").read_text() == "seeded.s1.tsv seeded.s2.tsv"


@pytest.mark.parametrize("field,name", [("file", "../escape"), ("condition", "../../x"),
                                        ("condition", "a/b"), ("file", "x y")])
def test_names_that_would_leave_the_work_folder_are_refused(files, tmp_path, field, name) -> None:
    """A name becomes folders and files under --work-dir and regressions/per-query/: "../x"
    wrote outside it."""
    doc = {"name": "ok", "conditions": [condition(files, 0.5)]}
    if field == "file":
        doc["name"] = name
    else:
        doc["conditions"][0]["name"] = name
    with pytest.raises(RegressionSpecError, match="letters, digits and"):
        load_regression(write_yaml(tmp_path, doc))


def test_record_refuses_a_file_it_cannot_write_before_running(files, tmp_path, capsys,
                                                             monkeypatch) -> None:
    """--record found a read-only file system only after the whole evaluation."""
    import os

    from pyserini_moe.cli import run_main
    from pyserini_moe.cli.regress import main

    path = write_yaml(tmp_path, {"name": "ro", "conditions": [condition(files, 0.5)]})
    real = os.statvfs

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly() if str(p) == str(tmp_path)
                        else real(p))
    assert run_main(main, [str(path), "--record", "--work-dir", str(tmp_path / "w")]) == 2
    assert "cannot be written here" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_record_through_a_link_is_refused_before_any_work(tmp_path, capsys, files) -> None:
    """A file given through a symbolic link was refused by the atomic rewrite only after every
    step had run."""
    from pyserini_moe.cli import run_main
    from pyserini_moe.cli.regress import main

    path = write_yaml(tmp_path, {"name": "ln", "conditions": [condition(files, 0.5)]})
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    assert run_main(main, [str(link), "--record", "--work-dir", str(tmp_path / "w")]) == 2
    assert f"--record rewrites {link}, a symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
