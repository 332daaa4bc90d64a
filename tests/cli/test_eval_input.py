"""Unusual input to the ``eval`` command (:mod:`pyserini_moe.cli.eval`): empty, doubled or
ambiguous runs, qrels of another collection or given as a folder, seed groups that do not
match, outputs that coincide or would replace a user's file, comparison settings with one
run; nothing is scored silently partial and each refusal is one ``error:`` line."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli.eval import main as eval_main
from pyserini_moe.cli.eval import seed_names
from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n"
BOM = "\ufeff".encode()
# q0's judged document is at rank 1, q1's is missed: nDCG@10 0.5.
RUN_HALF = "q0 Q0 d3 1 3.0 t\nq0 Q0 d21 2 2.0 t\nq1 Q0 d26 1 1.0 t\n"
QRELS_HALF = "q0 0 d3 1\nq1 0 d1 1\n"
A = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d2 1 1.0 t\n"
B = "q1 Q0 d2 1 9.0 t\nq1 Q0 d1 2 8.0 t\nq2 Q0 d1 1 4.0 t\n"
QRELS = "q1 0 d2 1\nq2 0 d2 1\n"
SEED_RUN = "q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"


def _files(tmp_path: Path) -> Path:
    (tmp_path / "run.trec").write_text(RUN)
    (tmp_path / "empty.trec").write_text("")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "headerless.tsv").write_text("q1\td1\t1\n")
    return tmp_path


def _last(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_empty_run_is_not_scored_zero(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "empty.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 2
    assert _last(capsys) == (f"error: {f / 'empty.trec'}: the run is empty: nothing to evaluate "
                             "(did its search fail?)")


def test_judged_queries_missing_from_the_run_are_said(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "qrels.txt")]) == 0
    err = capsys.readouterr().err
    assert "warning: run.trec: 1 of 2 judged queries have no results (e.g. q2); they count as 0" in err


def test_a_headerless_beir_qrels_file_is_named_for_what_it_is(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                    str(f / "headerless.tsv")]) == 2
    assert "a BEIR qrels TSV starts with its header line" in _last(capsys)


def test_an_eval_output_naming_its_run_is_refused(tmp_path, capsys) -> None:
    f = _files(tmp_path)
    code = run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels", str(f / "qrels.txt"),
                                    "--table", str(f / "run.trec")])
    assert code == 2 and "is also an input of this command" in _last(capsys)
    assert (f / "run.trec").read_text() == RUN


def test_a_data_variable_naming_a_file_is_one_error_line(tmp_path, capsys, monkeypatch) -> None:
    """PYSERINI_MOE_DATA naming a file was ignored without a word (a collection name
    then resolved elsewhere, or was downloaded)."""
    f = _files(tmp_path)
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


@pytest.fixture(scope="module")
def index_ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    """A model, its dense index over the tiny corpus, a run and its qrels."""
    return model_index_run(tmp_path_factory.mktemp("ws"))


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_eval_outputs_may_not_coincide(index_ws, tmp_path, capsys) -> None:
    from pyserini_moe.eval import __main__ as eval_cli  # noqa: PLC0415

    out = str(tmp_path / "x")
    code = run_main(eval_cli.main, ["--run", str(index_ws["root"] / "run.trec"), "--qrels",
                                    str(index_ws["root"] / "qrels.txt"), "--output", out, "--table",
                                    out, "--per-query", out])
    assert code == 2 and "one would overwrite the other" in _err(capsys)
    assert not (tmp_path / "x").exists()


@pytest.fixture
def f(tmp_path: Path) -> Path:
    """A clean run and qrels, and the same run with a BOM and gzipped."""
    (tmp_path / "run.trec").write_text(RUN_HALF)
    (tmp_path / "qrels.txt").write_text(QRELS_HALF)
    (tmp_path / "bom.trec").write_bytes(BOM + RUN_HALF.encode())
    (tmp_path / "run.trec.gz").write_bytes(gzip.compress(RUN_HALF.encode()))
    return tmp_path


def _error(capsys: pytest.CaptureFixture) -> str:
    """The one line a refused command prints."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _trec_eval_agrees(capsys: pytest.CaptureFixture, runs: list[Path], qrels: Path,
                      out: Path) -> None:
    """``eval --trec-eval`` of ``runs``: ranx and trec_eval both score 0.5, no "differs"."""
    assert run_main(eval_cli.main, ["--run", *map(str, runs), "--qrels", str(qrels), "--metrics",
                                    "ndcg@10", "--trec-eval", "--output", str(out)]) == 0
    assert "differs" not in capsys.readouterr().err
    for result in json.loads(out.read_text())["runs"].values():
        assert result["metrics"]["ndcg@10"] == pytest.approx(0.5)
        assert result["trec_eval"]["ndcg@10"] == pytest.approx(0.5)


def test_trec_eval_reads_a_bom_qrels_file_as_ranx_does(f, capsys) -> None:
    (f / "qrels-bom.txt").write_bytes(BOM + QRELS_HALF.encode())
    _trec_eval_agrees(capsys, [f / "run.trec"], f / "qrels-bom.txt", f / "o.json")


def test_trec_eval_reads_bom_and_gzipped_runs_as_ranx_does(f, capsys) -> None:
    _trec_eval_agrees(capsys, [f / "bom.trec", f / "run.trec.gz"], f / "qrels.txt", f / "o.json")


@pytest.mark.parametrize("spelling", ["out.txt", "sub/../out.txt"])
def test_eval_outputs_naming_one_file_are_refused(f, capsys, monkeypatch, spelling) -> None:
    monkeypatch.chdir(f)
    (f / "sub").mkdir()
    assert run_main(eval_cli.main, ["--run", "run.trec", "--qrels", "qrels.txt", "--output",
                                    "out.txt", "--table", spelling, "--per-query", "out.txt"]) == 2
    assert "give each output its own path" in _error(capsys)
    assert not (f / "out.txt").exists()


def test_trec_eval_metric_names_are_read_as_the_tools_own(f, capsys) -> None:
    out = f / "o.json"
    names = ["ndcg_cut.10", "P.10", "recall.100", "map", "recip_rank"]
    own = ["ndcg@10", "precision@10", "recall@100", "map", "mrr"]
    values = []
    for metrics in (names, own):
        assert run_main(eval_cli.main, ["--run", str(f / "run.trec"), "--qrels",
                                        str(f / "qrels.txt"), "--metrics", *metrics,
                                        "--output", str(out)]) == 0
        values.append(list(json.loads(out.read_text())["runs"]["run.trec"]["metrics"].values()))
    assert values[0] == values[1] and values[0][0] == pytest.approx(0.5)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Two runs, their qrels, and the same two systems' runs of dev queries dq1, dq2 (the same
    rankings of the fused queries are refused as dev runs), judged in the same
    qrels file."""
    dev_a, dev_b = (run.replace("q", "dq") for run in (A, B))
    for name, text in (("a", A), ("b", B), ("dev-a", dev_a), ("dev-b", dev_b)):
        (tmp_path / f"{name}.trec").write_text(text)
    (tmp_path / "qrels.txt").write_text(QRELS + QRELS.replace("q", "dq"))
    return tmp_path


def eval_argv(ws: Path, *runs: str) -> list[str]:
    return ["--run", *runs, "--qrels", str(ws / "qrels.txt"), "--metrics", "ndcg@10"]


def test_seeds_in_folders_with_one_file_name_are_all_compared(ws, capsys) -> None:
    """'x=DIR/s*/run.trec' (work/detr-s42/run.trec style): a StopIteration traceback."""
    for seed, text in (("s1", A), ("s2", B), ("s3", A.replace("3.0", "0.5"))):
        (ws / seed).mkdir()
        (ws / seed / "run.trec").write_text(text)
    out = ws / "out.json"
    assert run_main(eval_cli.main, [*eval_argv(ws, f"x={ws}/s*/run.trec", str(ws / "b.trec")),
                                    "--output", str(out)]) == 0
    names = list(json.loads(out.read_text())["runs"])
    assert names == [f"x/{ws}/s1/run.trec", f"x/{ws}/s2/run.trec", f"x/{ws}/s3/run.trec",
                     "b.trec"]


def test_a_plain_run_named_like_a_seed_is_refused() -> None:
    """The guard that keeps the names apart: one name for two runs would replace one of them."""
    with pytest.raises(UserError, match="two runs are named 'x/a.trec'"):
        seed_names({"x/a.trec": ["x/a.trec"], "y/a.trec": ["y/a.trec"],
                    "x": ["z/a.trec", "z/b.trec"]})


def test_two_groups_of_the_same_files_are_refused(ws, capsys) -> None:
    """Two groups matching the same files were compared with each other (p = 1)."""
    pattern = f"{ws}/dev-*.trec"
    assert run_main(eval_cli.main, eval_argv(ws, f"a={pattern}", f"b={pattern}")) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run a={ws}/dev-a.trec and --run b={ws}/dev-a.trec are one run file: give "
        "each once")


def test_one_run_under_two_spellings_is_refused(ws, capsys) -> None:
    """Dense.trec and ./dense.trec were compared with each other (p = 1)."""
    spelt = f"{ws}/./a.trec"
    assert run_main(eval_cli.main, eval_argv(ws, str(ws / "a.trec"), spelt)) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --run {ws / 'a.trec'} and --run {spelt} are one run file: give each once")


def test_a_stat_test_with_seed_groups_is_refused(ws, capsys) -> None:
    """--stat-test fisher was dropped for the seeded t-test without a word."""
    argv = eval_argv(ws, f"a={ws}/dev-*.trec", str(ws / "b.trec"))
    assert run_main(eval_cli.main, [*argv, "--stat-test", "fisher"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --stat-test fisher: with several seeds the comparison is the t-test over queries "
        "and seeds, not a paired test; leave --stat-test out")
    assert run_main(eval_cli.main, argv) == 0
    assert run_main(eval_cli.main, [*eval_argv(ws, str(ws / "a.trec"), str(ws / "b.trec")),
                                    "--stat-test", "fisher"]) == 0


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    """Two runs over two queries (a dense-like ``a`` and a sparse-like ``b``) and their qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq1 Q0 d3 3 1.0 a\n"
                                     "q2 Q0 d2 1 3.0 a\nq2 Q0 d1 2 2.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d1 1 9.0 b\nq1 Q0 d4 2 8.0 b\nq1 Q0 d5 3 7.0 b\n"
                                     "q2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


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


@pytest.fixture
def run_files(tmp_path: Path) -> Path:
    """Two runs over two judged queries, a run of other queries, and the qrels."""
    (tmp_path / "a.trec").write_text("q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq2 Q0 d2 1 3.0 a\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d4 1 9.0 b\nq2 Q0 d3 1 9.0 b\nq2 Q0 d2 2 8.0 b\n")
    (tmp_path / "other.trec").write_text("x1 Q0 d1 1 3.0 o\nx2 Q0 d2 1 3.0 o\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return tmp_path


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


@pytest.fixture(scope="module")
def bm25_ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bm25-ws")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    corpus = root / "corpus"
    shutil.copytree(tiny_corpus, corpus)
    bm25 = root / "bm25"
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(corpus), "--index", str(bm25),
                           "--quiet"]) == 0
    run = root / "run.trec"
    run.write_text("q0 Q0 d1 1 2.0 t\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 1.0 t\n")
    other = root / "other.trec"
    other.write_text("q0 Q0 d2 1 2.0 t\nq1 Q0 d4 1 1.0 t\n")
    return {"root": root, "model": model, "corpus": corpus, "bm25": bm25, "run": run,
            "other": other}


def snapshot_path(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def refused(main, argv: list[str], message: str, capsys, keep: Path | None = None) -> None:
    before = snapshot_path(keep) if keep is not None else None
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err
    if keep is not None:
        assert snapshot_path(keep) == before  # the input is untouched


@pytest.mark.parametrize("lines,message", [
    ("q0 Q0 d1 1 1.0 t\nq0 Q0 d1 2 0.1 t\n", ":2: document 'd1' is listed twice for query 'q0'"),
    ("q0 Q0 d1 1 nan t\n", ":1: score 'nan' is not a finite number"),
])
def test_ambiguous_runs_are_refused(bm25_ws, tmp_path, capsys, lines, message) -> None:
    run = tmp_path / "bad.trec"
    run.write_text(lines)
    refused(eval_cli.main, ["--run", str(run), "--qrels", f"{bm25_ws['corpus']}:test"], message, capsys)


def _refused(main, argv: list[str], message: str, capsys) -> None:
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err


def test_a_seed_glob_that_matches_a_folder_says_so(tmp_path: Path, capsys) -> None:
    from pyserini_moe.cli.eval import main as eval_main

    (tmp_path / "d-s1.trec").write_text(SEED_RUN)
    (tmp_path / "d-sdir.trec").mkdir()
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    _refused(eval_main, ["--run", f"d={tmp_path}/d-s*.trec", "--qrels", str(tmp_path / "qrels.txt")],
             "matches the folder", capsys)
