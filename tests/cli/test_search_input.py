"""Unusual input to the ``search`` command (:mod:`pyserini_moe.cli.search`): damaged or
edited indexes, outputs inside an input, settings the search would not read, non-finite
numbers, run tags, encoded queries of another model, Pyserini's own flags and the BM25
hybrid's ``--alpha`` default; each refusal is one ``error:`` line before any work."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import fuse, run_main, search
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import search as search_cli
from pyserini_moe.cli.search import main as search_main
from pyserini_moe.index.meta import META_FILE, meta_path
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import encoded_queries as eq
from pyserini_moe.search.dispatch import SearchSettings
from tests.helpers import (
    dense_queries,
    edited_index,
    edited_length,
    err_text,
    exit_code,
    one_error_line,
    refusal_line,
    refused,
    snapshot_path,
)

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_inside_the_collection_of_bare_topics_is_refused(shared: Path, tmp_path: Path,
                                                               capsys) -> None:
    err = refusal_line(search_main, ["--retriever", "bm25", "--index", str(tmp_path / "nowhere"),
                                     "--topics", "tiny:test", "--output",
                                     str(shared / "tiny" / "qrels" / "run.trec")], capsys)
    assert "is inside the input tiny:test" in err
    assert not (shared / "tiny" / "qrels" / "run.trec").exists()


@pytest.fixture(scope="module")
def dense_index(tiny_corpus, model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(out), "--encoder", str(model), "--device", "cpu",
                           "--max-length", "64", "--quiet"]) == 0
    return out


def _search_dense(index: Path, corpus: Path, out: Path, capsys) -> tuple[int, str]:
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(index), "--topics",
                                      f"{corpus}:test", "--output", str(out), "--device", "cpu",
                                      "--quiet"])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_docid_file_shorter_than_the_index_is_one_error_line(dense_index, tiny_corpus, tmp_path,
                                                               capsys) -> None:
    broken = tmp_path / "dense"
    shutil.copytree(dense_index, broken)
    lines = (broken / "docid").read_text().splitlines()
    (broken / "docid").write_text("\n".join(lines[:-3]) + "\n")
    code, err = _search_dense(broken, tiny_corpus, tmp_path / "run.trec", capsys)
    assert code == 2 and "docid file and the Faiss index hold different numbers" in err
    assert not (tmp_path / "run.trec").exists()


def test_an_unreadable_faiss_file_is_one_error_line(dense_index, tiny_corpus, tmp_path,
                                                    capsys) -> None:
    broken = tmp_path / "dense"
    shutil.copytree(dense_index, broken)
    (broken / "index").write_bytes(b"not faiss")
    code, err = _search_dense(broken, tiny_corpus, tmp_path / "run.trec", capsys)
    assert code == 2 and err.startswith(f"error: {broken}/index: Faiss cannot read it")


# --- hybrid --alpha: Pyserini's default -----------------------------------------------------------


def pyserini_default_alpha() -> float:
    """The ``alpha`` default of Pyserini's ``HybridSearcher.search``, read from its source (no
    JVM, no Faiss)."""
    spec = importlib.util.find_spec("pyserini")
    source = Path(spec.origin).parent / "search" / "hybrid" / "_searcher.py"
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "search":
            args = node.args.args
            defaults = dict(zip([a.arg for a in args[len(args) - len(node.args.defaults):]],
                                node.args.defaults))
            return ast.literal_eval(defaults["alpha"])
    raise AssertionError(f"no search() in {source}")


def alpha_action(parser):
    return next(a for a in parser._actions if "--alpha" in a.option_strings)


@pytest.mark.parametrize("module", [search_cli, fuse])
def test_alpha_defaults_to_pyserinis(module) -> None:
    assert pyserini_default_alpha() == 0.1
    action = alpha_action(module.build_parser())
    assert action.default == pyserini_default_alpha()
    assert "Pyserini's default" in action.help
    assert SearchSettings("dense", "i").alpha == pyserini_default_alpha()


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    values = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return [s for value in values for s in _strings(value)]


def _hybrid_steps() -> list[str]:
    steps = []
    for path in sorted((ROOT / "regressions").glob("*.yaml")):
        for text in _strings(yaml.safe_load(path.read_text())):
            search = "pyserini_moe.search" in text and "--bm25-index" in text
            fused = "pyserini_moe.fuse" in text and "--method hybrid" in text
            if search or fused:
                steps.append(text)
    return steps


def test_every_regression_hybrid_names_its_alpha_or_tunes_it() -> None:
    """The default moved from 1.0 to Pyserini's 0.1: a shipped step that relied on the old
    default would now reproduce other numbers."""
    steps = _hybrid_steps()
    assert steps
    untuned = [s for s in steps if "--alpha" not in s.split() and "--dev-runs" not in s.split()]
    assert not untuned


def test_a_run_written_inside_the_index_it_searches_is_refused(ws, capsys) -> None:
    before = snapshot_path(ws["index"])
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]),
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(ws["index"] / "docid"), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (f"error: {ws['index'] / 'docid'} is inside the input "
                                     f"{ws['index']} of this command: writing it would replace "
                                     "what is being read; name another output")
    assert snapshot_path(ws["index"]) == before


def test_an_empty_run_tag_is_refused_not_replaced(model_index_run, tmp_path, capsys) -> None:
    """``--run-tag ""`` wrote the default tag without a word."""
    from pyserini_moe.cli import run_main

    ws = model_index_run(tmp_path)
    with pytest.raises(SystemExit) as stop:  # argparse's refusal, as for any value it refuses
        run_main(search_cli.main, ["--retriever", "dense", "--index", str(ws["index"]),
                                   "--topics", f"{ws['corpus']}:test", "--output",
                                   str(tmp_path / "r.trec"), "--run-tag", "", "--device", "cpu",
                                   "--quiet"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "error: --run-tag is given an empty value: give one"
    assert not (tmp_path / "r.trec").exists()


@pytest.mark.parametrize("tag", ["mine"])
def test_a_given_run_tag_is_written(model_index_run, tmp_path, tag) -> None:
    ws = model_index_run(tmp_path)
    out = tmp_path / "r.trec"
    assert search_cli.main(["--retriever", "dense", "--index", str(ws["index"]), "--topics",
                            f"{ws['corpus']}:test", "--output", str(out), "--run-tag", tag,
                            "--device", "cpu", "--quiet"]) == 0
    assert {line.split()[-1] for line in out.read_text().splitlines()} == {tag}


def test_a_model_whose_queries_encode_to_nan_fails_the_search(nan_query_dpr, tiny_corpus,
                                                              tmp_path, capsys) -> None:
    code = run_main(search_cli.main, ["--retriever", "dense", "--index",
                                      str(nan_query_dpr["index"]), "--topics",
                                      f"{tiny_corpus}:test", "--output", str(tmp_path / "run.trec"),
                                      "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err == ("error: query 'what is dense retrieval' encodes to NaN or "
                                 "infinite values (the model's weights are broken: a diverged "
                                 "training?)")
    assert not (tmp_path / "run.trec").exists()


def test_expert_runs_may_not_overwrite_the_fused_run(ws, tmp_path, capsys) -> None:
    index = str(ws["index"])
    code = run_main(search_cli.main, ["--retriever", "fused", "--index", index, index,
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(tmp_path / "er.dense.trec"), "--expert-runs",
                                      str(tmp_path / "er"), "--device", "cpu", "--quiet"])
    assert code == 2 and "is also the output" in err_text(capsys)
    assert not list(tmp_path.iterdir())


def test_a_hybrid_never_mixes_two_collections(ws, tmp_path, capsys) -> None:
    other = tmp_path / "other-corpus"
    other.mkdir()
    (other / "corpus.jsonl").write_text(json.dumps({"_id": "x1", "text": "cat sat"}) + "\n")
    bm25 = tmp_path / "bm25-other"
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(other), "--index", str(bm25),
                           "--quiet"]) == 0
    code = run_main(search_cli.main, ["--index", str(ws["index"]), "--bm25-index", str(bm25),
                                      "--topics", f"{ws['corpus']}:test", "--output",
                                      str(tmp_path / "h.trec"), "--device", "cpu", "--quiet"])
    err = err_text(capsys)
    assert code == 2 and "hold different collections" in err and "other-corpus" in err
    assert not (tmp_path / "h.trec").exists()


def test_a_hybrid_compares_the_corpora_not_their_folder_names(ws, tmp_path, capsys) -> None:
    """A corpus of the same name with other texts is refused (its digest differs); a copy of
    the same corpus elsewhere is one corpus."""
    corpus = Path(ws["corpus"])
    changed, copied = tmp_path / "v2" / corpus.name, tmp_path / "copy" / corpus.name
    shutil.copytree(corpus, copied)
    shutil.copytree(corpus, changed)
    (changed / "corpus.jsonl").write_text((corpus / "corpus.jsonl").read_text()
                                          .replace('"text": "', '"text": "other '))
    for folder in (changed, copied):
        assert index_cli.main(["--retriever", "bm25", "--corpus", str(folder), "--index",
                               str(folder.parent / "bm25"), "--quiet"]) == 0

    def hybrid(bm25: Path) -> int:
        return run_main(search_cli.main, ["--index", str(ws["index"]), "--bm25-index", str(bm25),
                                          "--topics", f"{corpus}:test", "--output",
                                          str(bm25.parent / "h.trec"), "--device", "cpu",
                                          "--quiet"])
    assert hybrid(changed.parent / "bm25") == 2
    err = err_text(capsys)
    assert "hold different collections" in err and "sha256" in err
    assert not (changed.parent / "h.trec").exists()
    assert hybrid(copied.parent / "bm25") == 0


def _search(ws: dict[str, Path], tmp_path: Path, *extra: str, index: str | None = None) -> int:
    defaults = {"--topics": f"{ws['corpus']}:test", "--output": str(tmp_path / "run.trec")}
    argv = [arg for flag, value in defaults.items() if flag not in extra for arg in (flag, value)]
    return run_main(search_cli.main, ["--index", index or str(ws["index"]), *argv, "--device",
                                      "cpu", "--quiet", *extra])


def test_an_edited_index_kind_blames_the_metadata(ws, tmp_path, capsys) -> None:
    edited = tmp_path / "dense"
    edited.mkdir()
    for f in ws["index"].iterdir():
        (edited / f.name).write_bytes(f.read_bytes())
    meta = json.loads((edited / META_FILE).read_text())
    (edited / META_FILE).write_text(json.dumps({**meta, "kind": "multivector"}))
    err = one_error_line(capsys) if _search(ws, tmp_path, index=str(edited)) == 2 else ""
    assert f"index metadata ({META_FILE}) says kind 'multivector'" in err
    assert "holds a dense index" in err and "produces" not in err


def test_an_output_under_a_file_says_the_parent_is_a_file(ws, tmp_path, capsys) -> None:
    (tmp_path / "runA.trec").write_text("q0 Q0 d0 1 3.0 t\n")
    code = _search(ws, tmp_path, "--output", str(tmp_path / "runA.trec" / "x.trec"))
    err = one_error_line(capsys)
    assert code == 2 and f"{tmp_path / 'runA.trec'} is a file, not a folder" in err
    assert "cannot be written by this user" not in err


@pytest.mark.parametrize("name", ["topics:v2.tsv", "topics.tsv:v2", "sub/topics:v2"])
def test_a_missing_topics_file_with_a_colon_is_not_found(ws, tmp_path, capsys, name) -> None:
    code = _search(ws, tmp_path, "--topics", str(tmp_path / name))
    err = one_error_line(capsys)
    assert code == 2 and f"topics file not found: {tmp_path / name}" in err
    assert "unknown collection" not in err


def test_a_mistyped_index_folder_is_not_found(ws, tmp_path, capsys) -> None:
    for index in (str(tmp_path / "no-such-index"), "./no-such-index"):
        code = _search(ws, tmp_path, index=index)
        out, err = capsys.readouterr()
        assert code == 2 and err == f"error: index folder not found: {index}\n"
        assert "Unrecognized" not in out


def test_an_unreachable_prebuilt_index_says_so(ws, tmp_path, capsys, monkeypatch) -> None:
    from pyserini.search.lucene import _searcher  # noqa: PLC0415

    def offline(name: str, **_: object) -> str:
        raise ValueError("Unable to download prebuilt index at any known URLs.")

    monkeypatch.setattr(_searcher, "download_prebuilt_index", offline)
    name = "beir-v1.0.0-nfcorpus.flat"
    code = _search(ws, tmp_path, index=name)
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"error: {name} is a Pyserini prebuilt index that could not be "
                          "downloaded (Unable to download")
    assert "neither" not in err and not out.strip()


@pytest.mark.parametrize("flags", [["--pooling", "mean", "--l2-norm"], ["--query-prefix", "q: "],
                                   ["--encoder-class", "auto"]])
def test_pyserini_query_encoder_flags_say_the_index_records_them(ws, tmp_path, capsys,
                                                                 flags) -> None:
    code = _search(ws, tmp_path, *flags)
    err = one_error_line(capsys)
    assert code == 2 and "unrecognized" not in err and "come from the index" in err
    assert all(f in err for f in flags if f.startswith("--"))
    assert not (tmp_path / "run.trec").exists()


def _err_without_warning(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeWarning" not in err
    return err


# --- search --encoded-queries: dense tables -------------------------------------------------------


def test_search_with_a_damaged_table_is_one_line(ws, tmp_path, capsys) -> None:
    folder = dense_queries(tmp_path / "q", ["1,2,3"])
    code = run_main(search_cli.main, ["--index", str(ws["index"]), "--topics",
                                      f"{ws['corpus']}:test", "--encoded-queries", str(folder),
                                      "--output", str(tmp_path / "r.trec"), "--quiet"])
    err = _err_without_warning(capsys)
    assert code == 2 and "embedding.pkl: the query 'query 0' has no vector of numbers" in err
    assert not (tmp_path / "r.trec").exists()


def test_a_recorded_length_above_the_positions_names_the_metadata(ws, tmp_path,
                                                                   capsys) -> None:
    index = edited_length(ws, tmp_path / "index", 100_000)
    search = ["--index", str(index), "--topics", f"{ws['corpus']}:test", "--device", "cpu",
              "--quiet"]
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec")]) == 2
    err = _err_without_warning(capsys)
    assert f"{index / META_FILE}: the index metadata records query_max_length 100000" in err
    assert "--query-max-length 512 or less" in err
    # the flag overrides what the metadata records
    assert run_main(search_cli.main, [*search, "--output", str(tmp_path / "r.trec"),
                                      "--query-max-length", "16"]) == 0


@pytest.mark.parametrize("argv", [
    ["--alpha", "nan"], ["--alpha", "inf"], ["--k1", "nan"], ["--k1", "inf"], ["--b", "nan"]])
def test_search_refuses_non_finite_bm25_and_hybrid_numbers(tmp_path: Path, capsys,
                                                           argv: list[str]) -> None:
    """--alpha nan wrote a run of nan scores, --k1 nan a Lucene traceback."""
    out = tmp_path / "run.trec"
    code = exit_code(search.main, ["--retriever", "dense", "--index", str(tmp_path / "i"),
                                  "--bm25-index", str(tmp_path / "b"), "--topics", "scifact:test",
                                  "--output", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert f"expected a finite number, got '{argv[1]}'" in err and "Traceback" not in err


# --- index metadata that lied unnoticed -----------------------------------------------------------


def test_a_recorded_document_count_the_index_does_not_hold_is_refused(ws, tmp_path,
                                                                      capsys) -> None:
    index = edited_index(ws, tmp_path / "index", num_docs=999)
    code = run_main(search_cli.main, ["--index", str(index), "--topics", f"{ws['corpus']}:test",
                                      "--output", str(tmp_path / "r.trec"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"{index / META_FILE}: the metadata says 999 documents, the Faiss " \
                         "index holds 30" in err
    assert not (tmp_path / "r.trec").exists()


def test_the_search_command_refuses_them_before_loading_anything(tmp_path, capsys) -> None:
    """Refused before any model or index is read (these indexes do not exist)."""
    from pyserini_moe.search import __main__ as search_cli

    code = run_main(search_cli.main, ["--retriever", "fused", "--index", str(tmp_path / "i1"),
                                      str(tmp_path / "i2"), "--topics", str(tmp_path / "t.tsv"),
                                      "--output", str(tmp_path / "run.trec"), "--fusion", "rrf",
                                      "--fusion-weights", "1", "2"])
    assert code == 2
    assert capsys.readouterr().err.startswith("error: --fusion-weights: --fusion rrf does not")


def _topics(root: Path) -> Path:
    topics = root / "topics.tsv"
    topics.write_text("q0\tword one\n")
    return topics


# --- --backend onnx-int8 on an index the fp32 model built -----------------------------------------


def test_int8_queries_on_an_fp32_index_are_refused_before_the_export(ws, capsys, error_line) -> None:
    message = error_line(search_main, ["--index", str(ws["index"]), "--topics", str(_topics(ws["root"])),
                                   "--output", str(ws["root"] / "out.trec"),
                                   "--backend", "onnx-int8"], capsys)
    assert message.endswith(f"{ws['index']} was built by the fp32 model (PyTorch or --backend "
                            "onnx), so a --backend onnx-int8 query encoder cannot match its "
                            "vectors: search with --backend torch or onnx, or rebuild the index "
                            "with --backend onnx-int8")
    assert not (ws["model"] / "onnx").exists()  # nothing exported into the input model
    assert not (ws["root"] / "out.trec").exists()


def test_fp32_queries_on_an_int8_index_are_refused_before_the_export(ws, tmp_path, capsys,
                                                                     error_line) -> None:
    index = tmp_path / "int8"
    index.mkdir()
    for path in ws["index"].iterdir():
        (index / path.name).symlink_to(path)
    (index / meta_path(index).name).unlink()
    meta = json.loads(meta_path(ws["index"]).read_text())
    meta["encoder_fingerprint"] += "-int8-matmul-per-channel"
    meta_path(index).write_text(json.dumps(meta))
    message = error_line(search_main, ["--index", str(index), "--topics", str(_topics(tmp_path)),
                                   "--output", str(tmp_path / "out.trec"), "--backend", "onnx"],
                     capsys)
    assert "was built by an int8 ONNX encoder, so a --backend onnx query encoder cannot match " \
           "its vectors: search with --backend onnx-int8" in message
    assert not (ws["model"] / "onnx").exists()


def _error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one error line a refused search prints (exit 2)."""
    assert run_main(search_cli.main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _base(tmp_path: Path, index: str | None = None) -> list[str]:
    return ["--index", index or str(tmp_path / "no-index"), "--topics", str(tmp_path / "t.tsv"),
            "--output", str(tmp_path / "run.trec"), "--quiet"]


# --- one field, two weights -----------------------------------------------------------------------


def test_a_field_given_twice_is_refused(tmp_path, capsys) -> None:
    line = _error([*_base(tmp_path), "--fields", "contents=1", "contents=2"], capsys)
    assert line.startswith("error: --fields: the field 'contents' is given twice "
                           "(contents=1 and contents=2)")
    assert not (tmp_path / "run.trec").exists()


# --- --backend and --device where no model is loaded ----------------------------------------------


@pytest.fixture(scope="module")
def bm25_index(tiny_corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bm25") / "bm25"
    assert index_cli.main(["--corpus", str(tiny_corpus), "--index", str(out), "--quiet"]) == 0
    return out


@pytest.mark.parametrize("flags, said", [
    (["--backend", "onnx"], "error: --backend: not used by a BM25 search; leave it out"),
    (["--device", "cuda:3"], "error: --device: not used by a BM25 search (it loads no model)"),
    (["--device", "cpu"], "error: --device: not used by a BM25 search (it loads no model)"),
])
def test_a_bm25_search_refuses_model_runtime_flags(bm25_index, tiny_corpus, tmp_path, capsys,
                                                   flags, said) -> None:
    argv = ["--index", str(bm25_index), "--topics", f"{tiny_corpus}:test", "--output",
            str(tmp_path / "run.trec"), "--quiet", *flags]
    assert _error(argv, capsys).startswith(said)
    assert not (tmp_path / "run.trec").exists()


def test_a_bm25_search_keeps_only_the_default_device(bm25_index, tiny_corpus, tmp_path,
                                                      capsys) -> None:
    def search(name: str, *flags: str) -> int:
        return run_main(search_cli.main, ["--index", str(bm25_index), "--topics",
                                          f"{tiny_corpus}:test", "--output",
                                          str(tmp_path / f"{name}.trec"), "--quiet", *flags])

    assert search("plain") == 0 and search("auto", "--device", "auto") == 0
    assert read_trec_run(tmp_path / "plain.trec") == read_trec_run(tmp_path / "auto.trec")
    capsys.readouterr()
    assert search("cpu", "--device", "cpu") == 2 and not (tmp_path / "cpu.trec").exists()
    assert "--device: not used by a BM25 search" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--backend", "onnx"], ["--backend", "onnx-int8"],
                                   ["--device", "cpu"]])
def test_encoded_queries_refuse_the_encoders_runtime(tmp_path, capsys, flags) -> None:
    line = _error(["--retriever", "dense", *_base(tmp_path), "--encoded-queries",
                   str(tmp_path / "eq"), *flags], capsys)
    assert line.startswith("error: --encoded-queries replaces the query encoder:")
    assert flags[0] in line


# --- --run-tag in a format without a tag column ---------------------------------------------------


def test_msmarco_output_refuses_a_run_tag(tmp_path, capsys) -> None:
    line = _error([*_base(tmp_path), "--output-format", "msmarco", "--run-tag", "X"], capsys)
    assert line.startswith("error: --run-tag: --output-format msmarco has no tag column")


# --- queries encoded by another model than the index's --------------------------------------------


@pytest.fixture(scope="module")
def dense_ws(model_index_run: Callable[[Path], dict[str, Path]], tmp_path_factory) -> dict:
    ws = model_index_run(tmp_path_factory.mktemp("dense"))
    ws["encoded"] = ws["root"] / "encoded"
    assert encode_cli.main(["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test",
                            "--output", str(ws["encoded"]), "--device", "cpu"]) == 0
    return ws


def _search_encoded(ws: dict, encoded: Path, out: Path) -> int:
    return run_main(search_cli.main, ["--index", str(ws["index"]), "--topics",
                                      f"{ws['corpus']}:test", "--encoded-queries", str(encoded),
                                      "--output", str(out), "--quiet"])


def _table(ws: dict, folder: Path, attrs: dict) -> Path:
    """The encoded queries of ``ws`` rewritten with ``attrs`` (another model's record, none)."""
    frame = pd.read_pickle(ws["encoded"] / eq.EMBEDDING_FILE)
    frame.attrs = attrs
    folder.mkdir()
    frame.to_pickle(folder / eq.EMBEDDING_FILE)
    return folder


def test_encode_queries_records_the_encoder(dense_ws, tmp_path) -> None:
    from pyserini_moe.index.meta import read_meta

    made_by = pd.read_pickle(dense_ws["encoded"] / eq.EMBEDDING_FILE).attrs[eq.FINGERPRINT]
    assert made_by == read_meta(dense_ws["index"]).encoder_fingerprint
    assert sorted(p.name for p in dense_ws["encoded"].iterdir()) == [eq.EMBEDDING_FILE]
    assert _search_encoded(dense_ws, dense_ws["encoded"], tmp_path / "run.trec") == 0


def test_queries_of_another_model_are_refused(dense_ws, tmp_path, capsys) -> None:
    other = _table(dense_ws, tmp_path / "other", {eq.FINGERPRINT: "0123456789abcdef"})
    assert _search_encoded(dense_ws, other, tmp_path / "run.trec") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds queries encoded by another model (fingerprint " \
                             "0123456789abcdef)" in err[0]
    assert not (tmp_path / "run.trec").exists()


def test_queries_that_record_no_encoder_are_searched_with_a_warning(dense_ws, tmp_path,
                                                                    caplog) -> None:
    older = _table(dense_ws, tmp_path / "older", {})
    with caplog.at_level(logging.WARNING):
        assert _search_encoded(dense_ws, older, tmp_path / "older.trec") == 0
    said = [r for r in caplog.records if "records no encoder" in r.getMessage()]
    assert len(said) == 1
    assert _search_encoded(dense_ws, dense_ws["encoded"], tmp_path / "own.trec") == 0
    assert read_trec_run(tmp_path / "older.trec") == read_trec_run(tmp_path / "own.trec")


@pytest.mark.parametrize("extra,message", [
    (["--hits", "99999999999"], "must be <= 2147483647"),
    (["--k1", "-1"], "BM25 needs --k1 >= 0 and --b in [0, 1]"),
    (["--b", "7"], "BM25 needs --k1 >= 0 and --b in [0, 1]"),
])
def test_search_values_java_cannot_take(bm25_ws, tmp_path, capsys, extra, message) -> None:
    refused(search_cli.main, ["--index", str(bm25_ws["bm25"]), "--topics", f"{bm25_ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec"), *extra], message, capsys)


def test_a_collection_or_a_damaged_index_as_index(bm25_ws, tmp_path, capsys) -> None:
    refused(search_cli.main, ["--index", str(bm25_ws["corpus"]), "--topics", f"{bm25_ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec")],
            "is not a Lucene index (it looks like a collection)", capsys)
    broken = tmp_path / "bm25"
    shutil.copytree(bm25_ws["bm25"], broken)
    for segments in broken.glob("segments*"):
        segments.unlink()
    refused(search_cli.main, ["--index", str(broken), "--topics", f"{bm25_ws['corpus']}:test",
                              "--output", str(tmp_path / "o.trec")], "no segments file", capsys)


# --- field weights that score nothing --------------------------------------------------------------


def test_field_weights_that_are_all_zero_are_refused(tmp_path, capsys) -> None:
    """'--fields contents=0' gave a run in which every score was 0."""
    line = _error([*_base(tmp_path), "--fields", "contents=0", "title=0.0"], capsys)
    assert line == ("error: --fields contents=0 title=0: every weight is 0, so every document "
                    "would score 0: give at least one field a weight above 0")
    assert not (tmp_path / "run.trec").exists()


def test_a_negative_field_weight_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as done:  # argparse refuses it before any work
        run_main(search_cli.main, [*_base(tmp_path), "--fields", "contents=-1", "title=1"])
    assert done.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "argument --fields: 'contents=-1': expected FIELD=WEIGHT with a weight >= 0, "
        "e.g. title=1.0")
    assert not (tmp_path / "run.trec").exists()


def test_a_run_inside_an_index_or_a_model_folder_is_refused(ws, tmp_path, capsys,
                                                           error_line) -> None:
    """Accepted, the folder then held a run its --overwrite refused as not the toolkit's."""
    from pyserini_moe.index.meta import write_meta

    other = tmp_path / "other-index"
    other.mkdir()
    write_meta(other, "dense", encoder="/models/m", encoder_fingerprint="m")
    for folder, kind in ((other, "an index"), (Path(ws["model"]), "a model")):
        argv = ["--index", str(ws["index"]), "--topics", f"{ws['corpus']}:test", "--output",
                str(folder / "run.trec"), "--device", "cpu", "--quiet"]
        line = error_line(search_cli.main, argv, capsys)
        assert f"is inside {folder.resolve()}, {kind}: write it elsewhere" in line
        assert not (folder / "run.trec").exists()
