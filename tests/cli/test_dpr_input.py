"""Unusual input to the ``dpr`` command (:mod:`pyserini_moe.cli.dpr`): outputs that exist,
are named for another format or sit beside another corpus, one file given as two sets, an
empty run to merge, and a failed conversion that must leave no folder behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyserini_moe.cli import dpr, run_main
from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.errors import UserError
from tests.helpers import folder_files, refused

QA = "capital of france\t['Paris']\nwho is aaron\t['prophet']\n"
WIKI = "id\ttext\ttitle\n1\tAaron is a prophet\tAaron\n2\tParis is the capital\tParis\n"
RUN = "a Q0 d1 1 9.0 m\n"


def test_a_conversion_refused_for_its_input_leaves_no_folder(tmp_path: Path, capsys) -> None:
    """a failed write removes the folders made for its output (and only those)."""
    from pyserini_moe import dpr

    (tmp_path / "bad.tsv").write_text("id\ttext\ttitle\nx\n")
    (tmp_path / "bad.csv").write_text("")
    out = tmp_path / "new" / "deeper"
    assert run_main(dpr.main, ["wiki", "--input", str(tmp_path / "bad.tsv"), "--output",
                               str(out / "corpus.jsonl.gz"), "--quiet"]) == 2
    assert not (tmp_path / "new").exists()
    assert run_main(dpr.main, ["qa", "--input", str(tmp_path / "bad.csv"), "--output",
                               str(out / "topics.jsonl")]) == 2
    assert not (tmp_path / "new").exists()
    capsys.readouterr()


def _biencoder(path: Path, positive: str = "2") -> Path:
    path.write_text(json.dumps([{"question": "capital of france", "answers": ["Paris"],
                                 "positive_ctxs": [{"passage_id": positive}],
                                 "hard_negative_ctxs": [{"passage_id": "1"}]}]))
    return path


@pytest.mark.parametrize("command, source, name", [
    ("qa", QA, "nq.jsonl"), ("wiki", WIKI, "corpus.jsonl.gz"), ("merge-runs", RUN, "m.trec")])
def test_dpr_refuses_an_existing_output_without_overwrite(tmp_path, command, source, name):
    src = tmp_path / "in.txt"
    src.write_text(source)
    out = tmp_path / name
    mine = b"u Q0 d7 1 1.0 mine\n"  # a run, which merge-runs may replace
    out.write_bytes(mine)
    flag = "--runs" if command == "merge-runs" else "--input"
    argv = [command, flag, str(src), "--output", str(out)]
    with pytest.raises(FileExistsError, match="--overwrite"):
        dpr_cli.main(argv)
    assert out.read_bytes() == mine
    assert dpr_cli.main([*argv, "--overwrite"]) == 0
    assert out.read_bytes() != mine


def test_dpr_train_refuses_a_beir_collection_even_with_overwrite(tmp_path, tiny_corpus):
    coll = shutil.copytree(tiny_corpus, tmp_path / "coll")
    before = folder_files(coll)
    train = ["train", "--train", f"nq={_biencoder(tmp_path / 'nq.json')}", "--output", str(coll)]
    for argv in (train, [*train, "--overwrite"]):
        with pytest.raises(FileExistsError, match="does not write"):
            dpr_cli.main(argv)
    assert folder_files(coll) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coll", "nq.json"]


def test_dpr_train_replaces_an_earlier_collection_whole_keeping_the_corpus(tmp_path):
    (tmp_path / "psgs.tsv").write_text(WIKI)
    out = tmp_path / "dpr"
    assert dpr_cli.main(["wiki", "--input", str(tmp_path / "psgs.tsv"), "--output",
                         str(out / "corpus.jsonl.gz"), "--quiet"]) == 0
    nq = _biencoder(tmp_path / "nq.json")
    trivia = _biencoder(tmp_path / "trivia.json", positive="1")
    dev = _biencoder(tmp_path / "nq-dev.json")  # not nq.json itself: dev = train is refused
    first = ["train", "--train", f"nq={nq}", f"trivia={trivia}", "--dev", f"nq={dev}",
             "--output", str(out)]
    assert dpr_cli.main(first) == 0  # into wiki's folder: the corpus alone is there
    again = ["train", "--train", f"nq={nq}", "--output", str(out)]
    with pytest.raises(FileExistsError, match="already holds a DPR collection"):
        dpr_cli.main(again)
    assert dpr_cli.main([*again, "--overwrite"]) == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "bm25-negatives.train.trec", "corpus.jsonl.gz", "qrels", "qrels/train.tsv",
        "queries.jsonl", "topics", "topics/train.nq.tsv"]  # no dev, no trivia left over
    assert BeirCollection(out).qrels("train") == {"nq-train-0": {"2": 1}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dpr", "nq-dev.json", "nq.json",
                                                          "psgs.tsv", "trivia.json"]


def test_dpr_qa_refuses_a_prefix_with_whitespace(tmp_path):
    (tmp_path / "qa.csv").write_text(QA)
    out = tmp_path / "t.jsonl"
    with pytest.raises(UserError, match="no whitespace"):
        dpr_cli.main(["qa", "--input", str(tmp_path / "qa.csv"), "--output", str(out),
                      "--prefix", "a b"])
    assert not out.exists()


# --- dpr train, one file as two sets --------------------------------------------------------------


@pytest.mark.parametrize("sets, second", [
    (["--train", "nq=F", "trivia=./F"], "--train trivia=./F"),
    (["--train", "nq=F", "--dev", "nq=./F"], "--dev nq=./F")])
def test_dpr_train_refuses_one_file_as_two_sets(tmp_path, monkeypatch, capsys, sets,
                                                second, error_line) -> None:
    monkeypatch.chdir(tmp_path)
    Path("F").write_text("[]")
    error = error_line(dpr_cli.main, ["train", *sets, "--output", "coll"], capsys)
    assert error == f"error: --train nq=F and {second} are one DPR file: give each once"
    assert not Path("coll").exists()


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


# --- dpr wiki, a gzipped corpus beside a plain one ------------------------------------------------


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


def test_merging_an_empty_run_is_refused(bm25_ws, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.trec"
    empty.write_text("")
    refused(dpr.main, ["merge-runs", "--runs", str(empty), str(bm25_ws["run"]), "--output",
                       str(tmp_path / "m.trec")], "the run is empty", capsys)
