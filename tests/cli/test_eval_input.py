"""Unusual input to the ``eval`` command (:mod:`pyserini_moe.cli.eval`): empty, doubled or
ambiguous runs, qrels of another collection or given as a folder, seed groups that do not
match, outputs that coincide or would replace a user's file, comparison settings with one
run; nothing is scored silently partial and each refusal is one ``error:`` line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.eval import main as eval_main
from pyserini_moe.cli.eval import seed_names
from pyserini_moe.errors import UserError
from tests.helpers import (
    BOM,
    QRELS_HALF,
    RUN_A,
    RUN_B,
    SMALL_RUN,
    err_text,
    last_err_line,
    only_error,
    refused,
    run_qrels_files,
)

pytestmark = pytest.mark.usefixtures("one_thread")

SEED_RUN = "q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"


def test_an_empty_run_is_not_scored_zero(tmp_path, capsys) -> None:
    f = run_qrels_files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "empty.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 2
    assert last_err_line(capsys) == (f"error: {f / 'empty.trec'}: the run is empty: nothing to evaluate "
                                     "(did its search fail?)")


def test_judged_queries_missing_from_the_run_are_said(tmp_path, capsys) -> None:
    f = run_qrels_files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 0
    err = capsys.readouterr().err
    assert "warning: run.trec: 1 of 2 judged queries have no results (e.g. q2); they count as 0" in err


def test_a_headerless_beir_qrels_file_is_named_for_what_it_is(tmp_path, capsys) -> None:
    f = run_qrels_files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "headerless.tsv")]) == 2
    assert "a BEIR qrels TSV starts with its header line" in last_err_line(capsys)


def test_an_eval_output_naming_its_run_is_refused(tmp_path, capsys) -> None:
    f = run_qrels_files(tmp_path)
    code = run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels", str(f / "qrels.txt"),
                                    "--table", str(f / "run.trec")])
    assert code == 2 and "is also an input of this command" in last_err_line(capsys)
    assert (f / "run.trec").read_text() == SMALL_RUN


def test_a_data_variable_naming_a_file_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    """PYSERINI_MOE_DATA naming a file was ignored without a word (a collection name
    then resolved elsewhere, or was downloaded)."""
    f = run_qrels_files(tmp_path)
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(f / "qrels.txt"))
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    "scifact:test"]) == 2
    assert capsys.readouterr().err == (f"error: PYSERINI_MOE_DATA={f / 'qrels.txt'} is a file, "
                                       "not a folder: point it at the folder that holds the "
                                       "collections\n")


def test_qrels_of_another_collection_are_noticed(tmp_path: Path, capsys) -> None:
    from pyserini_moe.cli import run_main
    from pyserini_moe.eval import __main__ as eval_cli

    (tmp_path / "run.trec").write_text("1 Q0 d7 1 3.0 t\n2 Q0 d8 1 2.0 t\n")
    (tmp_path / "other.txt").write_text("1 0 x1 1\n2 0 x2 1\n")  # same query ids, other docs
    (tmp_path / "own.txt").write_text("1 0 d7 1\n2 0 x2 1\n")
    assert run_main(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                    str(tmp_path / "other.txt")]) == 0
    assert "none of its 2 documents for the judged queries is judged in these qrels: are they " \
           "another collection's?" in capsys.readouterr().err
    assert run_main(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                    str(tmp_path / "own.txt")]) == 0
    assert "another collection" not in capsys.readouterr().err


# --- eval seed groups -----------------------------------------------------------------------------


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


# --- eval: a collection folder as qrels, a run twice, depths --------------------------------------


def test_a_collection_folder_given_as_qrels_names_the_split_to_add(tmp_path, error_line,
                                                                   capsys) -> None:
    collection = tmp_path / "tc"
    (collection / "qrels").mkdir(parents=True)
    for split in ("test", "dev"):
        (collection / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    assert error_line(eval_cli.main, ["--run", str(tmp_path / "run.trec"), "--qrels",
                                      str(collection)], capsys) == (
        f"error: qrels {collection} is a folder, not a qrels file: for a collection's qrels give "
        f"COLLECTION:SPLIT, e.g. {collection}:dev (its splits: dev, test)")


def test_one_run_given_twice_is_named_as_such(tmp_path, error_line, capsys) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    assert error_line(eval_cli.main, ["--run", str(run), str(run), "--qrels", "x"], capsys) == (
        f"error: --run {run} is given twice: give each run once")


def test_eval_says_the_depths_of_the_runs_it_compares(tmp_path, capsys) -> None:
    paths = []
    for name, depth in (("short", 2), ("long", 5)):
        path = tmp_path / f"{name}.trec"
        path.write_text("".join(f"{q} Q0 d{i} {i + 1} {10 - i} t\n" for q in ("q1", "q2")
                                for i in range(depth)))
        paths.append(str(path))
    (tmp_path / "qrels.txt").write_text("q1 0 d4 1\nq2 0 d0 1\n")
    assert run_main(eval_cli.main, ["--run", *paths, "--qrels", str(tmp_path / "qrels.txt"),
                                    "--metrics", "recall@5"]) == 0
    assert "(at most short.trec: 2, long.trec: 5): recall@5 then compares" in capsys.readouterr().err


def test_eval_outputs_may_not_coincide(ws, tmp_path, capsys) -> None:
    from pyserini_moe.eval import __main__ as eval_cli  # noqa: PLC0415

    out = str(tmp_path / "x")
    code = run_main(eval_cli.main, ["--run", str(ws["root"] / "run.trec"), "--qrels",
                                    str(ws["root"] / "qrels.txt"), "--output", out, "--table",
                                    out, "--per-query", out])
    assert code == 2 and "one would overwrite the other" in err_text(capsys)
    assert not (tmp_path / "x").exists()


def _trec_eval_agrees(capsys: pytest.CaptureFixture, runs: list[Path], qrels: Path,
                      out: Path) -> None:
    """``eval --trec-eval`` of ``runs``: ranx and trec_eval both score 0.5, no "differs"."""
    assert run_main(eval_cli.main, ["--run", *map(str, runs), "--qrels", str(qrels), "--metrics",
                                    "ndcg@10", "--trec-eval", "--output", str(out)]) == 0
    assert "differs" not in capsys.readouterr().err
    for result in json.loads(out.read_text())["runs"].values():
        assert result["metrics"]["ndcg@10"] == pytest.approx(0.5)
        assert result["trec_eval"]["ndcg@10"] == pytest.approx(0.5)


def test_trec_eval_reads_a_bom_qrels_file_as_ranx_does(bom_ws, capsys) -> None:
    (bom_ws / "qrels-bom.txt").write_bytes(BOM + QRELS_HALF.encode())
    _trec_eval_agrees(capsys, [bom_ws / "run.trec"], bom_ws / "qrels-bom.txt", bom_ws / "o.json")


def test_trec_eval_reads_bom_and_gzipped_runs_as_ranx_does(bom_ws, capsys) -> None:
    _trec_eval_agrees(capsys, [bom_ws / "bom.trec", bom_ws / "run.trec.gz"], bom_ws / "qrels.txt",
                      bom_ws / "o.json")


@pytest.mark.parametrize("spelling", ["out.txt", "sub/../out.txt"])
def test_eval_outputs_naming_one_file_are_refused(bom_ws, capsys, monkeypatch, spelling) -> None:
    monkeypatch.chdir(bom_ws)
    (bom_ws / "sub").mkdir()
    assert run_main(eval_cli.main, ["--run", "run.trec", "--qrels", "qrels.txt", "--output",
                                    "out.txt", "--table", spelling, "--per-query", "out.txt"]) == 2
    assert "give each output its own path" in only_error(capsys)
    assert not (bom_ws / "out.txt").exists()


def test_trec_eval_metric_names_are_read_as_the_tools_own(bom_ws, capsys) -> None:
    out = bom_ws / "o.json"
    names = ["ndcg_cut.10", "P.10", "recall.100", "map", "recip_rank"]
    own = ["ndcg@10", "precision@10", "recall@100", "map", "mrr"]
    values = []
    for metrics in (names, own):
        assert run_main(eval_cli.main, ["--run", str(bom_ws / "run.trec"), "--qrels",
                                        str(bom_ws / "qrels.txt"), "--metrics", *metrics,
                                        "--output", str(out)]) == 0
        values.append(list(json.loads(out.read_text())["runs"]["run.trec"]["metrics"].values()))
    assert values[0] == values[1] and values[0][0] == pytest.approx(0.5)


def eval_argv(ws: Path, *runs: str) -> list[str]:
    return ["--run", *runs, "--qrels", str(ws / "qrels.txt"), "--metrics", "ndcg@10"]


def test_seeds_in_folders_with_one_file_name_are_all_compared(dev_ws, capsys) -> None:
    """'x=DIR/s*/run.trec' (work/detr-s42/run.trec style): a StopIteration traceback."""
    for seed, text in (("s1", RUN_A), ("s2", RUN_B), ("s3", RUN_A.replace("3.0", "0.5"))):
        (dev_ws / seed).mkdir()
        (dev_ws / seed / "run.trec").write_text(text)
    out = dev_ws / "out.json"
    assert run_main(eval_cli.main, [*eval_argv(dev_ws, f"x={dev_ws}/s*/run.trec", str(dev_ws / "b.trec")),
                                    "--output", str(out)]) == 0
    names = list(json.loads(out.read_text())["runs"])
    assert names == [f"x/{dev_ws}/s1/run.trec", f"x/{dev_ws}/s2/run.trec", f"x/{dev_ws}/s3/run.trec",
                     "b.trec"]


def test_a_plain_run_named_like_a_seed_is_refused() -> None:
    """The guard that keeps the names apart: one name for two runs would replace one of them."""
    with pytest.raises(UserError, match="two runs are named 'x/a.trec'"):
        seed_names({"x/a.trec": ["x/a.trec"], "y/a.trec": ["y/a.trec"],
                    "x": ["z/a.trec", "z/b.trec"]})


def test_two_groups_of_the_same_files_are_refused(dev_ws, capsys) -> None:
    """Two groups matching the same files were compared with each other (p = 1)."""
    pattern = f"{dev_ws}/dev-*.trec"
    assert run_main(eval_cli.main, eval_argv(dev_ws, f"a={pattern}", f"b={pattern}")) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run a={dev_ws}/dev-a.trec and --run b={dev_ws}/dev-a.trec are one run file: give "
        "each once")


def test_one_run_under_two_spellings_is_refused(dev_ws, capsys) -> None:
    """Dense.trec and ./dense.trec were compared with each other (p = 1)."""
    spelt = f"{dev_ws}/./a.trec"
    assert run_main(eval_cli.main, eval_argv(dev_ws, str(dev_ws / "a.trec"), spelt)) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run {dev_ws / 'a.trec'} and --run {spelt} are one run file: give each once")


def test_a_stat_test_with_seed_groups_is_refused(dev_ws, capsys) -> None:
    """--stat-test fisher was dropped for the seeded t-test without a word."""
    argv = eval_argv(dev_ws, f"a={dev_ws}/dev-*.trec", str(dev_ws / "b.trec"))
    assert run_main(eval_cli.main, [*argv, "--stat-test", "fisher"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --stat-test fisher: with several seeds the comparison is the t-test over queries "
        "and seeds, not a paired test; leave --stat-test out")
    assert run_main(eval_cli.main, argv) == 0
    assert run_main(eval_cli.main, [*eval_argv(dev_ws, str(dev_ws / "a.trec"), str(dev_ws / "b.trec")),
                                    "--stat-test", "fisher"]) == 0


# --- one measure under several spellings ----------------------------------------------------------


@pytest.mark.parametrize("other", ["nDCG@10", "ndcg@010", "ndcg_cut.10"])
def test_eval_refuses_one_measure_spelt_twice(two_runs, capsys, other, error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(two_runs / "a.trec"), "--qrels",
                                       str(two_runs / "qrels.txt"), "--metrics", "ndcg@10", other],
                       capsys)
    assert error == (f"error: --metrics: 'ndcg@10' and {other!r} are one measure (ndcg@10); "
                     "give it once")


# --- eval's baseline and outputs ------------------------------------------------------------------


def _eval(two_runs: Path, *extra: str) -> int:
    return run_main(eval_cli.main, ["--run", str(two_runs / "a.trec"), str(two_runs / "b.trec"), "--qrels",
                                    str(two_runs / "qrels.txt"), "--metrics", "ndcg@10", *extra])


def test_eval_finds_the_baseline_by_another_spelling_of_its_path(two_runs, capsys) -> None:
    assert _eval(two_runs, "--baseline", f"{two_runs}/./b.trec") == 0
    assert "b.trec (baseline)" in capsys.readouterr().out


def test_eval_keeps_a_users_file_in_the_way_of_an_output(two_runs, capsys) -> None:
    for flag, name in (("--table", "mine.md"), ("--output", "mine.json"),
                       ("--per-query", "mine.tsv")):
        (two_runs / name).write_text("my own notes\n")
        assert _eval(two_runs, flag, str(two_runs / name)) == 2
        assert capsys.readouterr().err == (
            f"error: {flag} {two_runs / name} exists and is not a file eval wrote: eval replaces only "
            "its own earlier output; name another file or move this one\n")
        assert (two_runs / name).read_text() == "my own notes\n"
    outputs = ["--table", str(two_runs / "t.md"), "--output", str(two_runs / "o.json"), "--per-query",
               str(two_runs / "p.tsv")]
    assert _eval(two_runs, *outputs) == 0
    (two_runs / "t.md").write_text((two_runs / "t.md").read_text().replace("### ", "### old "))
    assert _eval(two_runs, *outputs) == 0  # its own earlier outputs: replaced
    assert "old" not in (two_runs / "t.md").read_text()


def test_eval_outputs_named_gz_are_gzip(two_runs) -> None:
    assert _eval(two_runs, "--table", str(two_runs / "t.md.gz"), "--output", str(two_runs / "o.json.gz"),
                 "--per-query", str(two_runs / "p.tsv.gz")) == 0
    assert gzip.decompress((two_runs / "t.md.gz").read_bytes()).startswith(b"### ")
    assert json.loads(gzip.decompress((two_runs / "o.json.gz").read_bytes()))["metrics"] == ["ndcg@10"]
    assert gzip.decompress((two_runs / "p.tsv.gz").read_bytes()).startswith(b"run\tqid\tndcg@10\n")
    assert _eval(two_runs, "--table", str(two_runs / "t.md.gz")) == 0  # its own gzipped page: replaced


# --- eval's comparison settings with one run, --max-p's range -------------------------------------


@pytest.mark.parametrize("extra, flags", [(["--stat-test", "fisher"], "--stat-test sets"),
                                          (["--max-p", "0.01", "--stat-test", "tukey"],
                                           "--stat-test, --max-p set"),
                                          (["--baseline", "a.trec"], "--baseline sets")])
def test_eval_refuses_comparison_settings_with_one_run(run_files, capsys, extra, flags,
                                                       error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(run_files / "a.trec"), "--qrels",
                                       str(run_files / "qrels.txt"), *extra], capsys)
    assert error.startswith(f"error: {flags} how runs are compared, but a.trec is the only run "
                            "given: nothing is compared; add the runs to compare it with")


@pytest.mark.parametrize("value", ["0", "1", "1.5"])
def test_eval_max_p_says_its_range(run_files, capsys, value, error_line) -> None:
    error = error_line(eval_cli.main, ["--run", str(run_files / "a.trec"), str(run_files / "b.trec"),
                                       "--qrels", str(run_files / "qrels.txt"), "--max-p", value],
                       capsys)
    assert error == f"error: --max-p {float(value):g}: must be above 0 and below 1 (e.g. 0.05)"


@pytest.mark.parametrize("lines,message", [
    ("q0 Q0 d1 1 1.0 t\nq0 Q0 d1 2 0.1 t\n", ":2: document 'd1' is listed twice for query 'q0'"),
    ("q0 Q0 d1 1 nan t\n", ":1: score 'nan' is not a finite number"),
])
def test_ambiguous_runs_are_refused(bm25_ws, tmp_path, capsys, lines, message) -> None:
    run = tmp_path / "bad.trec"
    run.write_text(lines)
    refused(eval_cli.main, ["--run", str(run), "--qrels", f"{bm25_ws['corpus']}:test"], message, capsys)


def test_a_seed_glob_that_matches_a_folder_says_so(tmp_path: Path, capsys) -> None:
    from pyserini_moe.cli.eval import main as eval_main

    (tmp_path / "d-s1.trec").write_text(SEED_RUN)
    (tmp_path / "d-sdir.trec").mkdir()
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    refused(eval_main, ["--run", f"d={tmp_path}/d-s*.trec", "--qrels", str(tmp_path / "qrels.txt")],
            "matches the folder", capsys)


def test_two_files_of_one_seed_are_refused(tmp_path: Path, capsys, error_line) -> None:
    """'b=DIR/b-s42*.trec' matching b-s42.trec and b-s42x.trec was read as "b: 2 seeds"."""
    for name in ("a-s1.trec", "a-s2.trec", "b-s42.trec", "b-s42x.trec"):
        (tmp_path / name).write_text(SEED_RUN)
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    argv = ["--run", f"a={tmp_path}/a-s*.trec", f"b={tmp_path}/b-s42*.trec", "--qrels",
            str(tmp_path / "qrels.txt")]
    assert error_line(eval_main, argv, capsys) == (
        f"error: --run b: {tmp_path}/b-s42.trec and {tmp_path}/b-s42x.trec both read as seed 42: "
        "give each seed of a condition once (make the pattern match one file per seed)")
