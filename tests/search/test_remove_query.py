"""``--remove-query`` (Pyserini's flag, BEIR ArguAna): every retriever drops the hit that is the
query itself and still returns ``--hits`` hits; fusing such runs cannot bring it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.runs import ranked, read_trec_run, write_trec_run
from pyserini_moe.search import __main__ as search_cli
from pyserini_moe.search.base import remove_query

pytestmark = pytest.mark.usefixtures("one_thread")
WORDS = ["cat", "dog", "mat", "sat", "dense", "sparse", "expert", "model", "query", "passage",
         "retrieval", "mixture", "argument", "counter", "school"]
QUERY_IDS = ("d2", "d7", "d11", "d16")  # ArguAna's form: each query is a corpus document
HITS = 10  # deep enough that every retriever finds some query itself, random weights and all


def test_remove_query_drops_the_own_id_and_keeps_the_best_hits() -> None:
    run = {"q1": {"q1": 9.0, "a": 5.0, "b": 4.0, "c": 3.0}, "q2": {"a": 2.0, "b": 1.0}}
    assert remove_query(run, 2) == {"q1": {"a": 5.0, "b": 4.0}, "q2": {"a": 2.0, "b": 1.0}}
    assert remove_query(run) == {"q1": {"a": 5.0, "b": 4.0, "c": 3.0}, "q2": run["q2"]}


@pytest.fixture(scope="module")
def arguana_like(tmp_path_factory) -> Path:
    """A BEIR folder whose queries are four of its documents, word for word."""
    root = tmp_path_factory.mktemp("arguana-like")
    docs = {f"d{i}": " ".join(["debate", "zq" + "abcdefghijklmnopqrst"[i]]
                              + [WORDS[(i * k) % len(WORDS)] for k in range(1, 4 + i % 5)])
            for i in range(20)}  # "debate" everywhere: BM25 finds every document; "zqX": one
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q, "text": docs[q]}) + "\n" for q in QUERY_IDS))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\td{(int(q[1:]) + 1) % 20}\t1\n" for q in QUERY_IDS))
    return root


@pytest.fixture(scope="module")
def indexes(arguana_like, bert3, tmp_path_factory) -> dict[str, str]:
    """BM25, and CAME's impact, multi-vector and dense indexes from one encoding pass."""
    from pyserini_moe.modeling import CameEncoder

    out = tmp_path_factory.mktemp("indexes")
    torch.manual_seed(0)
    model = CameEncoder.from_backbone(bert3, shared_layers=1, dim=16, pooling="mean", device="cpu")
    with torch.no_grad():  # lexical weights above 0 (as after training): impact hits exist
        model.heads["lexical"].bias.add_(0.5)
    came = str(model.save(out / "came"))
    kinds = ("impact", "multivector", "dense")
    paths = {kind: str(out / kind) for kind in kinds}
    assert index_cli.main(["--retriever", *kinds, "--corpus", str(arguana_like), "--index",
                           *paths.values(), "--encoder", came, "--device", "cpu", "--quiet"]) == 0
    assert index_cli.main(["--corpus", str(arguana_like), "--index", str(out / "bm25"),
                           "--quiet"]) == 0
    return {"bm25": str(out / "bm25"), **paths}


def search(corpus: Path, out: Path, *args: str) -> dict:
    device = [] if args[:2] == ("--retriever", "bm25") else ["--device", "cpu"]  # BM25: no model
    assert run_main(search_cli.main, [*args, "--topics", f"{corpus}:test", "--output", str(out),
                                      *device, "--quiet"]) == 0
    return read_trec_run(out)


def same_ranking(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for qid in expected:
        assert [d for d, _ in ranked(got[qid])] == [d for d, _ in ranked(expected[qid])]


@pytest.mark.parametrize("retriever", ["bm25", "dense", "impact", "multivector", "dense+bm25",
                                       "fused"])
def test_every_retriever_drops_the_query_and_keeps_hits(arguana_like, indexes, retriever,
                                                        tmp_path) -> None:
    """With the flag: the run one hit deeper (a hybrid's sides and a fusion's experts one
    candidate deeper), less the query's own id, ``--hits`` deep."""
    if retriever == "dense+bm25":
        args = ["--retriever", "dense", "--index", indexes["dense"], "--bm25-index",
                indexes["bm25"]]
    elif retriever == "fused":
        args = ["--retriever", "fused", "--index", indexes["impact"], indexes["multivector"],
                indexes["dense"], "--expert-runs"]
    else:
        args = ["--retriever", retriever, "--index", indexes[retriever]]

    def with_experts(name: str, candidates: int) -> list[str]:
        if retriever == "fused":
            return [*args, str(tmp_path / name), "--candidates", str(candidates)]
        return [*args, "--candidates", str(candidates)] if retriever == "dense+bm25" else args

    plain = search(arguana_like, tmp_path / "plain.trec", *with_experts("plain", 16), "--hits",
                   str(HITS + 1))
    dropped = search(arguana_like, tmp_path / "dropped.trec", *with_experts("dropped", 15),
                     "--hits", str(HITS), "--remove-query")
    assert any(qid in hits for qid, hits in plain.items())  # the query found itself
    if retriever in ("bm25", "multivector"):  # identical text: the query is its own best hit
        assert all(ranked(hits)[0][0] == qid for qid, hits in plain.items())
    same_ranking(dropped, remove_query(plain, HITS))
    assert all(len(hits) == HITS and qid not in hits for qid, hits in dropped.items())
    if retriever == "fused":  # each expert's own run loses the query too, and keeps 15
        for kind in ("impact", "multivector", "dense"):
            expert = read_trec_run(tmp_path / f"dropped.{kind}.trec")
            assert not any(qid in hits for qid, hits in expert.items())
            plain_order = _file_order(tmp_path / f"plain.{kind}.trec")  # as ranked exactly:
            assert _file_order(tmp_path / f"dropped.{kind}.trec") == {  # scores read back tie
                qid: [d for d in docs if d != qid][:15] for qid, docs in plain_order.items()}


def _file_order(path: Path) -> dict[str, list[str]]:
    """Each query's documents in the order of the run file's lines (its rank column)."""
    order: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, *_ = line.split()
        order.setdefault(qid, []).append(docid)
    return order


def test_fusing_runs_without_the_query_cannot_bring_it_back(tmp_path) -> None:
    a = {"q1": {"q1": 9.0, "d1": 3.0, "d2": 2.0}, "q2": {"d3": 1.0, "q2": 0.5}}
    b = {"q1": {"d2": 5.0, "q1": 4.0}, "q2": {"q2": 3.0, "d1": 2.0}}
    for name, run in (("a", a), ("b", b), ("a-rq", remove_query(a)), ("b-rq", remove_query(b))):
        write_trec_run(run, tmp_path / f"{name}.trec")
    for method in ("rrf", "came_sum", "combmnz", "hybrid"):
        out = tmp_path / f"{method}.trec"
        assert fuse.main(["--runs", str(tmp_path / "a-rq.trec"), str(tmp_path / "b-rq.trec"),
                          "--method", method, "--output", str(out)]) == 0
        fused = read_trec_run(out)
        assert fused and not any(qid in hits for qid, hits in fused.items())
        flagged = tmp_path / f"{method}-flag.trec"  # runs searched without it, fused with it
        assert fuse.main(["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                          "--method", method, "--output", str(flagged), "--remove-query"]) == 0
        assert read_trec_run(flagged) == fused


def test_the_notice_says_what_remove_query_drops() -> None:
    """On Cranfield or CISI query 1 and document 1 only share an id; dropping document 1 from
    query 1's hits must not be silent."""
    from pyserini_moe.search.base import remove_query_notice, self_hits

    arguana = {"d2": {"d2": 9.0, "a": 5.0}, "d7": {"d7": 8.0, "b": 1.0}, "d9": {"a": 1.0}}
    cranfield = {"1": {"9": 5.0, "1": 2.0}, "2": {"4": 3.0, "7": 2.5, "2": 1.0}, "3": {"3": 4.0}}
    assert self_hits(arguana) == (2, 2) and self_hits(cranfield) == (3, 1)
    assert remove_query_notice(*self_hits(arguana), len(arguana)) == (
        "note: --remove-query dropped the document of the query's own id for 2 of 3 queries (2 "
        "of them ranked first)")
    assert "look like other documents that share a query's id" in remove_query_notice(
        *self_hits(cranfield), len(cranfield))
    assert "dropped nothing" in remove_query_notice(*self_hits({"q1": {"d1": 1.0}}), 1)


def test_a_search_says_what_it_dropped_and_which_queries_found_nothing(arguana_like, indexes,
                                                                      tmp_path, capsys) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_text("d2\t" + (arguana_like / "corpus.jsonl").read_text().splitlines()[2]
                      .split('"text": "')[1].split('"')[0] + "\nnothing\tthe of and\n")
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", indexes["bm25"],
                                      "--topics", str(topics), "--output",
                                      str(tmp_path / "run.trec"), "--remove-query",
                                      "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "dropped the document of the query's own id for 1 of 2 queries (1 of them ranked " \
           "first)" in err
    assert "warning: 1 of 2 queries retrieved nothing (e.g. nothing: 'the of and')" in err
