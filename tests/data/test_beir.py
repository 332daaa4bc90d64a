"""BEIR-layout loading: the happy path, every validation error (with file:line), downloads, real data."""

from __future__ import annotations

import gzip
import json
import re
import zipfile
from pathlib import Path

import pytest

from pyserini_moe.data import beir
from pyserini_moe.data.beir import BeirCollection, Document, resolve_collection
from pyserini_moe.errors import DataFormatError
from pyserini_moe.paths import shared_data_root

DOCS = [
    {"_id": "d1", "title": "Alpha", "text": "first document"},
    {"_id": "d2", "title": "", "text": "second document"},
    {"_id": 3, "title": "Gamma", "text": "third"},
]
QUERIES = [{"_id": 1, "text": "what is alpha"}, {"_id": "q2", "text": "second"},
           {"_id": "q3", "text": "never judged"}]
QRELS = "query-id\tcorpus-id\tscore\nq2\td2\t1\n1\td1\t2\n1\t3\t0\n"


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def make_collection(root: Path, docs: list | None = None, queries: list | None = None,
                    qrels: str = QRELS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    jsonl(root / "corpus.jsonl", DOCS if docs is None else docs)
    jsonl(root / "queries.jsonl", QUERIES if queries is None else queries)
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return root


def at(path: Path, line: int | None = None) -> str:
    """Regex for the ``file[:line]:`` prefix of a DataFormatError message."""
    return "^" + re.escape(f"{path}:{line}:" if line is not None else f"{path}:")


def write_corpus_lines(tmp_path: Path, lines: list[str]) -> BeirCollection:
    root = make_collection(tmp_path / "c")
    (root / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return BeirCollection(root)


# --------------------------------------------------------------------------- happy path


def test_document_contents_joins_title_and_text() -> None:
    assert Document("1", "Title", "body").contents == "Title body"
    assert Document("1", "", "body").contents == "body"
    assert Document("1", "Title", "").contents == "Title"


def test_small_collection(tmp_path: Path) -> None:
    c = BeirCollection(make_collection(tmp_path / "mini"))
    assert c.name == "mini"
    docs = list(c.corpus())
    assert docs[0] == Document("d1", "Alpha", "first document")
    assert [d.id for d in docs] == ["d1", "d2", "3"]  # int ids become str
    assert c.num_docs() == 3
    assert c.queries() == {"1": "what is alpha", "q2": "second", "q3": "never judged"}
    assert c.splits() == ["test"]
    assert c.qrels("test") == {"q2": {"d2": 1}, "1": {"d1": 2, "3": 0}}
    # judged queries only (a 0 grade still counts as judged), in qrels order of first appearance
    assert list(c.topics("test").items()) == [("q2", "second"), ("1", "what is alpha")]


def test_gzipped_files_and_cached_results_are_copies(tmp_path: Path) -> None:
    root = make_collection(tmp_path / "gz")
    for stem in ("corpus", "queries"):
        plain = root / f"{stem}.jsonl"
        (root / f"{stem}.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    c = BeirCollection(root)
    assert c.num_docs() == 3
    c.qrels("test")["q2"]["d2"] = 99
    c.queries()["1"] = "changed"
    assert c.qrels("test")["q2"] == {"d2": 1}
    assert c.queries()["1"] == "what is alpha"


def test_missing_title_or_null_is_empty(tmp_path: Path) -> None:
    c = write_corpus_lines(tmp_path, ['{"_id": "a", "text": "x"}',
                                      '{"_id": "b", "title": null, "text": "y"}'])
    assert [d.title for d in c.corpus()] == ["", ""]


# --------------------------------------------------------------------------- corpus errors


@pytest.mark.parametrize(("line2", "message"), [
    ('{"_id": "x", "text": ', "malformed JSON"),
    ('["_id", "x"]', "expected a JSON object, found list"),
    ('{"title": "t", "text": "no id"}', 'document has no "_id"'),
    ('{"_id": "has space", "text": "t"}', "invalid document id 'has space'"),
    ('{"_id": "x", "title": "t"}', 'missing "text"'),
    ('{"_id": "x", "text": 5}', '"text" must be a string'),
    ('{"_id": "d1", "text": "again"}', r"duplicate document id 'd1' \(first seen at line 1\)"),
    # a lone surrogate escape: a traceback in indexing (Lucene, the tokenizer, the docid file)
    ('{"_id": "x", "text": "brain\\ud800 cell"}', "holds '\\\\ud800', half of a UTF-16 "
                                                  "surrogate pair"),
    ('{"_id": "x\\udc00", "text": "t"}', "holds '\\\\udc00', half of a UTF-16 surrogate pair"),
])
def test_corpus_errors_name_file_and_line(tmp_path: Path, line2: str, message: str) -> None:
    c = write_corpus_lines(tmp_path, ['{"_id": "d1", "text": "ok"}', line2])
    with pytest.raises(DataFormatError, match=at(c.corpus_path, 2) + " " + message) as info:
        list(c.corpus())
    assert info.value.line == 2 and info.value.path == c.corpus_path


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    c = write_corpus_lines(tmp_path, ['{"_id": "a", "text": "x"}', "", "   ", "{oops"])
    with pytest.raises(DataFormatError, match=at(c.corpus_path, 4)):
        list(c.corpus())


def test_empty_corpus(tmp_path: Path) -> None:
    c = write_corpus_lines(tmp_path, [""])
    with pytest.raises(DataFormatError, match=at(c.corpus_path) + " no documents"):
        c.num_docs()


def test_invalid_utf8_and_truncated_gzip(tmp_path: Path) -> None:
    root = make_collection(tmp_path / "c")
    (root / "corpus.jsonl").write_bytes(b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "\xff"}\n')
    c = BeirCollection(root)
    with pytest.raises(DataFormatError, match=at(c.corpus_path, 2) + " not valid UTF-8"):
        list(c.corpus())
    (root / "corpus.jsonl").unlink()
    data = gzip.compress(b"".join(json.dumps(d).encode() + b"\n" for d in DOCS * 50))
    (root / "corpus.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match=at(root / "corpus.jsonl.gz") + r"\d+: unreadable or truncated"):
        list(BeirCollection(root).corpus())


def test_missing_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nowhere"))):
        BeirCollection(tmp_path / "nowhere")
    root = make_collection(tmp_path / "c")
    (root / "corpus.jsonl").unlink()
    c = BeirCollection(root)
    with pytest.raises(FileNotFoundError, match=re.escape(str(root / "corpus")) + r"\.jsonl\(\.gz\)"):
        c.corpus()  # eagerly, before iteration
    (root / "queries.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(root / "queries"))):
        c.queries()
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels").rmdir()
    with pytest.raises(FileNotFoundError, match=re.escape(str(root / "qrels")) + ": no qrels directory"):
        c.splits()


# --------------------------------------------------------------------------- queries errors


@pytest.mark.parametrize(("rows", "line", "message"), [
    ([{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}], 2,
     "duplicate query id 'a' \\(first seen at line 1\\)"),
    ([{"_id": "a", "text": "x"}, {"text": "y"}], 2, 'query has no "_id"'),
    ([{"_id": "a", "text": "  "}], 1, "empty text for query 'a'"),
    ([{"_id": 1.5, "text": "x"}], 1, "query id must be a string or an integer"),
])
def test_query_errors(tmp_path: Path, rows: list, line: int, message: str) -> None:
    c = BeirCollection(make_collection(tmp_path / "c", queries=rows))
    with pytest.raises(DataFormatError, match=at(c.queries_path, line) + " " + message):
        c.queries()


# --------------------------------------------------------------------------- qrels errors


@pytest.mark.parametrize(("qrels", "line", "message"), [
    ("query-id\tcorpus-id\tscore\n1\td1\t1\nq9\td1\t1\n", 3, "unknown query id 'q9'"),
    ("qid\tdocid\tscore\n1\td1\t1\n", 1, "bad header"),
    ("1\td1\t1\n", 1, "bad header"),
    ("query-id\tcorpus-id\tscore\n1\td1\tyes\n", 2, "score must be an integer, found 'yes'"),
    ("query-id\tcorpus-id\tscore\n1\td1\n", 2, "expected 3 tab-separated columns"),
    ("query-id\tcorpus-id\tscore\n1\td1\t1\n1\td1\t2\n", 3, "conflicting scores"),
])
def test_qrels_errors(tmp_path: Path, qrels: str, line: int, message: str) -> None:
    root = make_collection(tmp_path / "c", qrels=qrels)
    c = BeirCollection(root)
    with pytest.raises(DataFormatError, match=at(root / "qrels" / "test.tsv", line) + " " + message):
        c.qrels("test")
    with pytest.raises(DataFormatError, match=at(root / "qrels" / "test.tsv", line)):
        c.topics("test")


def test_judged_documents_missing_from_the_corpus_are_kept_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ArguAna judges 5 documents its corpus lacks: refusing would make it unusable, dropping
    them would raise recall above the published numbers (trec_eval and BEIR count them)."""
    root = make_collection(tmp_path / "c", qrels=QRELS + "q2\tgone1\t1\n1\tgone2\t1\n")
    c = BeirCollection(root)
    with caplog.at_level("WARNING", logger="pyserini_moe.data.beir"):
        qrels, topics = c.qrels("test"), c.topics("test")
        BeirCollection(root).qrels("test")  # a second reader of the same file: not said again
    assert qrels == {"q2": {"d2": 1, "gone1": 1}, "1": {"d1": 2, "3": 0, "gone2": 1}}
    assert list(topics) == ["q2", "1"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "2 judged documents are not in the corpus (e.g. 'gone1', line 5)" in warnings[0]
    assert str(root / "qrels" / "test.tsv") in warnings[0]


def test_missing_judged_documents_count_in_recall(tmp_path: Path) -> None:
    """The judgments of documents no run can retrieve stay in every denominator, as in
    trec_eval -c: a run finding the one judged document the corpus holds has recall 1/2."""
    from pyserini_moe.data.topics import load_qrels
    from pyserini_moe.eval.metrics import evaluate

    root = make_collection(tmp_path / "c", qrels="query-id\tcorpus-id\tscore\nq2\td2\t1\n"
                                                 "q2\tgone\t1\n")
    qrels = load_qrels(f"{root}:test")
    assert evaluate({"q2": {"d2": 1.0, "d1": 0.5}}, qrels, ["recall@10"]) == {"recall@10": 0.5}


def test_qrels_without_judgments(tmp_path: Path) -> None:
    root = make_collection(tmp_path / "c", qrels="query-id\tcorpus-id\tscore\n")
    with pytest.raises(DataFormatError, match=at(root / "qrels" / "test.tsv") + " no judgments"):
        BeirCollection(root).qrels("test")
    (root / "qrels" / "test.tsv").write_text("")
    with pytest.raises(DataFormatError, match=at(root / "qrels" / "test.tsv") + " empty qrels file"):
        BeirCollection(root).qrels("test")


def test_unknown_split_lists_available(tmp_path: Path) -> None:
    root = make_collection(tmp_path / "c")
    (root / "qrels" / "train.tsv").write_text(QRELS)
    with pytest.raises(ValueError, match="unknown split 'dev'.*available splits: test, train"):
        BeirCollection(root).topics("dev")


# --------------------------------------------------------------------------- resolving names


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "shared"
    make_collection(root / "mini")
    monkeypatch.setenv("PYSERINI_MOE_DATA", str(root))
    monkeypatch.setenv("PYSERINI_MOE_CACHE", str(tmp_path / "cache"))
    return root


def test_resolve_directory_and_local_name(data_root: Path) -> None:
    assert resolve_collection(str(data_root / "mini")) == data_root / "mini"
    assert resolve_collection("mini") == data_root / "mini"
    assert BeirCollection.load("mini").num_docs() == 3


def test_unknown_collection_lists_local_ones(data_root: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"unknown collection 'nope'.*available: mini\).*scifact"):
        BeirCollection.load("nope")


def test_restricted_beir_dataset(data_root: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'robust04' is not publicly downloadable"):
        resolve_collection("robust04")


def _beir_zip(path: Path, name: str) -> Path:
    """A zip laid out like the UKP ones: everything under one ``<name>/`` folder."""
    src = make_collection(path.parent / "src" / name)
    with zipfile.ZipFile(path, "w") as zf:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f"{name}/{f.relative_to(src)}")
    return path


def test_download_unzips_into_cache_once(data_root: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    served = tmp_path / "server"
    served.mkdir()
    _beir_zip(served / "nfcorpus.zip", "nfcorpus")
    monkeypatch.setattr(beir, "BEIR_URL", served.as_uri() + "/{name}.zip")
    folder = resolve_collection("nfcorpus")
    datasets = tmp_path / "cache" / "datasets"
    assert folder == datasets / "nfcorpus"
    assert sorted(p.name for p in datasets.iterdir()) == ["nfcorpus"]  # zip and temporaries gone
    assert BeirCollection.load("nfcorpus").qrels("test")["q2"] == {"d2": 1}
    monkeypatch.setattr(beir, "BEIR_URL", (tmp_path / "gone").as_uri() + "/{name}.zip")
    assert resolve_collection("nfcorpus") == folder  # cached: no second download


def test_download_failure_is_clear_and_leaves_nothing(data_root: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beir, "BEIR_URL", (tmp_path / "offline").as_uri() + "/{name}.zip")
    with pytest.raises(ConnectionError, match="could not download the data set.*pass a local directory"):
        resolve_collection("fiqa")
    datasets = tmp_path / "cache" / "datasets"
    assert not datasets.exists() or not any(datasets.iterdir())


def test_corrupt_download_is_deleted(data_root: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    served = tmp_path / "server"
    served.mkdir()
    (served / "quora.zip").write_bytes(b"not a zip")
    monkeypatch.setattr(beir, "BEIR_URL", served.as_uri() + "/{name}.zip")
    archive = tmp_path / "cache" / "datasets" / "quora.zip"
    with pytest.raises(DataFormatError, match=at(archive) + " not a valid zip archive"):
        resolve_collection("quora")
    assert not any((tmp_path / "cache" / "datasets").iterdir())


# --------------------------------------------------------------------------- the real collections

SHARED = shared_data_root()
needs_shared = pytest.mark.skipif(SHARED is None or not (SHARED / "scifact").is_dir(),
                                  reason="shared offline collections not found (set PYSERINI_MOE_DATA)")


@needs_shared
def test_scifact_counts() -> None:
    c = BeirCollection.load("scifact")
    assert c.num_docs() == 5183
    assert c.splits() == ["test", "train"]
    test, train = c.qrels("test"), c.qrels("train")
    assert (len(c.topics("test")), sum(map(len, test.values()))) == (300, 339)
    assert (len(c.topics("train")), sum(map(len, train.values()))) == (809, 919)
    assert next(iter(c.corpus())).id == "4983"


@needs_shared
@pytest.mark.parametrize(("name", "docs", "judged", "judgments"), [
    ("cranfield", 1400, 225, 1837), ("cisi", 1460, 76, 3114), ("vaswani", 11429, 93, 2083),
])
def test_other_collections_load(name: str, docs: int, judged: int, judgments: int) -> None:
    c = BeirCollection.load(name)
    assert c.num_docs() == docs
    assert c.splits() == ["test"]
    assert len(c.topics("test")) == judged
    assert sum(map(len, c.qrels("test").values())) == judgments


@pytest.mark.parametrize("bad", ["d\x001", "d\x1b[31m"])
def test_an_id_with_a_control_character_is_refused_where_it_is_read(tmp_path, bad) -> None:
    """A NUL byte in a document id reached the runs and broke trec_eval: refused at the line."""
    import json

    from pyserini_moe.data.beir import BeirCollection
    from pyserini_moe.errors import DataFormatError

    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": bad, "text": "a"}) + "\n")
    with pytest.raises(DataFormatError, match=r"corpus.jsonl:1: invalid document id .*control"):
        list(BeirCollection.load(tmp_path).corpus())
