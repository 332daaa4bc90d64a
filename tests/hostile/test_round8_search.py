"""Cases of the eighth hostile pass on the search layer: a ``--fields`` field given twice, model
settings on a search that loads no model, settings of index kinds a (fused) search has none of,
a fused expert that retrieves nothing, ``--run-tag`` in the msmarco format, ``--remove-query``
leaving hybrids and experts short, encoded queries gzipped, undecodable or of another model."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from pyserini_moe.cli import encode_queries as encode_cli
from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import run_main
from pyserini_moe.cli import search as search_cli
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import write_meta
from pyserini_moe.runs import Run, read_trec_run
from pyserini_moe.search import dispatch
from pyserini_moe.search import encoded_queries as eq
from pyserini_moe.search.dispatch import SearchSettings, search_topics
from pyserini_moe.search.experts import ExpertFusionSearcher

pytestmark = pytest.mark.usefixtures("one_thread")


def _error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one error line a refused search prints (exit 2)."""
    assert run_main(search_cli.main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _base(tmp_path: Path, index: str | None = None) -> list[str]:
    return ["--index", index or str(tmp_path / "no-index"), "--topics", str(tmp_path / "t.tsv"),
            "--output", str(tmp_path / "run.trec"), "--quiet"]


# H8-09: one field, two weights ------------------------------------------------------------------

def test_a_field_given_twice_is_refused(tmp_path, capsys) -> None:
    line = _error([*_base(tmp_path), "--fields", "contents=1", "contents=2"], capsys)
    assert line.startswith("error: --fields: the field 'contents' is given twice "
                           "(contents=1 and contents=2)")
    assert not (tmp_path / "run.trec").exists()


# H8-14 / H8-15: --backend and --device where no model is loaded -------------------------------

@pytest.fixture(scope="module")
def bm25_index(tiny_corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("r8-bm25") / "bm25"
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


# H8-17 / H8-18: settings of index kinds the search has none of -------------------------------

@pytest.mark.parametrize("given, said", [
    ({"retriever": "dense", "faiss_params": "nprobe=2"},
     "--faiss-params: not used by a dense search; leave it out"),
    ({"retriever": "multivector", "query_max_terms": 5},
     "--query-max-terms: not used by a multivector search; leave it out"),
    ({"retriever": "fused", "index": ["a", "b"], "ef_search": 5},
     "--ef-search: not used by a fused search; leave it out"),
    ({"retriever": "dense", "faiss_params": "nprobe=2", "alpha": 0.5},
     "--faiss-params: not used by a dense search; --alpha: not used by a dense search without "
     "--bm25-index; leave them out"),
])
def test_the_message_suggests_bm25_index_only_where_it_helps(given, said) -> None:
    with pytest.raises(UserError) as caught:
        SearchSettings(**{"index": "i", **given})
    assert str(caught.value) == said


def _kinds(tmp_path: Path, *kinds: str) -> list[str]:
    """Index folders that record ``kinds`` (the settings read nothing else of them)."""
    folders = []
    for kind in kinds:
        (tmp_path / kind).mkdir()
        write_meta(tmp_path / kind, kind)
        folders.append(str(tmp_path / kind))
    return folders


@pytest.mark.parametrize("kinds, setting, said", [
    (("multivector", "dense"), {"query_max_terms": 1},
     "--query-max-terms: not used by a fused search of multivector and dense indexes"),
    (("impact", "dense"), {"faiss_params": "efSearch=5"},
     "--faiss-params: not used by a fused search of impact and dense indexes"),
])
def test_a_fused_search_refuses_what_none_of_its_indexes_reads(tmp_path, kinds, setting,
                                                               said) -> None:
    with pytest.raises(UserError, match=f"^{said}; leave it out$"):
        SearchSettings(retriever="fused", index=_kinds(tmp_path, *kinds), **setting)
    (tmp_path / "all").mkdir()  # with the index kind that reads it, it is taken
    every = _kinds(tmp_path / "all", "impact", "multivector", "dense")
    assert SearchSettings(retriever="fused", index=every, **setting)


# H8-20: --run-tag in a format without a tag column --------------------------------------------

def test_msmarco_output_refuses_a_run_tag(tmp_path, capsys) -> None:
    line = _error([*_base(tmp_path), "--output-format", "msmarco", "--run-tag", "X"], capsys)
    assert line.startswith("error: --run-tag: --output-format msmarco has no tag column")


# Searches over fixed rankings: what search_topics asks of its searchers, without an index ----

class _Ranked:
    """A searcher returning each query's fixed ranking, as deep as asked, and noting how deep
    it was asked; ``cut_at`` logs the query encoder's cut-queries warning as a model would."""

    def __init__(self, kind: str, rankings: dict[str, list[str]], cut_at: int | None = None):
        self.kind, self.index, self.rankings, self.cut_at = kind, f"idx/{kind}", rankings, cut_at
        self.asked: list[int] = []

    def search(self, topics: dict[str, str], hits: int = 1000, **_: object) -> Run:
        self.asked.append(hits)
        if self.cut_at is not None:
            logging.getLogger("pyserini_moe.encode.adapters").warning(
                "queries longer than %d tokens are cut", self.cut_at,
                extra={"queries_cut_at": self.cut_at})
        return {q: {d: 10.0 - i for i, d in enumerate(self.rankings.get(q, [])[:hits])}
                for q in topics}


def _fusion(*experts: _Ranked) -> ExpertFusionSearcher:
    """An expert fusion over ``experts`` (its fusion code, the experts' fixed rankings)."""
    fusion = object.__new__(ExpertFusionSearcher)
    fusion.searchers = list(experts)
    return fusion


TOPICS = {"d0": "the first document", "d1": "the second document"}
# ArguAna's form: each query is a document, which both sides rank first
SELF_FIRST = {"d0": ["d0", "a", "b", "c", "d"], "d1": ["d1", "b", "c", "a", "d"]}


def _search(monkeypatch, s: SearchSettings, main: object, bm25: object = None):
    monkeypatch.setattr(dispatch, "_open", lambda _: (main, bm25))
    return search_topics(s, TOPICS)


# H8-27 / H8-29: --remove-query keeps --hits and --candidates ----------------------------------

def test_a_hybrid_searches_one_more_candidate_a_side(monkeypatch) -> None:
    model, bm25 = _Ranked("dense", SELF_FIRST), _Ranked("bm25", SELF_FIRST)
    s = SearchSettings("dense", "d", bm25_index="b", hits=3, candidates=3, remove_query=True)
    outcome = _search(monkeypatch, s, model, bm25)
    assert model.asked == [4] and bm25.asked == [4]
    assert {q: len(hits) for q, hits in outcome.run.items()} == {"d0": 3, "d1": 3}
    assert not any(q in hits for q, hits in outcome.run.items())


def test_fused_experts_keep_their_candidates(monkeypatch) -> None:
    experts = [_Ranked(kind, SELF_FIRST) for kind in ("impact", "multivector", "dense")]
    s = SearchSettings("fused", ["i", "m", "d"], hits=3, candidates=3, remove_query=True)
    outcome = _search(monkeypatch, s, _fusion(*experts))
    assert all(e.asked == [4] for e in experts)
    for run in (outcome.run, *outcome.expert_runs.values()):
        assert {q: len(hits) for q, hits in run.items()} == {"d0": 3, "d1": 3}
        assert not any(q in hits for q, hits in run.items())


def test_the_experts_cut_queries_are_one_notice(monkeypatch, caplog) -> None:
    experts = [_Ranked(kind, SELF_FIRST, cut_at=8) for kind in ("impact", "dense")]
    s = SearchSettings("fused", ["i", "d"], hits=2, candidates=3, quiet=True)
    with caplog.at_level(logging.WARNING):
        outcome = _search(monkeypatch, s, _fusion(*experts))
    assert not [r for r in caplog.records if r.name == "pyserini_moe.encode.adapters"]
    cut = [n for n in outcome.notices if "tokens are cut" in n]
    assert cut == ["warning: queries longer than 8 tokens are cut (--query-max-length)"]


# H8-19: a fused expert that retrieves nothing -------------------------------------------------

@pytest.mark.parametrize("fusion, weights", [("rrf", None), ("combsum", None),
                                             ("combmnz", None), ("wsum", [1.0, 2.0, 3.0])])
def test_an_expert_that_retrieves_nothing_is_left_out_of_the_fusion(monkeypatch, fusion,
                                                                    weights) -> None:
    experts = [_Ranked("impact", {}), _Ranked("multivector", SELF_FIRST),
               _Ranked("dense", SELF_FIRST)]
    s = SearchSettings("fused", ["i", "m", "d"], hits=3, candidates=5, fusion=fusion,
                       fusion_weights=weights)
    outcome = _search(monkeypatch, s, _fusion(*experts))
    assert {q: list(hits)[:1] for q, hits in outcome.run.items()} == {"d0": ["d0"], "d1": ["d1"]}
    assert any(n.startswith("warning: the impact index idx/impact retrieved nothing for any "
                            "query") for n in outcome.notices)


def test_one_expert_left_is_its_own_ranking(monkeypatch) -> None:
    experts = [_Ranked("impact", {}), _Ranked("dense", SELF_FIRST)]
    s = SearchSettings("fused", ["i", "d"], hits=2, candidates=5, fusion="rrf")
    outcome = _search(monkeypatch, s, _fusion(*experts))
    assert {q: list(hits) for q, hits in outcome.run.items()} == {"d0": ["d0", "a"],
                                                                  "d1": ["d1", "b"]}


# H8-32 / H8-33: impact encoded queries, gzipped or not UTF-8 --------------------------------

def _fake_encoder(monkeypatch, made_by: str = "f" * 16) -> None:
    """encode_queries' searcher, without an index: weights per query, a model's fingerprint."""
    def encode_batch(texts):
        return [{"cat": 3, "dog": len(t)} for t in texts]

    encoder = SimpleNamespace(model=SimpleNamespace(fingerprint=made_by), max_length=64,
                              encode_batches=lambda batches: map(encode_batch, batches))
    monkeypatch.setattr(eq, "open_searcher", lambda *a, **k: SimpleNamespace(
        query_encoder=encoder, query_max_terms=1024, meta=SimpleNamespace(quantization=100)))


def test_impact_queries_named_gz_are_gzip(monkeypatch, tmp_path) -> None:
    _fake_encoder(monkeypatch)
    out = tmp_path / "q.jsonl.gz"
    for overwrite in (False, True):  # an output it wrote is replaced as its own
        eq.encode_queries("idx", "impact", TOPICS, out, overwrite=overwrite)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    lines = gzip.decompress(out.read_bytes()).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(TOPICS)
    vectors, made_by, encoding = eq.read_encoded_queries_made_by(out, "impact")
    assert vectors["the first document"] == {"cat": 3, "dog": 18} and made_by == "f" * 16
    assert encoding == {"query_max_length": 64, "query_max_terms": 1024, "quantization": 100}


def test_impact_queries_gzipped_elsewhere_are_read(tmp_path) -> None:
    record = {"id": "q1", "contents": "cat", "vector": {"cat": 5}}
    out = tmp_path / "q.jsonl.gz"
    out.write_bytes(gzip.compress((json.dumps(record) + "\n").encode()))
    assert eq.read_encoded_queries(out, "impact") == {"cat": {"cat": 5}}


def test_impact_queries_not_in_utf8_are_one_line(tmp_path) -> None:
    record = {"id": "q1", "contents": "cat", "vector": {"cat": 5}}
    out = tmp_path / "q.jsonl"
    out.write_bytes((json.dumps(record) + "\n").encode("utf-16"))
    with pytest.raises(UserError, match=r"q\.jsonl:1: not valid UTF-8") as caught:
        eq.read_encoded_queries(out, "impact")
    assert "\n" not in str(caught.value)


# H8-34: queries encoded by another model than the index's ------------------------------------

@pytest.fixture(scope="module")
def dense_ws(model_index_run: Callable[[Path], dict[str, Path]], tmp_path_factory) -> dict:
    ws = model_index_run(tmp_path_factory.mktemp("r8-dense"))
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
