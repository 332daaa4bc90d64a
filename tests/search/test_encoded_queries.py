"""Queries encoded by ``encode_queries`` make Pyserini's own command lines (pyserini.search.faiss
--encoded-queries, pyserini.search.lucene --impact --encoder FILE.jsonl) return the runs
``python -m pyserini_moe.search`` returns with the model itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.export import write_topics_tsv
from pyserini_moe.modeling import CotMoteEncoder
from pyserini_moe.runs import ranked, read_trec_run

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tiny_bert, tiny_corpus, tmp_path_factory) -> tuple[Path, dict[str, Path], Path]:
    root = tmp_path_factory.mktemp("encoded-queries")
    torch.manual_seed(0)
    model = CotMoteEncoder.from_backbone(tiny_bert, sparse_top_k=12, device="cpu")
    folder = str(model.save(root / "model"))
    indexes = {kind: root / kind for kind in ("dense", "impact")}
    assert index_cli.main(["--retriever", "dense", "impact", "--corpus", str(tiny_corpus),
                           "--index", str(indexes["dense"]), str(indexes["impact"]),
                           "--encoder", folder, "--device", "cpu", "--quiet"]) == 0
    topics = root / "topics.tsv"
    write_topics_tsv(BeirCollection(tiny_corpus).topics("test"), topics)
    return root, indexes, topics


def pyserini(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def same_run(ours: Path, theirs: Path) -> None:
    a, b = read_trec_run(ours), read_trec_run(theirs)
    assert a.keys() == b.keys()
    for qid in a:
        assert [d for d, _ in ranked(a[qid])] == [d for d, _ in ranked(b[qid])]
        assert [s for _, s in ranked(a[qid])] == pytest.approx([s for _, s in ranked(b[qid])],
                                                               abs=1e-4)


@pytest.mark.parametrize("kind", ["dense", "impact"])
def test_pyserini_searches_with_our_encoded_queries(setup, tiny_corpus, kind) -> None:
    root, indexes, topics = setup
    ours = root / f"{kind}.ours.trec"
    assert search_cli.main(["--retriever", kind, "--index", str(indexes[kind]), "--topics",
                            str(topics), "--output", str(ours), "--hits", "10", "--device",
                            "cpu", "--quiet"]) == 0
    encoded = root / ("encoded-dense" if kind == "dense" else "encoded-impact.jsonl")
    assert encode_cli.main(["--index", str(indexes[kind]), "--topics", str(topics),
                            "--output", str(encoded), "--device", "cpu"]) == 0
    theirs = root / f"{kind}.pyserini.trec"
    if kind == "dense":
        pyserini("pyserini.search.faiss", "--index", str(indexes[kind]), "--topics", str(topics),
                 "--encoded-queries", str(encoded), "--output", str(theirs), "--hits", "10")
    else:
        pyserini("pyserini.search.lucene", "--impact", "--index", str(indexes[kind]),
                 "--topics", str(topics), "--encoder", str(encoded), "--output", str(theirs),
                 "--hits", "10")
    same_run(ours, theirs)


def test_a_multivector_index_has_no_pyserini_form(setup, tmp_path, capsys) -> None:
    root, indexes, topics = setup
    index = tmp_path / "multivector"  # the output is not inside it: that is refused first
    index.mkdir()
    (index / "pyserini_moe_index.json").write_text('{"kind": "multivector", "encoder": "m"}')
    assert run_main(encode_cli.main, ["--index", str(index), "--topics", str(topics),
                                      "--output", str(tmp_path / "out")]) == 2
    assert "not 'multivector'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _encoded(setup, kind: str) -> Path:
    root, indexes, topics = setup
    encoded = root / ("back-dense" if kind == "dense" else "back-impact.jsonl")
    if not encoded.exists():
        assert encode_cli.main(["--index", str(indexes[kind]), "--topics", str(topics),
                                "--output", str(encoded), "--device", "cpu"]) == 0
    return encoded


@pytest.mark.parametrize("kind", ["dense", "impact"])
def test_search_reads_encoded_queries_back(setup, kind, tmp_path) -> None:
    """Pyserini's --encoded-queries habit: the run equals the model's own, and no model is
    loaded to get it."""
    root, indexes, topics = setup
    ours, back = tmp_path / "model.trec", tmp_path / "encoded.trec"
    base = ["--retriever", kind, "--index", str(indexes[kind]), "--topics", str(topics),
            "--hits", "10", "--quiet"]
    assert search_cli.main([*base, "--output", str(ours), "--device", "cpu"]) == 0
    assert search_cli.main([*base, "--output", str(back), "--encoded-queries",
                            str(_encoded(setup, kind))]) == 0
    same_run(ours, back)


def test_a_pickle_that_would_run_code_is_refused_unrun(setup, tmp_path, capsys) -> None:
    import pickle  # noqa: PLC0415

    root, indexes, topics = setup
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "embedding.pkl").write_bytes(pickle.dumps(Payload()))
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(indexes["dense"]),
                                      "--topics", str(topics), "--output", str(tmp_path / "r"),
                                      "--encoded-queries", str(folder), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "not loaded" in err and "pathlib" in err
    assert not marker.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("writer", "said"), [
    (lambda f: f.write_bytes(b"\x80\x04garbage"), "not a readable pickle"),
    (lambda f: __import__("pandas").DataFrame({"q": ["a"]}).to_pickle(f), "columns 'text'"),
    (lambda f: __import__("pandas").DataFrame(
        {"text": ["x"], "embedding": [__import__("numpy").ones(3)]}).to_pickle(f),
     "3 dimensions"),
])
def test_damaged_or_foreign_encoded_queries_are_one_line(setup, tmp_path, capsys, writer,
                                                         said) -> None:
    root, indexes, topics = setup
    folder = tmp_path / "q"
    folder.mkdir()
    writer(folder / "embedding.pkl")
    code = run_main(search_cli.main, ["--retriever", "dense", "--index", str(indexes["dense"]),
                                      "--topics", str(topics), "--output", str(tmp_path / "r"),
                                      "--encoded-queries", str(folder), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err


def test_a_query_not_encoded_is_named(setup, tmp_path, capsys) -> None:
    root, indexes, topics = setup
    other = tmp_path / "other.tsv"
    other.write_text("q9\ta query nobody encoded\n")
    code = run_main(search_cli.main, ["--retriever", "impact", "--index", str(indexes["impact"]),
                                      "--topics", str(other), "--output", str(tmp_path / "r"),
                                      "--encoded-queries", str(_encoded(setup, "impact")),
                                      "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "no encoding of the query 'a query nobody encoded'" in err


def test_impact_queries_cut_to_fewer_terms_search_as_search_cuts_them(setup, tmp_path,
                                                                      caplog) -> None:
    """encode_queries takes --query-max-terms, and what a file was cut at is not left unsaid:
    the cut is recorded and a search of another one is warned of."""
    root, indexes, topics = setup
    encoded = tmp_path / "three.jsonl"
    assert encode_cli.main(["--index", str(indexes["impact"]), "--topics", str(topics),
                            "--output", str(encoded), "--device", "cpu",
                            "--query-max-terms", "3"]) == 0
    base = ["--retriever", "impact", "--index", str(indexes["impact"]), "--topics", str(topics),
            "--hits", "10", "--quiet"]
    cut, back = tmp_path / "cut.trec", tmp_path / "back.trec"
    assert search_cli.main([*base, "--output", str(cut), "--device", "cpu",
                            "--query-max-terms", "3"]) == 0
    with caplog.at_level("WARNING", logger="pyserini_moe"):
        assert search_cli.main([*base, "--output", str(back), "--encoded-queries",
                                str(encoded)]) == 0
    same_run(cut, back)
    assert [r.getMessage() for r in caplog.records if "were encoded with" in r.getMessage()] == [
        f"warning: {encoded} were encoded with --query-max-terms 3 (a search with the encoder: "
        "1024): they are searched as encoded; encode them again to search as the encoder would"]


@pytest.mark.parametrize(("flags", "warned"), [([], False), (["--query-max-length", "4"], True)])
def test_dense_queries_encoded_at_another_length_are_warned_of(setup, tmp_path, caplog, flags,
                                                               warned) -> None:
    root, indexes, topics = setup
    encoded = tmp_path / "dense"
    assert encode_cli.main(["--index", str(indexes["dense"]), "--topics", str(topics),
                            "--output", str(encoded), "--device", "cpu", *flags]) == 0
    with caplog.at_level("WARNING", logger="pyserini_moe"):
        assert search_cli.main(["--retriever", "dense", "--index", str(indexes["dense"]),
                                "--topics", str(topics), "--hits", "10", "--quiet", "--output",
                                str(tmp_path / "run.trec"), "--encoded-queries",
                                str(encoded)]) == 0
    said = [r.getMessage() for r in caplog.records if "were encoded with" in r.getMessage()]
    assert len(said) == warned
    assert not said or "--query-max-length 4 (a search with the encoder: " in said[0]


def test_query_max_terms_for_a_dense_index_is_refused(setup, tmp_path, capsys) -> None:
    root, indexes, topics = setup
    assert run_main(encode_cli.main, ["--index", str(indexes["dense"]), "--topics", str(topics),
                                      "--output", str(tmp_path / "q"),
                                      "--query-max-terms", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --query-max-terms cuts impact queries; {indexes['dense']} is a dense index: "
        "leave it out")


def test_impact_queries_of_another_quantisation_are_refused(setup, tiny_corpus, tmp_path,
                                                            capsys) -> None:
    """Queries quantised for an index at 100 must not search one of the same model at 50
    without a word: doubled scores, other rankings."""
    root, indexes, topics = setup
    half = tmp_path / "impact-50"
    assert index_cli.main(["--retriever", "impact", "--corpus", str(tiny_corpus), "--index",
                           str(half), "--encoder", str(root / "model"), "--device", "cpu",
                           "--quantization", "50", "--quiet"]) == 0
    encoded = _encoded(setup, "impact")  # quantised for the index at 100
    capsys.readouterr()
    assert run_main(search_cli.main, ["--retriever", "impact", "--index", str(half), "--topics",
                                      str(topics), "--output", str(tmp_path / "run.trec"),
                                      "--encoded-queries", str(encoded), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {encoded}: its weights were quantised with factor 100, the documents of "
        f"{half} with 50: encode the topics with `python -m pyserini_moe.encode_queries "
        f"--index {half}`")
    assert not (tmp_path / "run.trec").exists()


def test_impact_queries_put_together_from_two_encodings_are_refused(setup, tmp_path) -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.encoded_queries import read_encoded_queries

    lines = _encoded(setup, "impact").read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(lines[0] + "\n" + lines[1].replace('"quantization": 100',
                                                        '"quantization": 50') + "\n")
    with pytest.raises(UserError, match="holds queries encoded 2 different ways"):
        read_encoded_queries(mixed, "impact")


def test_a_crafted_arrow_array_in_encoded_queries_is_one_line_not_a_crash(tmp_path) -> None:
    """pandas 3 pickles string columns as Arrow arrays, whose offsets pyarrow trusts: an offset
    past the data read out of bounds (SIGSEGV). The reader checks every offset first."""
    import pickle

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.lib

    from pyserini_moe.errors import UserError
    from pyserini_moe.io import read_dataframe_pickle

    frame = pd.DataFrame({"text": ["a query", "another"], "embedding": [np.ones(3), np.zeros(3)]})
    good = tmp_path / "good.pkl"
    frame.to_pickle(good)
    assert read_dataframe_pickle(good).equals(frame)  # a real pandas pickle still reads

    class Crafted:
        def __reduce__(self):
            offsets = pa.py_buffer(np.array([0, 1_000_000, 2_000_000], np.int32).tobytes())
            return (pyarrow.lib._restore_array,
                    ((pa.string(), 2, 0, 0, [None, offsets, pa.py_buffer(b"abc")], [], None),))

    bad = tmp_path / "embedding.pkl"
    bad.write_bytes(pickle.dumps(Crafted()))
    with pytest.raises(UserError, match=r"embedding.pkl: not a readable pickle .*offsets"):
        read_dataframe_pickle(bad)


def test_one_query_text_with_two_vectors_is_refused(tmp_path) -> None:
    """A search looks encoded queries up by text: two vectors for one text would let one win
    in silence. The same vector twice is harmless and read."""
    import json

    import numpy as np
    import pandas as pd

    from pyserini_moe.errors import UserError
    from pyserini_moe.search.encoded_queries import read_encoded_queries

    dense = tmp_path / "dense"
    dense.mkdir()
    pd.DataFrame({"text": ["q", "q"], "embedding": [np.ones(3), np.ones(3)]}).to_pickle(
        dense / "embedding.pkl")
    assert list(read_encoded_queries(dense, "dense")) == ["q"]
    pd.DataFrame({"text": ["q", "q "], "embedding": [np.ones(3), np.zeros(3)]}).to_pickle(
        dense / "embedding.pkl")
    with pytest.raises(UserError, match="'q' is there twice with two different vectors"):
        read_encoded_queries(dense, "dense")
    impact = tmp_path / "impact.jsonl"
    impact.write_text("".join(json.dumps({"id": str(i), "contents": "q", "vector": {"a": w}}) + "\n"
                              for i, w in enumerate((3, 4))))
    with pytest.raises(UserError, match="twice with two different vectors"):
        read_encoded_queries(impact, "impact")
