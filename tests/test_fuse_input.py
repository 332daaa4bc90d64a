"""Unusual input to the ``fuse`` command (``python -m pyserini_moe.fuse``,
:mod:`pyserini_moe.cli.fuse`): empty, missing, doubled or rank-only runs, settings the
method ignores or tuning would replace, non-finite numbers, and dev runs that are copies of
the fused runs or miss the judged queries; each is one ``error:`` line or one warning."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.cli import fuse, run_main
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.runs import read_trec_run, write_trec_run
from tests.helpers import exit_code, last_err_line, one_error_line, run_qrels_files

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("alpha", ["-1", "-0.5"])
def test_a_negative_hybrid_weight_is_refused(tmp_path, capsys, alpha) -> None:
    f = run_qrels_files(tmp_path)
    code = run_main(fuse.main, ["--runs", str(f / "run.trec"), str(f / "run.trec"), "--method",
                                "hybrid", "--alpha", alpha, "--output", str(f / "h.trec")])
    assert code == 2 and "--alpha must be >= 0" in last_err_line(capsys)
    assert not (f / "h.trec").exists()


def test_hybrid_of_three_runs_is_refused_before_they_are_read(tmp_path, capsys) -> None:
    """Its warnings about the runs' queries and "fusing 3 runs" came before the refusal."""
    for name, qid in (("a", "q1"), ("b", "q2"), ("c", "q3")):
        (tmp_path / f"{name}.trec").write_text(f"{qid} Q0 d1 1 3.0 t\n")
    code = run_main(fuse.main, ["--runs", *(str(tmp_path / f"{n}.trec") for n in "abc"),
                                "--method", "hybrid", "--output", str(tmp_path / "h.trec")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        "error: hybrid fuses exactly two runs: dense (or any model) first, sparse second"]


@pytest.mark.parametrize("method", ["rrf", "came_sum", "norm_max", "hybrid", "combsum"])
def test_an_empty_run_is_refused(tmp_path: Path, capsys, method: str) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    (tmp_path / "empty.trec").write_text("\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "empty.trec"),
                                "--method", method, "--output", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == (f"error: {tmp_path / 'empty.trec'}: the run is empty: "
                                       "nothing to fuse (did its search fail?)\n")


def test_output_directory_through_the_real_command(tmp_path: Path) -> None:
    """The user's report: --output naming a folder deleted it. Now argparse refuses it."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "keep.trec").write_text("precious")
    proc = subprocess.run([sys.executable, "-m", "pyserini_moe.fuse", "--runs",
                           str(tmp_path / "a.trec"), str(tmp_path / "a.trec"), "--method", "rrf",
                           "--output", str(runs)], capture_output=True, text=True)
    assert proc.returncode == 2 and "is a directory" in proc.stderr.splitlines()[-1]
    assert (runs / "keep.trec").read_text() == "precious"


def test_an_output_that_is_one_of_the_inputs_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\n")
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(tmp_path / "a.trec")])
    assert code == 2 and "is also an input of this command" in capsys.readouterr().err
    assert (tmp_path / "a.trec").read_text() == "q1 Q0 d1 1 3.0 t\n"


def test_runs_over_different_queries_are_fused_with_one_warning(tmp_path: Path, capsys) -> None:
    """Runs of different query sets (another split, a failed search) fused silently."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\nq3 Q0 d1 1 2.0 t\nq4 Q0 d1 1 2.0 t\n")
    out = tmp_path / "fused.trec"
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"warning: the runs hold different queries ({tmp_path / 'a.trec'}: 2, "
                        f"{tmp_path / 'b.trec'}: 3; 4 in all); a query missing from a run is "
                        "fused from the others"]
    assert {line.split()[0] for line in out.read_text().splitlines()} == {"q1", "q2", "q3", "q4"}
    (tmp_path / "c.trec").write_text("q1 Q0 d3 1 1.0 t\nq2 Q0 d3 1 1.0 t\n")
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "c.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err  # the same queries: nothing to say


@pytest.mark.parametrize("method, extra, flags", [
    ("rrf", ["--weights", "1", "2"], "--weights"),
    ("combsum", ["--rrf-k", "10"], "--rrf-k"),
    ("came_sum", ["--alpha", "0.5", "--weight-on-dense"], "--alpha, --weight-on-dense"),
    ("hybrid", ["--norm", "min-max"], "--norm"),
    ("wsum", ["--hybrid-normalize", "--weights", "1", "1"], "--hybrid-normalize"),
])
def test_a_setting_the_method_ignores_is_refused(tmp_path: Path, capsys, method, extra,
                                                 flags) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "a.trec"),
                                "--method", method, "--output", str(out), *extra])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == f"error: --method {method} does not use {flags}\n"


@pytest.mark.parametrize("weights, message", [
    (["1", "-1"], "--weights must be >= 0 and not all 0, got [1.0, -1.0]"),
    (["0", "0"], "--weights must be >= 0 and not all 0, got [0.0, 0.0]"),
])
def test_negative_or_all_zero_weights_are_refused(tmp_path: Path, capsys, weights,
                                                  message) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "a.trec"),
                                "--method", "wsum", "--weights", *weights, "--output", str(out)])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err == f"error: {message}\n"


def test_weights_and_their_tuning_are_not_both_taken(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    a = str(tmp_path / "a.trec")
    code = run_main(fuse.main, ["--runs", a, a, "--method", "wsum", "--weights", "1", "1",
                                "--dev-runs", a, a, "--dev-qrels", str(tmp_path / "qrels.txt"),
                                "--output", str(tmp_path / "f.trec")])
    assert code == 2
    assert "--weights or --dev-runs (which tunes the weights), not both" in capsys.readouterr().err


def test_the_defaults_still_apply(tmp_path: Path) -> None:
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 t\nq1 Q0 d1 2 2.0 t\n")
    out = tmp_path / "f.trec"
    assert run_main(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--method", "rrf", "--output", str(out)]) == 0
    scores = [float(line.split()[4]) for line in out.read_text().splitlines()]
    assert scores == pytest.approx([1 / 61 + 1 / 62] * 2, rel=1e-4)  # k = 60


def test_fuse_hybrid_without_alpha_weighs_bm25_by_a_tenth(tmp_path) -> None:
    dense = {"q1": {"d1": 1.0, "d2": 0.8}}
    sparse = {"q1": {"d2": 10.0, "d1": 1.0}}  # 1.0 + 0.1 * 1 > 0.8 + 0.1 * 10 is false
    write_trec_run(dense, tmp_path / "dense.trec")
    write_trec_run(sparse, tmp_path / "bm25.trec")

    def fused(*extra: str) -> dict:
        out = tmp_path / f"fused{len(extra)}.trec"
        assert fuse.main(["--runs", str(tmp_path / "dense.trec"), str(tmp_path / "bm25.trec"),
                          "--method", "hybrid", "--output", str(out), *extra]) == 0
        return read_trec_run(out)

    assert fused() == fused("--alpha", "0.1")
    assert fused()["q1"] == pytest.approx({"d1": 1.1, "d2": 1.8})


# --- fuse: tuning on dev runs ---------------------------------------------------------------------


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
    """Hybrid and linear "tuned" on all-zero scores (linear dropped the first run); wsum
    died in ranx with "max() arg is an empty sequence"."""
    argv = fuse_argv(fuse_files, method, ("other-d.trec", "other-b.trec"), *extra)
    assert error_line(fuse.main, argv, capsys) == (
        f"error: --dev-runs {fuse_files / 'other-d.trec'} holds none of the 3 queries the dev "
        "qrels judge: tuning would score it 0 under every weighting (the dev runs of another "
        "split?)")
    assert not (fuse_files / "f.trec").exists()


def test_dev_runs_missing_a_judged_query_get_the_coverage_warning(fuse_argv, fuse_files, capsys) -> None:
    """The dense dev run lacks judged q4, which counted as its miss in silence; the
    same runs given as --runs get "the runs hold different queries"."""
    assert run_main(fuse.main, fuse_argv(fuse_files, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"warning: the dev runs hold different judged queries ({fuse_files / 'dev-d.trec'}: 1, "
        f"{fuse_files / 'dev-b.trec'}: 2; 2 in all, of 3 in --dev-qrels); a judged query missing "
        "from a dev run scores as that system's miss, which biases the tuning against it"]


# --- fuse --alpha -inf ----------------------------------------------------------------------------


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


@pytest.mark.parametrize("method", ["combsum", "hybrid", "came_sum"])
def test_fuse_refuses_a_rank_only_run_for_a_method_that_adds_scores(tmp_path, method, error_line,
                                                                    capsys) -> None:
    """An MS MARCO run's 1/rank was added to another run's BM25 scores."""
    from pyserini_moe import fuse as fuse_cli

    (tmp_path / "a.tsv").write_text("q1\td1\t1\nq1\td2\t2\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.1 bm25\nq1 Q0 d1 2 2.0 bm25\n")
    argv = ["--runs", str(tmp_path / "a.tsv"), str(tmp_path / "b.trec"), "--output",
            str(tmp_path / "f.trec")]
    line = error_line(fuse_cli.main, [*argv, "--method", method], capsys)
    assert "is an MS MARCO run (qid docid rank: no scores)" in line
    assert not (tmp_path / "f.trec").exists()
    assert fuse_cli.main([*argv, "--method", "rrf"]) == 0  # ranks are all rrf reads


def test_fuse_refuses_an_empty_run_tag(tmp_path, error_line, capsys) -> None:
    """``fuse --run-tag ''`` was replaced by fuse-METHOD."""
    from pyserini_moe import fuse as fuse_cli

    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d1 1 3.0 {name}\n")
    line = error_line(fuse_cli.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                      "--output", str(tmp_path / "f.trec"), "--run-tag", ""],
                      capsys)
    assert "run tag ''" in line


# --- fuse: tuning with trec_eval's metric names, dev runs out of order or copied ------------------


@pytest.mark.parametrize("metric", ["ndcg_cut.10", "P.10", "recip_rank", "map_cut.100",
                                    "recall.100"])
def test_wsum_tunes_on_trec_eval_metric_names(fuse_argv, runs, capsys, metric) -> None:
    """``--metric ndcg_cut.10`` (or ``P.10``), which eval takes, died in ranx with
    "Metric ndcg_cut.10 not supported"."""
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"),
                                     "--metric", metric)) == 0
    assert "tuned on dev: " in capsys.readouterr().err
    assert (runs / "f.trec").is_file()


def test_dev_runs_whose_tags_are_the_runs_in_another_order_are_warned_of(fuse_argv, runs, capsys) -> None:
    """Dev runs tagged bm25, dense against --runs dense, bm25 were tuned and applied by
    position without a word."""
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-b.trec", "dev-d.trec"))) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == [
        "warning: the --dev-runs' run tags (bm25, dense) are those of --runs (dense, bm25) in "
        "another order: --dev-runs pair with --runs by position, so the tuned values would go "
        "to the wrong runs; list the dev runs in the order of --runs"]
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert "warning:" not in capsys.readouterr().err


@pytest.mark.parametrize("method", ["hybrid", "wsum", "linear"])
def test_dev_runs_that_are_copies_of_the_fused_runs_are_refused(fuse_argv, runs, capsys, error_line,
                                                                method) -> None:
    """``cp`` copies of the --runs files passed the path-only "also fused" check and
    tuned on the test queries."""
    shutil.copy(runs / "d.trec", runs / "copy-d.trec")
    shutil.copy(runs / "b.trec", runs / "copy-b.trec")
    (runs / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    assert error_line(fuse.main, fuse_argv(runs, method, ("copy-d.trec", "copy-b.trec")), capsys) == (
        f"error: --dev-runs {runs / 'copy-d.trec'} holds the same rankings as --runs "
        f"{runs / 'd.trec'}: tuning on a copy of a run being fused fits it to its own queries; "
        "give the same systems' runs on dev queries")
    assert not (runs / "f.trec").exists()


# --- fuse: copies of the fused runs as dev runs ---------------------------------------------------


@pytest.fixture
def split_runs(tmp_path: Path) -> Path:
    """Test runs of q1-q2 (dense, bm25), dev runs of q3-q4 and their qrels."""
    (tmp_path / "d.trec").write_text("q1 Q0 d1 1 3.0 dense\nq1 Q0 d2 2 1.0 dense\n"
                                     "q2 Q0 d2 1 3.0 dense\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 bm25\nq2 Q0 d1 1 3.0 bm25\n")
    (tmp_path / "dev-d.trec").write_text("q3 Q0 d3 1 3.0 dense\nq4 Q0 d4 1 3.0 dense\n")
    (tmp_path / "dev-b.trec").write_text("q3 Q0 d4 1 3.0 bm25\nq4 Q0 d3 1 3.0 bm25\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


def _gzipped(split_runs: Path, name: str) -> str:
    target = split_runs / f"copy-{name}.gz"
    target.write_bytes(gzip.compress((split_runs / name).read_bytes(), mtime=0))
    return target.name


def _retagged(split_runs: Path, name: str) -> str:
    target = split_runs / f"dev-tagged-{name}"
    target.write_text((split_runs / name).read_text().replace(" dense\n", " dev\n")
                      .replace(" bm25\n", " dev\n"))
    return target.name


@pytest.mark.parametrize("copy", [_gzipped, _retagged], ids=["gzipped", "retagged"])
def test_a_dev_run_with_the_rankings_of_a_fused_run_is_refused(fuse_argv, split_runs, capsys,
                                                              error_line, copy) -> None:
    dev = (copy(split_runs, "d.trec"), copy(split_runs, "b.trec"))
    assert error_line(fuse.main, fuse_argv(split_runs, "hybrid", dev), capsys) == (
        f"error: --dev-runs {split_runs / dev[0]} holds the same rankings as --runs {split_runs / 'd.trec'}: "
        "tuning on a copy of a run being fused fits it to its own queries; give the same "
        "systems' runs on dev queries")
    assert not (split_runs / "f.trec").exists()


def test_dev_runs_of_the_fused_queries_judged_on_dev_are_warned_of(fuse_argv, split_runs,
                                                                    capsys) -> None:
    """Dev runs that also rank q1, a fused query, under qrels judging it: tuned on it. One qrels
    file judging both splits is no such case while the dev runs hold q3 and q4 only."""
    (split_runs / "qrels.txt").write_text("q1 0 d1 1\nq3 0 d3 1\nq4 0 d4 1\n")
    assert run_main(fuse.main, fuse_argv(split_runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert "fused queries are judged" not in capsys.readouterr().err
    for name in ("dev-d.trec", "dev-b.trec"):  # another system's ranking of q1 joins the dev runs
        (split_runs / name).write_text((split_runs / name).read_text() + "q1 Q0 d3 1 5.0 dev\n")
    assert run_main(fuse.main, fuse_argv(split_runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert ("warning: 1 of the 2 fused queries are judged in --dev-qrels: tuning on them fits "
            "the fused run to its own queries (are the dev runs and qrels of another split?)"
            in capsys.readouterr().err.splitlines())


@pytest.mark.parametrize("method", ["combsum", "rrf"])
def test_fuse_says_a_missing_run_is_not_found_for_every_method(tmp_path, capsys, error_line,
                                                               method) -> None:
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 1.0 bm25\n")
    missing = tmp_path / "nosuch.trec"
    assert error_line(fuse.main, ["--runs", str(missing), str(tmp_path / "b.trec"), "--method",
                                  method, "--output", str(tmp_path / "f.trec")], capsys) == (
        f"error: run file not found: {missing}")


def _tagged(path: Path, tag: str, qid: str = "q1") -> str:
    path.write_text(f"{qid} Q0 d1 1 2.0 {tag}\n{qid} Q0 d2 2 1.0 {tag}\n")
    return str(path)


@pytest.mark.parametrize(("first", "second", "warned"), [
    ("bm25", "dense", True), ("impact", "fused-came_sum", True), ("Anserini", "Faiss", True),
    ("dense", "bm25", False),
    ("bm25", "impact", False), ("run-a", "run-b", False)])
def test_hybrid_runs_whose_tags_say_sparse_first_are_warned_of(tmp_path, capsys, first, second,
                                                               warned) -> None:
    runs = [_tagged(tmp_path / "a.trec", first), _tagged(tmp_path / "b.trec", second)]
    assert run_main(fuse.main, ["--runs", *runs, "--method", "hybrid", "--output",
                                str(tmp_path / "f.trec")]) == 0
    err = capsys.readouterr().err
    assert ("takes the dense (or model) run first and the sparse run second, but the run tags "
            f"say --runs {runs[0]} is {first} and {runs[1]} {second}" in err) == warned


def test_hybrid_dev_runs_given_sparse_first_are_warned_of(tmp_path, capsys) -> None:
    runs = [_tagged(tmp_path / "d.trec", "Faiss"), _tagged(tmp_path / "b.trec", "Anserini")]
    dev = [_tagged(tmp_path / "dev-b.trec", "bm25", "q3"),
           _tagged(tmp_path / "dev-d.trec", "dense", "q3")]
    (tmp_path / "qrels.txt").write_text("q3 0 d1 1\n")
    assert run_main(fuse.main, ["--runs", *runs, "--method", "hybrid", "--dev-runs", *dev,
                                "--dev-qrels", str(tmp_path / "qrels.txt"), "--output",
                                str(tmp_path / "f.trec")]) == 0
    err = capsys.readouterr().err
    assert f"the run tags say --dev-runs {dev[0]} is bm25 and {dev[1]} dense" in err
    assert "say --runs" not in err


@pytest.mark.parametrize(("method", "norm"), [("hybrid", False), ("came_sum", False),
                                              ("combsum", True)])
def test_the_rank_only_advice_offers_norm_only_where_the_method_takes_it(
        tmp_path, capsys, error_line, method, norm) -> None:
    (tmp_path / "ms.tsv").write_text("q1\td1\t1\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 1.0 bm25\n")
    line = error_line(fuse.main, ["--runs", str(tmp_path / "ms.tsv"), str(tmp_path / "b.trec"),
                                  "--method", method, "--output", str(tmp_path / "f.trec")],
                      capsys)
    assert ("or --norm rank" in line) == norm and "use a rank fusion" in line


def test_fuse_takes_pyserini_fusion_flags(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    a.write_text("q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq1 Q0 d3 3 1.0 t\n")
    b.write_text("q1 Q0 d2 1 9.0 t\nq1 Q0 d3 2 8.0 t\n")
    out = tmp_path / "fused.trec"
    assert run_main(fuse_cli.main, ["--runs", str(a), str(b), "--rrf.k", "10", "--k", "2",
                                    "--depth", "1", "--runtag", "mine", "--output",
                                    str(out)]) == 0  # no --method: rrf, as Pyserini's fusion
    # depth 1: d1 (a's first) and d2 (b's first) only, each 1 / (10 + 1)
    assert read_trec_run(out) == {"q1": pytest.approx({"d1": 1 / 11, "d2": 1 / 11})}
    assert {line.split()[-1] for line in out.read_text().splitlines()} == {"mine"}
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "fusing 2 runs (1 query) with rrf"  # before the work, what it does
    code = run_main(fuse_cli.main, ["--runs", str(a), str(b), "--run-tag", "two words",
                                    "--output", str(tmp_path / "t.trec")])
    assert code == 2 and "the last column of a TREC run is one word" in one_error_line(capsys)
    assert not (tmp_path / "t.trec").exists()


@pytest.mark.parametrize("argv", [["--method", "hybrid", "--alpha", "nan"],
                                  ["--method", "wsum", "--weights", "nan", "1"],
                                  ["--method", "linear", "--weights", "inf", "1"]])
def test_fuse_refuses_non_finite_alpha_and_weights(tmp_path: Path, capsys, argv: list[str]) -> None:
    """Runs of nan / inf scores that fuse and eval then refused."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d{name} 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--output", str(out), *argv])
    assert code == 2 and not out.exists()
    assert "expected a finite number" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "words"), [
    (["--k", "0"], "argument --hits/--k: must be >= 1, got 0"),
    (["--depth", "0"], "argument --candidates/--depth: must be >= 1, got 0"),
    (["--k", "3", "--hits", "5"], "--k 3 and --hits 5 set the same thing; give one"),
    (["--runtag", "a", "--run-tag", "b"], "--runtag a and --run-tag b set the same thing"),
])
def test_fuse_names_the_spelling_typed_and_refuses_two_values(tmp_path: Path, capsys,
                                                               argv: list[str], words: str) -> None:
    """Errors named --hits for --k; --k 3 --hits 5 kept 5 in silence."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d{name} 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                 "--method", "rrf", "--output", str(out), *argv])
    assert code == 2 and not out.exists() and words in capsys.readouterr().err
    assert exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                 "--method", "rrf", "--output", str(out), "--k", "5",
                                 "--hits", "5"]) == 0  # the same value twice is no conflict


@pytest.mark.parametrize(("table", "warned"), [
    ({0.5: 0.30, 0.6: 0.25, 0.7: 0.20}, True),    # still rising towards the lower end
    ({0.5: 0.20, 0.6: 0.25, 0.7: 0.30}, True),    # towards the upper end
    ({0.5: 0.20, 0.6: 0.30, 0.7: 0.25}, False),   # an inner optimum
    ({0.5: 0.30, 0.6: 0.30, 0.7: 0.30}, False)])  # a level curve: nothing beyond to gain
def test_a_tuned_alpha_at_the_grid_edge_is_said(capsys, table: dict, warned: bool) -> None:
    """Tuning ended at the grid's lowest alpha, still rising, without a word."""
    from pyserini_moe.cli.fuse import _say_if_at_the_edge

    _say_if_at_the_edge(max(table, key=table.__getitem__), table)
    assert ("is at the end of the grid (0.5..0.7)" in capsys.readouterr().err) == warned


def fuse_error(ws: Path, capsys, *extra: str, runs: tuple[str, ...] = ("a.trec", "b.trec")) -> str:
    """fuse's one error line (exit 2, no output written)."""
    out = ws / "fused.trec"
    code = run_main(fuse.main, ["--runs", *(str(ws / r) for r in runs), "--output", str(out),
                                *extra])
    assert code == 2 and not out.exists()
    return capsys.readouterr().err.strip()


def dev(ws: Path) -> list[str]:
    return ["--dev-runs", str(ws / "dev-a.trec"), str(ws / "dev-b.trec"), "--dev-qrels",
            str(ws / "qrels.txt")]


@pytest.mark.parametrize("method", ["rrf", "combsum", "came_sum"])
def test_fuse_refuses_a_metric_for_a_method_that_tunes_nothing(dev_ws, capsys, method) -> None:
    """--metric (even bogus@@) was accepted and ignored by every method."""
    assert fuse_error(dev_ws, capsys, "--method", method, "--metric", "bogus@@") == \
        f"error: --method {method} does not use --metric"


def test_fuse_refuses_a_metric_without_dev_runs(dev_ws, capsys) -> None:
    """A tuning method given --metric but nothing to tune on."""
    assert fuse_error(dev_ws, capsys, "--method", "hybrid", "--metric", "map") == (
        "error: --metric is the metric maximised on dev: give --dev-runs and --dev-qrels with "
        "it, or leave it out")


def test_fuse_checks_the_dev_metric_before_reading_a_run(dev_ws, capsys) -> None:
    """A bad metric is named before any run is read (the runs here do not exist)."""
    err = fuse_error(dev_ws, capsys, "--method", "hybrid", "--metric", "bogus@@", "--dev-runs",
                     "nope1", "nope2", "--dev-qrels", "nope3", runs=("nope4", "nope5"))
    assert err.startswith("error: unknown metric 'bogus@@'")


@pytest.mark.parametrize("method", ["rrf", "combmnz"])
def test_fuse_refuses_dev_runs_for_a_method_that_tunes_nothing(dev_ws, capsys, method) -> None:
    """The dev runs and qrels were read, then ignored (the output was plain rrf)."""
    assert fuse_error(dev_ws, capsys, "--method", method, *dev(dev_ws)) == \
        f"error: --method {method} does not use --dev-runs, --dev-qrels"


@pytest.mark.parametrize("alpha", ["0.3", "0"])
def test_fuse_refuses_an_alpha_that_tuning_would_replace(dev_ws, capsys, alpha) -> None:
    """The given alpha was replaced by the tuned one without a word."""
    assert fuse_error(dev_ws, capsys, "--method", "hybrid", "--alpha", alpha, *dev(dev_ws)) == \
        "error: --alpha or --dev-runs (which tunes alpha), not both"


def test_fuse_refuses_an_alpha_of_zero_for_a_method_without_alpha(dev_ws, capsys) -> None:
    """--alpha 0 equals False: it slipped through the check of settings a method ignores."""
    assert fuse_error(dev_ws, capsys, "--method", "came_sum", "--alpha", "0") == \
        "error: --method came_sum does not use --alpha"


def test_fuse_tunes_alpha_on_its_dev_metric_and_keeps_pyserinis_default_otherwise(dev_ws, capsys):
    out = dev_ws / "fused.trec"
    argv = ["--runs", str(dev_ws / "a.trec"), str(dev_ws / "b.trec"), "--output", str(out),
            "--method", "hybrid"]
    assert run_main(fuse.main, [*argv, *dev(dev_ws), "--metric", "map"]) == 0
    assert "tuned on dev: " in capsys.readouterr().err
    assert run_main(fuse.main, argv) == 0
    # no dev runs, no --alpha: Pyserini's 0.1; q1: d1 = 3 + 0.1 * 8, d2 = 2 + 0.1 * 9
    scores = {line.split()[2]: float(line.split()[4]) for line in out.read_text().splitlines()
              if line.startswith("q1 ")}
    assert scores == pytest.approx({"d1": 3.8, "d2": 2.9}, abs=1e-4)


def test_fuse_refuses_one_run_given_twice(dev_ws, capsys) -> None:
    """The same run twice was fused (weighing it double) without a word."""
    a = str(dev_ws / "a.trec")
    assert fuse_error(dev_ws, capsys, "--method", "rrf", runs=("a.trec", "a.trec")) == \
        f"error: --runs {a} is given twice: give each once"
    spelt = f"{dev_ws}/./a.trec"
    (dev_ws / "link.trec").symlink_to(dev_ws / "a.trec")
    for other in (spelt, str(dev_ws / "link.trec")):
        code = run_main(fuse.main, ["--runs", a, other, "--method", "rrf", "--output",
                                    str(dev_ws / "fused.trec")])
        assert code == 2
        assert capsys.readouterr().err.strip() == \
            f"error: --runs {a} and --runs {other} are one run file: give each once"


def test_fuse_refuses_one_dev_run_given_twice(dev_ws, capsys) -> None:
    out = dev_ws / "fused.trec"
    code = run_main(fuse.main, ["--runs", str(dev_ws / "a.trec"), str(dev_ws / "b.trec"), "--output",
                                str(out), "--method", "hybrid", "--dev-runs",
                                str(dev_ws / "dev-a.trec"), str(dev_ws / "dev-a.trec"), "--dev-qrels",
                                str(dev_ws / "qrels.txt")])
    assert code == 2 and "--dev-runs " in capsys.readouterr().err


def _runs(two_runs: Path) -> list[str]:
    return ["--runs", str(two_runs / "a.trec"), str(two_runs / "b.trec"), "--output",
            str(two_runs / "f.trec")]


# --- --norm with rrf ------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["min-max", "borda"])
def test_fuse_refuses_a_normalisation_for_rrf(two_runs, capsys, norm, error_line) -> None:
    error = error_line(fuse_cli.main, [*_runs(two_runs), "--method", "rrf", "--norm", norm], capsys)
    assert error == ("error: --method rrf does not use --norm (rrf reads ranks only: no "
                     "normalisation of the scores can change it)")
    assert not (two_runs / "f.trec").exists()


def test_fuse_help_offers_norm_for_score_fusions_only() -> None:
    text = " ".join(fuse_cli.build_parser().format_help().split())
    assert "ranx normalisation for combsum/combmnz/wsum;" in text


# --- a hybrid whose candidates cannot fill --hits -------------------------------------------------


def test_fuse_says_when_the_hybrid_cannot_fill_the_hits(two_runs, capsys) -> None:
    assert run_main(fuse_cli.main, [*_runs(two_runs), "--method", "hybrid", "--candidates", "1",
                                    "--hits", "10"]) == 0
    assert ("warning: each run's top 1 is fused (--candidates): at most 2 hits a query, "
            "not --hits 10") in capsys.readouterr().err
    assert run_main(fuse_cli.main, [*_runs(two_runs), "--method", "hybrid", "--candidates", "5",
                                    "--hits", "10"]) == 0
    assert "warning" not in capsys.readouterr().err
    # every method, not the hybrid only
    assert run_main(fuse_cli.main, [*_runs(two_runs), "--method", "rrf", "--candidates", "1",
                                    "--hits", "5"]) == 0
    assert "at most 2 hits a query, not --hits 5" in capsys.readouterr().err


# --- tuning on the runs fused ---------------------------------------------------------------------


def test_fuse_refuses_dev_runs_that_are_the_runs_fused(two_runs, capsys, error_line) -> None:
    error = error_line(fuse_cli.main, [*_runs(two_runs), "--method", "wsum", "--dev-runs",
                                   f"{two_runs}/./a.trec", str(two_runs / "b.trec"), "--dev-qrels",
                                   str(two_runs / "qrels.txt")], capsys)
    assert error == (f"error: --dev-runs {two_runs}/./a.trec is also fused (--runs {two_runs / 'a.trec'}): "
                     "tuning on the runs being fused fits them to their own queries; give the "
                     "same systems' runs on dev queries")
    assert not (two_runs / "f.trec").exists()


def test_fusion_parameters_that_invert_or_break_it(bm25_ws, tmp_path, capsys) -> None:
    out = tmp_path / "f.trec"
    with pytest.raises(SystemExit):  # argparse: "argument --rrf-k/--rrf.k: must be >= 1"
        fuse.main(["--runs", str(bm25_ws["run"]), str(bm25_ws["other"]), "--method", "rrf", "--rrf-k", "-5",
                   "--output", str(out)])
    assert "--rrf-k/--rrf.k: must be >= 1, got -5" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: one usage line, exit 2
        fuse.main(["--runs", str(bm25_ws["run"]), str(bm25_ws["other"]), "--method", "rrf", "--norm",
                   "banana", "--output", str(out)])
    assert not out.exists()


def test_a_fused_run_inside_an_index_or_a_model_is_refused(tmp_path, capsys) -> None:
    """Accepted, it made the index hold a file its --overwrite then refused as not its own."""
    from pyserini_moe.index.meta import write_meta

    f = run_qrels_files(tmp_path)
    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    code = run_main(fuse.main, ["--runs", str(f / "run.trec"), str(f / "run.trec"), "--method",
                                "rrf", "--output", str(index / "f.trec")])
    assert code == 2 and f"is inside {index}, an index: write it elsewhere" in last_err_line(capsys)
    assert not (index / "f.trec").exists()
