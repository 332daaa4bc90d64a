"""What every command does with bad input (:mod:`pyserini_moe.cli`'s ``run_main``, its
argument parser and output checks): one ``error:`` line and exit 2, nothing left on disk,
no output written inside an input or a read-only folder, list and number flags checked
alike by every command."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pyserini_moe.cli import (
    analyze,
    convert,
    dpr,
    encode_queries,
    export,
    finite_float,
    fuse,
    merge,
    pretrain,
    regress,
    run_main,
)
from pyserini_moe.cli import convert as convert_cli
from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.cli import train as train_cli
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.index.meta import META_FILE
from pyserini_moe.runs import read_trec_run, write_trec_run
from tests.helpers import edited_length, err_no_warning, refused, snapshot_path

pytestmark = pytest.mark.usefixtures("one_thread")

MAINS = {"index": index_cli.main, "search": search_cli.main, "eval": eval_cli.main,
         "train": train_cli.main, "fuse": fuse.main, "regress": regress.main,
         "pretrain": pretrain.main, "merge": merge.main}
QA = "capital of france\t['Paris']\nwho is aaron\t['prophet']\n"


@pytest.fixture(scope="module")
def bad_input_ws(model_index_run, tmp_path_factory) -> dict[str, Path]:
    """A workspace: the tiny corpus, a model, its dense index, a run, qrels and broken files."""
    shared = model_index_run(tmp_path_factory.mktemp("bad-input"))
    root, model = shared["root"], shared["model"]
    (root / "five.trec").write_text("q0 Q0 d0 1 3.0\n")
    (root / "badrel.txt").write_text("q0 0 d0 high\n")
    broken = root / "broken-corpus"
    broken.mkdir()
    (broken / "corpus.jsonl").write_text('{"_id": "d0", "text": "a cat"}\n{"_id": "d1", "text"\n')
    (root / "topics-empty.tsv").write_text("q0\t \n")
    (root / "recipe-unknown.yaml").write_text(
        "output_dir: x\nmodel: {type: siamese}\ndata: {collection: scifact, colour: red}\n"
        "training: {learning_rate: 1e-3}\n")
    (root / "recipe-ok.yaml").write_text(
        f"output_dir: {root}/trained\nmodel: {{type: siamese, backbone: {model}}}\n"
        f"data: {{collection: {shared['corpus']}, split: test}}\ntraining: {{learning_rate: 1e-3}}\n")
    (root / "reg-dup.yaml").write_text(
        "name: r\nconditions:\n" + "".join(
            f"  - {{name: c, run: {root}/run.trec, qrels: {root}/qrels.txt, "
            "metrics: {ndcg@10: 0.5}, source: x}\n" for _ in range(2)))
    (root / "reg-none.yaml").write_text("name: r\n")
    (root / "pseudo.tsv").write_text("d0 what is a cat\n")
    return shared


def case(cmd: str, argv: str, message: str, code: int = 2, leaves: str | None = None):
    return pytest.param(cmd, argv, message, code, leaves, id=f"{cmd}: {message[:40]}")

CASES = [
    case("index", "--retriever dense --corpus {corpus} --index {index} --encoder {model}",
         "already exists; pass --overwrite"),
    case("index", "--retriever nope --corpus {corpus} --index {root}/out", "invalid choice",
         leaves="out"),
    case("index", "--retriever bm25 --corpus {root}/no-such --index {root}/out", "no-such",
         leaves="out"),
    case("index", "--retriever bm25 --corpus {root}/broken-corpus --index {root}/out",
         "corpus.jsonl:2", leaves="out"),
    case("index", "--retriever dense --corpus {corpus} --index {root}/out --encoder {root}/dense",
         "dense is a 'dense' index, not a model: pass the model that built it", leaves="out"),
    case("index", "--retriever dense --corpus {corpus} --index {root}/out --encoder {model} "
                  "--max-length 4096", "above the 512 token positions", leaves="out"),
    case("search", "--retriever dense --index {root}/no-index --topics {corpus}:test "
                   "--output {root}/o.trec", "no-index", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {root}/no-topics.tsv "
                   "--output {root}/o.trec", "no-topics.tsv", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {root}/topics-empty.tsv "
                   "--output {root}/o.trec", "empty text for query 'q0'", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test --hits 0 "
                   "--output {root}/o.trec", "--hits must be >= 1", leaves="o.trec"),
    case("search", "--retriever impact --index {index} --topics {corpus}:test "
                   "--output {root}/o.trec", "dense", leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test --alpha -2 "
                   "--bm25-index {index} --output {root}/o.trec", "--alpha must be >= 0",
         leaves="o.trec"),
    case("search", "--retriever dense --index {index} --topics {corpus}:test "
                   "--output {root}", "is a directory"),
    case("eval", "--run {root}/no-run.trec --qrels {root}/qrels.txt", "no-run.trec"),
    case("eval", "--run {root}/five.trec --qrels {root}/qrels.txt", "five.trec:1"),
    case("eval", "--run {root}/run.trec --qrels {root}/qrels.txt --metrics ndcg@ten", "ndcg@ten"),
    case("eval", "--run {root}/run.trec --qrels {root}/badrel.txt", "badrel.txt:1"),
    case("eval", "--run {root}/run.trec --qrels {root}/qrels.txt --output {root}",
         "is a directory"),
    case("train", "--config {root}/no-recipe.yaml", "no-recipe.yaml"),
    case("train", "--config {root}/recipe-unknown.yaml", "data.colour: unknown field"),
    case("train", "--config {root}/recipe-ok.yaml --set nonsense", "FIELD=VALUE",
         leaves="trained"),
    case("train", "--config {root}/recipe-ok.yaml --set training.epochs=two",
         "--set training.epochs=two: expected an integer", leaves="trained"),
    case("fuse", "--runs {root}/run.trec --method rrf --output {root}/f.trec",
         "at least two runs", leaves="f.trec"),
    case("fuse", "--runs {root}/run.trec {root}/run.trec --method wsum --weights 1 "
                 "--output {root}/f.trec", "--weights needs 2 values", leaves="f.trec"),
    case("fuse", "--runs {root}/run.trec {root}/five.trec --method rrf --output {root}/f.trec",
         "five.trec:1", leaves="f.trec"),
    case("regress", "{root}/reg-dup.yaml", "duplicate condition name"),
    case("regress", "{root}/reg-none.yaml", "missing field 'conditions'"),
    case("regress", "{root}/no-such.yaml", "no-such.yaml"),
    case("pretrain", "--backbone {model} --pseudo-queries {corpus}={root}/pseudo.tsv "
                     "--output-dir {root}/pt --max-steps 1", "pseudo.tsv:1", leaves="pt"),
    case("pretrain", "--backbone {model} --output-dir {root}/pt", "nothing to pre-train on",
         leaves="pt"),
    case("merge", "--shards {index} --index {root}/merged", "is not an index shard",
         leaves="merged"),
]


@pytest.mark.parametrize("cmd,argv,message,code,leaves", CASES)
def test_bad_input_is_one_line_and_leaves_nothing(bad_input_ws, capsys, cmd, argv, message, code,
                                                  leaves) -> None:
    args = argv.format(**{k: str(v) for k, v in bad_input_ws.items()}).split()
    try:
        got = run_main(MAINS[cmd], args)
    except SystemExit as stop:  # argparse's own usage errors
        got = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert got == code, err
    assert len(err) == 1 and err[0].startswith("error: "), err  # argparse's usage too
    assert message in err[0], err[0]
    assert "Traceback" not in "\n".join(err)
    if leaves:
        assert not (bad_input_ws["root"] / leaves).exists()
        assert not list(bad_input_ws["root"].glob(f".{leaves}.tmp-*"))


def test_outputs_inside_index_model_and_collection_folders_are_refused(ws, capsys) -> None:
    kept = {name: snapshot_path(ws[name]) for name in ("index", "model", "corpus")}
    cases = [
        (encode_queries.main, ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test",
                               "--output", str(ws["index"] / "queries"), "--overwrite"]),
        (encode_queries.main, ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test",
                               "--encoder", str(ws["model"]), "--output",
                               str(ws["model"] / "config.json"), "--overwrite"]),
        # the collection of ``FOLDER:SPLIT`` is an input folder too
        (convert.main, ["--topics", f"{ws['corpus']}:test", "--output",
                        str(ws["corpus"] / "queries.jsonl"), "--overwrite"]),
    ]
    for main, argv in cases:
        assert run_main(main, argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and "is inside the input" in err[-1], err
    assert {name: snapshot_path(ws[name]) for name in kept} == kept


@pytest.fixture
def read_only(tmp_path, monkeypatch) -> Path:
    """A folder made read-only (chmod 0o500). The tests run as root, whom the kernel lets write
    there anyway: ``os.access`` answers for that folder as for any other user."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    real = os.access

    def access(path, mode, **kwargs) -> bool:
        if Path(path).absolute() == folder and mode & os.W_OK:
            return bool(os.stat(folder).st_mode & stat.S_IWUSR)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    yield folder
    folder.chmod(0o700)


def test_an_output_in_a_read_only_folder_is_refused_before_any_work(ws, read_only,
                                                                    capsys) -> None:
    """A read-only output folder was found only when the whole search was done."""
    cases = [
        (eval_cli.main, ["--run", str(ws["root"] / "run.trec"), "--qrels",
                         str(ws["root"] / "qrels.txt"), "--output", str(read_only / "m.json")]),
        (fuse.main, ["--runs", str(ws["root"] / "run.trec"), str(ws["root"] / "run.trec"),
                     "--method", "rrf", "--output", str(read_only / "sub" / "f.trec")]),
        (search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]), "--topics",
                           f"{ws['corpus']}:test", "--output", str(read_only / "run.trec"),
                           "--device", "cpu", "--quiet"]),
    ]
    for main, argv in cases:
        out = argv[argv.index("--output") + 1]
        assert run_main(main, argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {out}: the folder {read_only} cannot be written by this user; "
                       "name another output or make the folder writable"]
    assert list(read_only.iterdir()) == []


@pytest.mark.parametrize("bad", [-5, 0])
def test_search_and_encode_queries_refuse_it_in_one_line(ws, tmp_path, capsys, bad) -> None:
    index = edited_length(ws, tmp_path / "index", bad)
    search = ["--index", str(index), "--topics", f"{ws['corpus']}:test", "--device", "cpu"]
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec")]) == 2
    assert f"{index / META_FILE}: the index metadata is damaged" in err_no_warning(capsys)
    assert run_main(encode_cli.main, [*search, "--output", str(tmp_path / "q")]) == 2
    assert f"{index / META_FILE}: the index metadata is damaged" in err_no_warning(capsys)
    assert not (tmp_path / "r.trec").exists() and not (tmp_path / "q").exists()


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_a_number_flag_refuses_non_finite_values(text: str) -> None:
    with pytest.raises(Exception, match="expected a finite number"):
        finite_float(text)
    assert finite_float("0.1") == 0.1


@pytest.mark.parametrize(("main", "argv", "flag"), [
    (eval_cli.main, ["--run", "a", "--run", "b", "--qrels", "q"], "--run"),
    (eval_cli.main, ["--run", "a", "--qrels", "q", "--metrics", "map", "--metrics", "mrr"],
     "--metrics"),
    (fuse.main, ["--runs", "a", "b", "--runs", "c", "d", "--output", "o"], "--runs"),
    (merge.main, ["--shards", "a", "b", "--shards", "c", "--index", "i"], "--shards"),
    (pretrain.main, ["--corpus", "a", "--corpus", "b", "--output-dir", "o"], "--corpus"),
    (analyze.main, ["checkpoints", "--train-dir", "a", "--train-dir", "b", "--corpus", "c"],
     "--train-dir"),
])
def test_a_list_flag_given_twice_is_refused(main, argv, flag, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"error: {flag} is given twice: give all its values after one {flag}" in \
        capsys.readouterr().err


def test_a_list_flag_given_once_still_reads_every_value(tmp_path) -> None:
    from pyserini_moe.cli import ArgumentParser

    parser = ArgumentParser()
    group = parser.add_argument_group("g")
    group.add_argument("--runs", nargs="+")
    parser.add_argument("--one")
    args = parser.parse_args(["--runs", "a", "b", "--one", "x", "--one", "x"])
    assert args.runs == ["a", "b"] and args.one == "x"  # one value twice: harmless


def test_gz_outputs_are_gzip_the_readers_read(tmp_path, tiny_corpus):
    topics, qrels = tmp_path / "t.tsv.gz", tmp_path / "q.txt.gz"
    assert convert_cli.main(["--topics", f"{tiny_corpus}:test", "--output", str(topics)]) == 0
    assert convert_cli.main(["--qrels", f"{tiny_corpus}:test", "--output", str(qrels)]) == 0
    assert load_topics(str(topics))["q1"] == "cat sat on the mat"
    assert load_qrels(str(qrels))["q0"] == {"d0": 1}
    run = write_trec_run({"q0": {"d0": 2.0, "d1": 1.0}}, tmp_path / "r.trec.gz")
    assert read_trec_run(run) == {"q0": {"d0": 2.0, "d1": 1.0}}
    (tmp_path / "qa.csv").write_text(QA)
    assert dpr_cli.main(["qa", "--input", str(tmp_path / "qa.csv"), "--output",
                         str(tmp_path / "nq.jsonl.gz")]) == 0
    assert load_topics(str(tmp_path / "nq.jsonl.gz"))["1"] == "who is aaron"


def test_search_and_fuse_refuse_a_non_run_output_before_the_work(tmp_path, capsys):
    """The check runs before the search or fusion, not when the run is written."""
    from pyserini_moe.cli import fuse as fuse_cli
    from pyserini_moe.cli import run_main
    from pyserini_moe.cli import search as search_cli

    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "q1", "text": "a query"}\n')
    run = tmp_path / "a.trec"
    run.write_text("q1 Q0 d1 1 3.0 t\n")
    assert run_main(fuse_cli.main, ["--runs", str(run), str(tmp_path / "missing.trec"),
                                    "--output", str(queries)]) == 2
    assert "exists and is not a run" in capsys.readouterr().err  # before the missing run is read
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert run_main(search_cli.main, ["--index", "beir-v1.0.0-scifact.flat", "--topics",
                                      str(queries), "--output", str(qrels)]) == 2
    assert "exists and is not a run" in capsys.readouterr().err  # before the index is opened
    assert queries.read_text() == '{"_id": "q1", "text": "a query"}\n'
    assert qrels.read_text() == "query-id\tcorpus-id\tscore\nq1\td1\t1\n"


# --- a setting given twice with two values --------------------------------------------------------


def test_a_flag_given_twice_with_two_values_is_refused(capsys) -> None:
    from pyserini_moe.cli import ArgumentParser

    parser = ArgumentParser(prog="x")
    parser.add_argument("--hits", "--k", type=int, default=10)
    parser.add_argument("--faiss-params")
    assert parser.parse_args(["--hits", "3", "--hits", "3"]).hits == 3  # the same value: harmless
    for argv, said in ((["--hits", "3", "--hits", "5"], "--hits 3 and --hits 5"),
                       (["--hits", "3", "--k", "5"], "--hits 3 and --k 5"),
                       (["--faiss-params", "efSearch=3", "--faiss-params", "efSearch=5"],
                        "--faiss-params efSearch=3 and --faiss-params efSearch=5")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert capsys.readouterr().err.strip().endswith(f"error: {said} set the same thing: "
                                                        "give it once")


def test_analysis_and_run_merging_do_not_write_over_their_runs(bm25_ws, capsys) -> None:
    refused(analyze.main, ["came", "--expert-runs", f"lexical={bm25_ws['run']}",
                           f"global={bm25_ws['other']}", "--qrels", f"{bm25_ws['corpus']}:test",
                           "--output", str(bm25_ws["other"])], "is also an input", capsys, bm25_ws["other"])
    refused(dpr.main, ["merge-runs", "--runs", str(bm25_ws["run"]), str(bm25_ws["other"]), "--output",
                       str(bm25_ws["other"])], "is also an input", capsys, bm25_ws["other"])


def test_misplaced_folders_say_what_they_are(bm25_ws, tmp_path, capsys, monkeypatch) -> None:
    refused(index_cli.main, ["--retriever", "bm25", "--corpus", str(bm25_ws["bm25"]), "--index",
                             str(tmp_path / "i")], "an index, not a collection", capsys)
    refused(search_cli.main, ["--index", str(bm25_ws["bm25"]), "--topics", str(bm25_ws["corpus"]),
                              "--output", str(tmp_path / "o.trec")],
            "is a folder, not a topics file", capsys)
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(tmp_path / "missing"))
    refused(search_cli.main, ["--index", str(bm25_ws["bm25"]), "--topics", "cranfield:test",
                              "--output", str(tmp_path / "o.trec")],
            "PYSERINI_MOE_DATA=", capsys)


def test_export_over_a_file_and_metadata_that_disagrees_with_faiss(bm25_ws, tmp_path,
                                                                   capsys) -> None:
    target = tmp_path / "victim.trec"
    target.write_text("keep")
    refused(export.main, ["--encoder", str(bm25_ws["model"]), "--output", str(target),
                          "--overwrite"], "is a file: name a folder", capsys, target)
    dense = tmp_path / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(bm25_ws["corpus"]), "--encoder",
                           str(bm25_ws["model"]), "--index", str(dense), "--device", "cpu",
                           "--quiet"]) == 0
    meta = json.loads((dense / "pyserini_moe_index.json").read_text())
    meta["dim"] = meta["dim"] * 2
    (dense / "pyserini_moe_index.json").write_text(json.dumps(meta))
    refused(search_cli.main, ["--retriever", "dense", "--index", str(dense), "--topics",
                              f"{bm25_ws['corpus']}:test", "--output", str(tmp_path / "o.trec"),
                              "--device", "cpu"], "the metadata says", capsys)


@pytest.mark.parametrize("argv", [["--output", "run\n.trec"], ["--runs", "a.trec", "b\r.trec"]])
def test_a_flag_value_with_a_line_break_is_refused(argv, capsys) -> None:
    """A pasted command put a newline into an output's name: the file was written so, and
    breaks every listing of its folder."""
    from pyserini_moe.cli import ArgumentParser

    parser = ArgumentParser(prog="x")
    parser.add_argument("--output")
    parser.add_argument("--runs", nargs="+")
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: {argv[0]} is given a value with a line break (a pasted command?): no file name "
        "or value here holds one")
