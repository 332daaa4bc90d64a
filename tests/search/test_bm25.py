"""BM25 end to end through Pyserini: index and search command lines, errors, and SciFact's 2CR."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.index.meta import IndexMismatchError, read_meta, write_meta
from pyserini_moe.paths import shared_data_root
from pyserini_moe.runs import read_trec_run
from pyserini_moe.search import __main__ as search_cli


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 4-document BEIR collection with 2 judged queries."""
    root = tmp_path_factory.mktemp("tiny")
    docs = [("d1", "Cats", "cats purr and sleep all day"), ("d2", "Dogs", "dogs bark at the mailman"),
            ("d3", "Birds", "birds sing in the morning"), ("d4", "", "fish swim; cats watch fish")]
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "cats"}\n{"_id": "q2", "text": "bark"}\n')
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


@pytest.fixture(scope="module")
def tiny_index(tiny, tmp_path_factory) -> Path:
    index = tmp_path_factory.mktemp("idx") / "bm25"
    assert index_cli.main(["--corpus", str(tiny), "--index", str(index)]) == 0
    return index


def test_index_records_what_built_it(tiny_index):
    meta = read_meta(tiny_index)
    assert meta.kind == "bm25" and meta.num_docs == 4
    assert meta.contents == "title + ' ' + text"


def test_search_writes_trec_run(tiny, tiny_index, tmp_path):
    out = tmp_path / "run.trec"
    assert search_cli.main(["--index", str(tiny_index), "--topics", f"{tiny}:test",
                            "--output", str(out), "--hits", "3", "--quiet"]) == 0
    run = read_trec_run(out)
    assert list(run) == ["q1", "q2"]
    assert max(run["q1"], key=run["q1"].get) == "d1"  # title + text: "Cats cats ..."
    assert list(run["q2"]) == ["d2"]
    assert set(run["q1"]) == {"d1", "d4"}
    lines = out.read_text().splitlines()
    assert lines[0].split()[1] == "Q0" and lines[0].split()[3] == "1" and lines[0].endswith("bm25")


def test_bm25_parameters_change_scores(tiny, tiny_index, tmp_path):
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    base = ["--index", str(tiny_index), "--topics", f"{tiny}:test", "--quiet"]
    search_cli.main([*base, "--output", str(a)])
    search_cli.main([*base, "--output", str(b), "--k1", "1.2", "--b", "0.75"])
    assert read_trec_run(a)["q1"] != read_trec_run(b)["q1"]


def test_existing_index_needs_overwrite(tiny, tiny_index, capsys):
    assert run_main(index_cli.main, ["--corpus", str(tiny), "--index", str(tiny_index)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_failed_build_leaves_no_index(tiny, tmp_path, monkeypatch):
    from pyserini_moe.index import lucene

    def crash(args):
        Path(args[args.index("-index") + 1], "segments_1").write_text("partial")
        raise lucene.IndexingError("disk full")

    monkeypatch.setattr(lucene, "run_index_collection", crash)
    target = tmp_path / "idx"
    with pytest.raises(lucene.IndexingError):
        lucene.build_bm25_index(str(tiny), target)
    assert list(tmp_path.iterdir()) == []


def test_arguments_anserini_refuses_are_an_error_not_an_empty_index(tiny, tmp_path):
    """IndexCollection prints its refusal and returns normally: the build must not then record an
    index with no segments as written."""
    from pyserini_moe.index import lucene

    with pytest.raises(lucene.IndexingError, match="wrote no index"):
        lucene.run_index_collection(["-collection", "JsonCollection", "-input", str(tmp_path),
                                     "-index", str(tmp_path / "idx"), "-threads", "many"])


def test_search_refuses_an_index_of_another_kind(tiny, tmp_path, capsys):
    fake = tmp_path / "dense-index"
    fake.mkdir()
    write_meta(fake, "dense")
    code = run_main(search_cli.main, ["--retriever", "bm25", "--index", str(fake), "--topics",
                                      f"{tiny}:test", "--output", str(tmp_path / "r.trec")])
    assert code == 2 and "is a dense index" in capsys.readouterr().err
    assert not (tmp_path / "r.trec").exists()
    with pytest.raises(IndexMismatchError):
        from pyserini_moe.search.bm25 import Bm25Searcher
        Bm25Searcher(fake)


@pytest.mark.parametrize("argv, message", [
    (["--corpus", "no-such-collection", "--index", "x"], "no-such-collection"),
    (["--corpus", "scifact", "--index", "x", "--threads", "0"], "--threads must be >= 1"),
    (["--corpus", "scifact", "--index", "x", "--threads", "3000000000"], "Java's limit"),
])
def test_index_cli_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(index_cli.main, argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--topics", "nowhere/topics.tsv"], "nowhere/topics.tsv"),
    (["--topics", "TINY:nosplit"], "nosplit"),
    (["--hits", "0"], "--hits must be >= 1"),
])
def test_search_cli_errors(tiny, tiny_index, tmp_path, extra, message, capsys):
    topics = [] if "--topics" in extra else ["--topics", f"{tiny}:test"]
    argv = ["--index", str(tiny_index), *topics, "--output", str(tmp_path / "r")]
    argv += [a.replace("TINY", str(tiny)) for a in extra]
    assert run_main(search_cli.main, argv) == 2
    assert message in capsys.readouterr().err


def test_search_missing_index_is_clear(tiny, tmp_path, capsys):
    argv = ["--index", str(tmp_path / "nope"), "--topics", f"{tiny}:test", "--output", str(tmp_path / "r")]
    assert run_main(search_cli.main, argv) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["pyserini_moe.index", "pyserini_moe.search", "pyserini_moe.eval",
                                    "pyserini_moe.regress"])
def test_help(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage:" in proc.stdout


@pytest.mark.skipif(shared_data_root() is None, reason="needs ../shared/data")
def test_scifact_reproduces_pyserini_2cr_and_trec_eval_agrees(tmp_path):
    """BM25 flat on SciFact test: Pyserini's published nDCG@10 0.6789 / R@100 0.9253.

    The same run is evaluated by ranx and by Pyserini's trec_eval; they must agree to 1e-4.
    """
    from pyserini_moe.data.topics import load_qrels, qrels_file
    from pyserini_moe.eval.metrics import evaluate, trec_eval

    index, run_path = tmp_path / "index", tmp_path / "run.trec"
    assert index_cli.main(["--corpus", "scifact", "--index", str(index)]) == 0
    assert search_cli.main(["--index", str(index), "--topics", "scifact:test", "--output",
                            str(run_path), "--hits", "1000", "--threads", "2", "--quiet"]) == 0
    run = read_trec_run(run_path)
    assert len(run) == 300 and max(len(h) for h in run.values()) == 1000
    ours = evaluate(run, load_qrels("scifact:test"), ["ndcg@10", "recall@100"])
    assert ours["ndcg@10"] == pytest.approx(0.6789, abs=5e-5)
    assert ours["recall@100"] == pytest.approx(0.9253, abs=5e-5)
    reference = trec_eval(run_path, qrels_file("scifact:test", workdir=tmp_path), ["ndcg@10", "recall@100"])
    for metric in ours:
        assert ours[metric] == pytest.approx(reference[metric], abs=1e-4)


@pytest.fixture(scope="module")
def multifield_index(tiny, tmp_path_factory) -> Path:
    index = tmp_path_factory.mktemp("idx") / "bm25-multifield"
    assert index_cli.main(["--corpus", str(tiny), "--index", str(index), "--layout",
                           "multifield", "--quiet"]) == 0
    return index


def test_multifield_index_searches_the_title_apart(tiny, tiny_index, multifield_index,
                                                   tmp_path):
    """Pyserini's BEIR multifield layout: contents = text, the title its own field; --fields
    picks what is searched ("cats" is d1's title and in d1's and d4's text)."""
    meta = read_meta(multifield_index)
    assert (meta.layout, meta.contents, meta.fields) == ("multifield", "text",
                                                        ["contents", "title"])
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcats\n")

    def docs(index: Path, *fields: str) -> set[str]:
        out = tmp_path / "run.trec"
        assert search_cli.main(["--index", str(index), "--topics", str(topics), "--output",
                                str(out), "--quiet", *(["--fields", *fields] if fields else [])]) == 0
        return set(read_trec_run(out)["q1"])

    assert docs(multifield_index, "title=1.0") == {"d1"}
    assert docs(multifield_index) == docs(multifield_index, "contents=1.0") == {"d1", "d4"}
    assert docs(multifield_index, "contents=1.0", "title=1.0") == {"d1", "d4"}
    assert docs(tiny_index) == {"d1", "d4"}


@pytest.mark.parametrize("argv, message", [
    (["--fields", "contents=1.0", "title=1.0"], "has no title field"),
    (["--fields", "title"], "expected FIELD=WEIGHT"),
    (["--fields", "title=-1"], "expected FIELD=WEIGHT"),
])
def test_fields_errors(tiny, tiny_index, tmp_path, argv, message, capsys):
    argv = ["--index", str(tiny_index), "--topics", f"{tiny}:test", "--output",
            str(tmp_path / "r.trec"), *argv]
    try:
        code = run_main(search_cli.main, argv)
    except SystemExit as e:  # argparse's own refusals exit by themselves
        code = e.code
    assert code == 2 and message in capsys.readouterr().err


def test_layout_is_a_bm25_option(tiny, tmp_path, capsys):
    argv = ["--retriever", "dense", "--corpus", str(tiny), "--index", str(tmp_path / "x"),
            "--encoder", "none", "--layout", "multifield"]
    assert run_main(index_cli.main, argv) == 2
    assert "--layout applies to BM25 indexes" in capsys.readouterr().err


@pytest.mark.skipif(shared_data_root() is None, reason="needs ../shared/data")
def test_arguana_remove_query_long_queries_and_missing_judged_documents(tmp_path, caplog):
    """Real ArguAna through the BM25 command lines, on its first 100 test queries and its
    longest (868 words): no query retrieves itself with --remove-query and 100 hits remain;
    the 5 judged documents the corpus lacks are said once and kept (trec_eval's qrels hold
    them, and ranx agrees with trec_eval). The full 2CR numbers: regressions/bm25-beir.yaml."""
    from pyserini_moe.data import beir
    from pyserini_moe.data.export import write_topics_tsv
    from pyserini_moe.data.topics import load_qrels, load_topics, qrels_file
    from pyserini_moe.eval.metrics import evaluate, trec_eval

    beir._WARNED.clear()  # said once a process: another test may have read these qrels first
    with caplog.at_level("WARNING", logger="pyserini_moe.data.beir"):
        topics, qrels = load_topics("arguana:test"), load_qrels("arguana:test")
    assert sum("5 judged documents are not in the corpus" in r.getMessage()
               for r in caplog.records) == 1
    longest = max(topics, key=lambda q: len(topics[q].split()))
    subset = {q: topics[q] for q in [*list(topics)[:100], longest]}
    write_topics_tsv(subset, tmp_path / "topics.tsv")
    index, run_path = tmp_path / "index", tmp_path / "run.trec"
    assert index_cli.main(["--corpus", "arguana", "--index", str(index), "--quiet"]) == 0
    assert search_cli.main(["--index", str(index), "--topics", str(tmp_path / "topics.tsv"),
                            "--output", str(run_path), "--hits", "100", "--remove-query",
                            "--quiet"]) == 0
    run = read_trec_run(run_path)
    assert set(run) == set(subset) and all(len(h) == 100 and q not in h for q, h in run.items())
    trec_qrels = qrels_file("arguana:test", workdir=tmp_path)
    assert "test-politics-dhwem-pro06b" in trec_qrels.read_text()  # a judged, missing document
    ours = evaluate(run, qrels, ["ndcg@10", "recall@100"])  # the other queries count 0 (-c)
    reference = trec_eval(run_path, trec_qrels, ["ndcg@10", "recall@100"])
    assert ours == pytest.approx(reference, abs=1e-4)


@pytest.mark.parametrize("flag,configure", [
    ("--rm3", lambda s: (s.set_bm25(0.9, 0.4), s.set_rm3())),
    ("--rocchio", lambda s: (s.set_bm25(0.9, 0.4), s.set_rocchio())),
    ("--qld", lambda s: s.set_qld()),
])
def test_query_expansion_and_qld_are_pyserinis_own(tiny, tiny_index, tmp_path, flag,
                                                   configure):
    """--rm3 / --rocchio / --qld: the run is Pyserini's LuceneSearcher's, configured the same,
    hit for hit (docids, order and scores)."""
    from pyserini_moe import _java

    out = tmp_path / "run.trec"
    assert search_cli.main(["--index", str(tiny_index), "--topics", f"{tiny}:test", flag,
                            "--output", str(out), "--hits", "4", "--quiet"]) == 0
    _java.bootstrap()
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(tiny_index))
    configure(searcher)
    ours = read_trec_run(out)
    for qid, text in (("q1", "cats"), ("q2", "bark")):
        theirs = {h.docid: round(h.score, 6) for h in searcher.search(text, k=4)}
        assert {d: round(s, 6) for d, s in ours[qid].items()} == theirs
        assert list(ours[qid]) == list(theirs)


def test_expansions_are_bm25_settings(tiny_index, capsys):
    assert run_main(search_cli.main, ["--index", str(tiny_index), "--topics", "x", "--rm3",
                                      "--rocchio", "--output", "o.trec"]) == 2
    assert "choose one" in capsys.readouterr().err
    assert run_main(search_cli.main, ["--index", str(tiny_index), "--topics", "x", "--qld",
                                      "--k1", "1.2", "--output", "o.trec"]) == 2
    assert "--qld scores by query likelihood" in capsys.readouterr().err
