"""Search settings and the search loop (:mod:`pyserini_moe.search.dispatch`): settings a
search would not read or that are not finite are refused, and ``--remove-query``,
candidates and experts that retrieve nothing are handled over fixed rankings."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import write_meta
from pyserini_moe.runs import Run
from pyserini_moe.search import dispatch
from pyserini_moe.search.dispatch import SearchSettings, search_topics
from pyserini_moe.search.experts import ExpertFusionSearcher

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = {"d0": "the first document", "d1": "the second document"}
# ArguAna's form: each query is a document, which both sides rank first
SELF_FIRST = {"d0": ["d0", "a", "b", "c", "d"], "d1": ["d1", "b", "c", "a", "d"]}


# --- search: the hybrid's name; two models of one kind --------------------------------------------


def test_a_setting_a_hybrid_does_not_read_names_the_hybrid() -> None:
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match=r"^--fusion: not used by a dense search with its BM25 "
                                        r"hybrid \(--bm25-index, weighed by --alpha\); leave it"):
        SearchSettings("dense", "i", bm25_index="b", fusion="rrf")


def test_a_bm25_index_flag_naming_another_kind_names_the_flag(tmp_path) -> None:
    from pyserini_moe.index.meta import IndexMeta, IndexMismatchError
    from pyserini_moe.search.dispatch import SearchSettings, _open

    for name in "id":
        (tmp_path / name).mkdir()
    IndexMeta(kind="impact", encoder="m", quantization=100).write(tmp_path / "i")
    IndexMeta(kind="dense", encoder="m", dim=4).write(tmp_path / "d")
    settings = SearchSettings("dense", str(tmp_path / "d"), bm25_index=str(tmp_path / "i"))
    with pytest.raises(IndexMismatchError, match=r"^--bm25-index .*/i is an impact index: the "
                                                 r"hybrid's BM25 side needs a BM25 index"):
        _open(settings)


@pytest.mark.parametrize("setting", [{"alpha": math.nan}, {"alpha": math.inf}, {"k1": math.inf},
                                     {"k1": math.nan}, {"fields": {"title": math.inf}}])
def test_the_search_settings_refuse_them_too(setting: dict) -> None:
    """The bench and the analyses build settings without the command line."""
    retriever = "bm25" if "fields" in setting else "dense"
    extra = {} if retriever == "bm25" else {"bm25_index": "b"}
    with pytest.raises(UserError, match="finite"):
        SearchSettings(retriever=retriever, index="i", **extra, **setting)


def test_fusion_weights_must_be_finite() -> None:
    with pytest.raises(UserError, match="--fusion-weights must be finite numbers >= 0"):
        SearchSettings(retriever="fused", index=["a", "b"], fusion="wsum",
                       fusion_weights=[math.nan, 1.0])


@pytest.mark.parametrize(("setting", "flags"), [
    ({"candidates": 5}, "--candidates"), ({"fusion": "rrf"}, "--fusion"),
    ({"fusion_weights": [1.0, 2.0]}, "--fusion-weights"), ({"query_max_terms": 3}, "--query-max-terms")])
def test_a_dense_search_refuses_settings_it_would_not_read(setting: dict, flags: str) -> None:
    """A dense search ignored --candidates, --fusion, --query-max-terms in silence
    ("without --bm25-index" only where that flag would make the setting read)."""
    alone = " without --bm25-index" if "candidates" in setting else ""
    with pytest.raises(UserError, match=f"^{flags}: not used by a dense search{alone}; leave "
                                        "it out$"):
        SearchSettings(retriever="dense", index="i", **setting)
    SearchSettings(retriever="dense", index="i", bm25_index="b", candidates=5)  # a hybrid reads it


def test_a_multivector_search_refuses_ef_search_it_would_ignore() -> None:
    """--ef-search was silently ignored on a multi-vector index."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="^--ef-search: not used by a multivector search"):
        SearchSettings(retriever="multivector", index="i", ef_search=50)


def test_a_hybrid_too_shallow_for_its_hits_says_so() -> None:
    from pyserini_moe.search.dispatch import short_hybrid_notice

    assert short_hybrid_notice(5, 50) == ("warning: the hybrid fuses BM25's and the model's top 5 "
                                          "(--candidates): at most 10 hits a query, not --hits 50")
    assert short_hybrid_notice(100, 200) is None  # appendix D's K' = 100 fills 200 at most
    assert short_hybrid_notice(1000, 1000) is None


# --- search settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("fusion", ["rrf", "combsum", "combmnz", "came_sum", "exact"])
def test_fused_search_refuses_weights_its_fusion_does_not_read(fusion) -> None:
    """A TypeError after the whole search, or (exact) the weights ignored without a word."""
    with pytest.raises(UserError, match=f"^--fusion-weights: --fusion {fusion} does not weigh "
                                        "the indexes \\(only linear and wsum do\\)"):
        SearchSettings(retriever="fused", index=["a", "b", "c"], fusion=fusion,
                       fusion_weights=[5.0, 0.0, 0.0])
    SearchSettings(retriever="fused", index=["a", "b"], fusion="wsum", fusion_weights=[1.0, 2.0])


@pytest.mark.parametrize(("retriever", "setting", "flag"), [
    ("impact", {"ef_search": 5}, "--ef-search"),
    ("impact", {"faiss_params": "nprobe=1"}, "--faiss-params"),
    ("dense", {"faiss_params": "nprobe=1"}, "--faiss-params"),    # dense reads --ef-search
    ("fused", {"ef_search": 5}, "--ef-search"),                   # experts are not given it
])
def test_a_search_refuses_faiss_settings_its_index_does_not_read(retriever, setting, flag):
    index = ["a", "b"] if retriever == "fused" else "a"
    article = "an" if retriever == "impact" else "a"
    with pytest.raises(UserError, match=f"^{flag}: not used by {article} {retriever} search"):
        SearchSettings(retriever=retriever, index=index, **setting)


def test_the_faiss_settings_that_are_read_stay_accepted() -> None:
    SearchSettings(retriever="dense", index="a", ef_search=64)
    SearchSettings(retriever="multivector", index="a", faiss_params="nprobe=4")
    SearchSettings(retriever="fused", index=["a", "b"], faiss_params="nprobe=4")


# --- settings a search would not honour -----------------------------------------------------------


def test_encoded_queries_refuse_the_encoders_term_cut() -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="--query-max-terms \\(the encoder's cut\\) do not apply"):
        SearchSettings(retriever="impact", index="ix", encoded_queries="q.jsonl",
                       query_max_terms=5)


@pytest.mark.parametrize("weights", [[0.0, 0.0], [0.0, 0.0, 0.0]])
def test_fusion_weights_all_zero_are_refused(weights) -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.search.dispatch import SearchSettings

    with pytest.raises(UserError, match="not all 0 \\(every document would score 0\\)"):
        SearchSettings(retriever="fused", index=["a", "b", "c"][:len(weights)], fusion="wsum",
                       fusion_weights=weights)


# --- settings of index kinds the search has none of -----------------------------------------------


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


# --- Searches over fixed rankings: what search_topics asks of its searchers, without an index -----


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


def _search(monkeypatch, s: SearchSettings, main: object, bm25: object = None):
    monkeypatch.setattr(dispatch, "_open", lambda _: (main, bm25))
    return search_topics(s, TOPICS)


# --- --remove-query keeps --hits and --candidates -------------------------------------------------


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


# --- a fused expert that retrieves nothing --------------------------------------------------------


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
