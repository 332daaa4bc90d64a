"""Hostile round 7, data writers and readers: dpr outputs (H7-37, 38, 40), gzip outputs (H7-42),
a damaged impact vectors file (H7-45), run outputs over other files (H7-49), an input listed
twice in pretrain (H7-14) and TREC SGML topics (H7-58)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyserini_moe.cli import convert as convert_cli
from pyserini_moe.cli import dpr as dpr_cli
from pyserini_moe.cli import pretrain as pretrain_cli
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.index.doc_vectors import write_doc_vectors
from pyserini_moe.runs import read_trec_run, write_trec_run

QA = "capital of france\t['Paris']\nwho is aaron\t['prophet']\n"
WIKI = "id\ttext\ttitle\n1\tAaron is a prophet\tAaron\n2\tParis is the capital\tParis\n"
RUN = "a Q0 d1 1 9.0 m\n"


def _biencoder(path: Path, positive: str = "2") -> Path:
    path.write_text(json.dumps([{"question": "capital of france", "answers": ["Paris"],
                                 "positive_ctxs": [{"passage_id": positive}],
                                 "hard_negative_ctxs": [{"passage_id": "1"}]}]))
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- H7-37


@pytest.mark.parametrize("command, source, name", [
    ("qa", QA, "nq.jsonl"), ("wiki", WIKI, "corpus.jsonl.gz"), ("merge-runs", RUN, "m.trec")])
def test_dpr_refuses_an_existing_output_without_overwrite(tmp_path, command, source, name):
    src = tmp_path / "in.txt"
    src.write_text(source)
    out = tmp_path / name
    mine = b"u Q0 d7 1 1.0 mine\n"  # a run, which merge-runs may replace (H7-49)
    out.write_bytes(mine)
    flag = "--runs" if command == "merge-runs" else "--input"
    argv = [command, flag, str(src), "--output", str(out)]
    with pytest.raises(FileExistsError, match="--overwrite"):
        dpr_cli.main(argv)
    assert out.read_bytes() == mine
    assert dpr_cli.main([*argv, "--overwrite"]) == 0
    assert out.read_bytes() != mine


# --------------------------------------------------------------------------- H7-38


def test_dpr_train_refuses_a_beir_collection_even_with_overwrite(tmp_path, tiny_corpus):
    coll = shutil.copytree(tiny_corpus, tmp_path / "coll")
    before = _snapshot(coll)
    train = ["train", "--train", f"nq={_biencoder(tmp_path / 'nq.json')}", "--output", str(coll)]
    for argv in (train, [*train, "--overwrite"]):
        with pytest.raises(FileExistsError, match="does not write"):
            dpr_cli.main(argv)
    assert _snapshot(coll) == before
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


# --------------------------------------------------------------------------- H7-40


def test_dpr_qa_refuses_a_prefix_with_whitespace(tmp_path):
    (tmp_path / "qa.csv").write_text(QA)
    out = tmp_path / "t.jsonl"
    with pytest.raises(UserError, match="no whitespace"):
        dpr_cli.main(["qa", "--input", str(tmp_path / "qa.csv"), "--output", str(out),
                      "--prefix", "a b"])
    assert not out.exists()


# --------------------------------------------------------------------------- H7-42


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


# --------------------------------------------------------------------------- H7-45


def test_a_damaged_vectors_file_names_the_shards_file_and_line(tmp_path):
    shard = tmp_path / "i-1" / "vectors.jsonl"
    shard.parent.mkdir()
    line = json.dumps({"id": "d0", "vector": {"cat": 3}}) + "\n"
    shard.write_text(line + line[:-10])  # an interrupted copy
    link = tmp_path / "links" / "vectors-00001.jsonl"  # as the merge reads the shards
    link.parent.mkdir()
    link.symlink_to(shard)
    with pytest.raises(UserError, match=f"^{shard}:2: not a vector line"):
        write_doc_vectors([link], tmp_path / "out")


# --------------------------------------------------------------------------- H7-49


@pytest.mark.parametrize("name, text", [
    ("queries.jsonl", '{"_id": "q0", "text": "x"}\n'),
    ("test.tsv", "query-id\tcorpus-id\tscore\nq0\td0\t1\n"),
    ("qrels.txt", "q0 0 d0 1\n")])
def test_a_run_output_replaces_a_run_but_not_another_file(tmp_path, name, text):
    target = tmp_path / name
    target.write_text(text)
    with pytest.raises(UserError, match="is not a run"):
        write_trec_run({"q0": {"d0": 1.0}}, target)
    assert target.read_text() == text
    earlier = tmp_path / "run.trec"
    earlier.write_text(RUN)
    write_trec_run({"q0": {"d0": 1.0}}, earlier)
    assert read_trec_run(earlier) == {"q0": {"d0": 1.0}}


# --------------------------------------------------------------------------- H7-14


@pytest.mark.parametrize("flags", [
    lambda c, f: ["--corpus", str(c), f"{c}/."],
    lambda c, f: ["--pseudo-queries", f"{c}={f}", f"other={f}"]])
def test_pretrain_refuses_an_input_listed_twice(tmp_path, tiny_bert, tiny_corpus, flags):
    pseudo = tmp_path / "pq.tsv"
    pseudo.write_text("d0\tcat\n")
    out = tmp_path / "out"
    with pytest.raises(UserError, match="are one input: give each once"):
        pretrain_cli.main(["--backbone", str(tiny_bert), *flags(tiny_corpus, pseudo),
                           "--output-dir", str(out), "--device", "cpu"])
    assert not out.exists()


# --------------------------------------------------------------------------- H7-58


def test_trec_sgml_topics_are_named_as_not_read(tmp_path):
    path = tmp_path / "tp-trec.txt"
    path.write_text("<top>\n<num> Number: 1\n<title> cats\n</top>\n")
    with pytest.raises(DataFormatError, match=r"SGML or XML \(<top>.*qid<TAB>text"):
        load_topics(str(path))


def test_search_and_fuse_refuse_a_non_run_output_before_the_work(tmp_path, capsys):
    """H7-49: the check runs before the search or fusion, not when the run is written."""
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
