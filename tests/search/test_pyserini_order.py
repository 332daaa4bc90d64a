"""Our BM25 (plain, RM3) and RRF runs diff line for line against Pyserini's own command lines on
one index: the same documents, ranks and scores, ties in Pyserini's order.

ArguAna's long queries tie often (300 of its queries: ~400 tied neighbours in the top 100), and
some equal float scores are not Lucene ties (Lucene ranks before the float rounding), so neither
docid order reproduces Lucene's: only keeping the searcher's order does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.cli import convert as convert_cli
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.index import __main__ as index_cli
from pyserini_moe.paths import shared_data_root
from pyserini_moe.search import __main__ as search_cli

pytestmark = pytest.mark.skipif(shared_data_root() is None
                                or not (shared_data_root() / "arguana").is_dir(),
                                reason="needs ../shared/data/arguana")

# Pyserini's BEIR BM25 parameters, which our --retriever bm25 uses by default
PYSERINI_BM25 = ["--bm25", "--k1", "0.9", "--b", "0.4"]


QUERIES = 300


@pytest.fixture(scope="module")
def arguana(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("arguana")
    index, topics = root / "index", root / "topics.tsv"
    assert index_cli.main(["--corpus", "arguana", "--index", str(index), "--quiet"]) == 0
    assert convert_cli.main(["--topics", "arguana:test", "--output", str(root / "all.tsv")]) == 0
    topics.write_text("".join((root / "all.tsv").read_text().splitlines(True)[:QUERIES]))
    return {"root": root, "index": index, "topics": topics}


def _lines(path: Path) -> list[tuple[str, ...]]:
    """(qid, docid, rank, score) of each line, queries in qid order (Pyserini writes them in its
    topic reader's order), each query's lines as written; the tag column is each tool's own."""
    lines = [tuple(line.split()[i] for i in (0, 2, 3, 4)) for line in path.read_text().splitlines()]
    return sorted(lines, key=lambda line: line[0])  # stable: a query's lines keep their order


def _pyserini_search(arguana: dict[str, Path], output: Path, *flags: str) -> Path:
    subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index",
                    str(arguana["index"]), "--topics", str(arguana["topics"]), "--output",
                    str(output), "--hits", "100", *PYSERINI_BM25, *flags],
                   check=True, capture_output=True)
    return output


def _ours(arguana: dict[str, Path], output: Path, *flags: str) -> Path:
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", str(arguana["index"]),
                                      "--topics", str(arguana["topics"]), "--output", str(output),
                                      "--hits", "100", "--quiet", *flags]) == 0
    return output


@pytest.mark.parametrize("flags", [(), ("--rm3",)], ids=["bm25", "bm25+rm3"])
def test_bm25_runs_diff_line_for_line(arguana, flags) -> None:
    root = arguana["root"]
    name = "-".join(["bm25", *(f.strip("-") for f in flags)])
    ours = _lines(_ours(arguana, root / f"{name}.ours.trec", *flags))
    theirs = _lines(_pyserini_search(arguana, root / f"{name}.pyserini.trec", *flags))
    assert len(ours) == QUERIES * 100
    if not flags:  # the check means something: many ties to order (RM3's weights tie rarely)
        assert _ties(ours) > 100
    assert ours == theirs


def _ties(lines: list[tuple[str, ...]]) -> int:
    """Neighbouring lines of one query with equal scores."""
    return sum(1 for a, b in zip(lines, lines[1:]) if a[0] == b[0] and a[3] == b[3])


def test_rrf_diffs_line_for_line(arguana) -> None:
    root = arguana["root"]
    a = _pyserini_search(arguana, root / "a.trec")
    b = _pyserini_search(arguana, root / "b.trec", "--rm3")
    subprocess.run([sys.executable, "-m", "pyserini.fusion", "--runs", str(a), str(b),
                    "--output", str(root / "rrf.pyserini.trec"), "--method", "rrf", "--k", "100"],
                   check=True, capture_output=True)
    assert run_main(fuse_cli.main, ["--runs", str(a), str(b), "--method", "rrf", "--k", "100",
                                    "--output", str(root / "rrf.ours.trec")]) == 0
    ours = _lines(root / "rrf.ours.trec")
    theirs = _lines(root / "rrf.pyserini.trec")  # Pyserini writes scores unrounded
    assert _ties(ours) > 100  # ranks (1, 3) and (3, 1) tie: Pyserini orders them by docid
    assert [line[:3] for line in ours] == [line[:3] for line in theirs]
    assert [float(line[3]) for line in ours] == pytest.approx([float(t[3]) for t in theirs],
                                                              abs=1e-6)


def test_max_passage_ranks_documents_as_pyserini(tmp_path) -> None:
    corpus = tmp_path / "passages"
    corpus.mkdir()
    texts = {"d1#0": "cats purr", "d1#1": "cats cats sleep", "d2#0": "dogs and cats",
             "d3#0": "birds", "d4#0": "cats and birds", "d4#1": "cats"}
    (corpus / "corpus.jsonl").write_text("".join(
        f'{{"_id": "{i}", "title": "", "text": "{t}"}}\n' for i, t in texts.items()))
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcats\nq2\tcats birds\n")
    index = tmp_path / "index"
    assert index_cli.main(["--corpus", str(corpus), "--index", str(index), "--quiet"]) == 0
    subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index", str(index),
                    "--topics", str(topics), "--output", str(tmp_path / "theirs.trec"),
                    *PYSERINI_BM25, "--max-passage", "--max-passage-hits", "2"],
                   check=True, capture_output=True)
    assert run_main(search_cli.main, ["--index", str(index), "--topics", str(topics),
                                      "--output", str(tmp_path / "ours.trec"), "--quiet",
                                      "--max-passage", "--max-passage-hits", "2"]) == 0
    ours = _lines(tmp_path / "ours.trec")
    assert len(ours) == 4 and all("#" not in line[1] for line in ours)  # 2 documents a query
    assert ours == _lines(tmp_path / "theirs.trec")


@pytest.mark.parametrize("flags, said", [
    (["--max-passage-hits", "5"], "--max-passage-hits: not used without --max-passage"),
])
def test_max_passage_flags_are_checked(tmp_path, capsys, flags, said) -> None:
    assert run_main(search_cli.main, ["--retriever", "bm25", "--index", str(tmp_path / "i"),
                                      "--topics", "q\ttext", "--output",
                                      str(tmp_path / "r.trec"), *flags]) == 2
    assert said in capsys.readouterr().err


def test_an_empty_max_passage_delimiter_is_refused() -> None:
    """The command line refuses any empty value; settings built in Python say why."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search import SearchSettings

    with pytest.raises(UserError, match="--max-passage-delimiter must not be empty"):
        SearchSettings(retriever="bm25", index="i", max_passage=True, max_passage_delimiter="")
