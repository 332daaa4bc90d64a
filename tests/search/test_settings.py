"""``SearchSettings`` checks itself (issue 38 item 2): a library caller (the bench, the analyses)
gets the command line's refusals, one line each, before any index or model is opened."""

from __future__ import annotations

import dataclasses

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.search.dispatch import JAVA_INT_MAX, SearchSettings

REFUSED = [
    ({"retriever": "splade"}, "--retriever 'splade': choose from"),
    ({"retriever": "dense", "index": ["a", "b"]}, "searches one --index"),
    ({"retriever": "dense", "exhaustive": True}, "--exhaustive applies"),
    ({"retriever": "multivector", "exhaustive": True, "bm25_index": "b"}, "--exhaustive"),
    ({"retriever": "dense", "hits": 0}, "--hits must be >= 1"),
    ({"retriever": "dense", "batch_size": -1}, "--batch-size must be >= 1"),
    ({"retriever": "dense", "query_max_length": 0}, "--query-max-length must be >= 1"),
    ({"retriever": "dense", "candidates": JAVA_INT_MAX + 1}, "a Java int"),
    ({"retriever": "dense", "ef_search": 0}, "--ef-search must be >= 1"),
    ({"retriever": "bm25", "precision": "bf16"}, "--bf16 applies to model encoders"),
    ({"retriever": "bm25", "bm25_index": "b"}, "use a model --retriever"),
    ({"retriever": "dense", "fields": {"title": 1.0}}, "--fields searches fields"),
    ({"retriever": "dense", "bm25_index": "b", "alpha": -0.1}, "--alpha must be >= 0"),
    ({"retriever": "bm25", "k1": -1.0}, "BM25 needs --k1 >= 0"),
    ({"retriever": "bm25", "b": 1.5}, "--b in [0, 1]"),
    ({"retriever": "fused", "index": ["a", "b"], "fusion": "max"}, "--fusion 'max': choose"),
    ({"retriever": "fused", "index": ["a", "b"], "fusion": "wsum"}, "needs --fusion-weights"),
    ({"retriever": "fused", "index": ["a", "b"], "fusion": "linear", "fusion_weights": [1.0]},
     "one per index"),
    ({"retriever": "multivector", "encoded_queries": "q"}, "--encoded-queries applies to a"),
    ({"retriever": "dense", "encoded_queries": "q", "encoder": "m"}, "replaces the query encoder"),
    ({"retriever": "dense", "encoded_queries": "q", "query_max_length": 8}, "do not apply"),
]


@pytest.mark.parametrize(("given", "said"), REFUSED, ids=[s for _, s in REFUSED])
def test_settings_that_cannot_work_are_refused_when_made(given, said) -> None:
    with pytest.raises(UserError, match=said.replace("[", r"\[").replace("]", r"\]")) as caught:
        SearchSettings(**{"index": "i", **given})
    assert "\n" not in str(caught.value)


def test_valid_settings_are_made_and_cannot_change_unchecked() -> None:
    s = SearchSettings("fused", ["a", "b"], fusion="wsum", fusion_weights=[0.5, 0.5])
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.hits = 0  # type: ignore[misc]
    with pytest.raises(UserError, match="--hits must be >= 1"):
        dataclasses.replace(s, hits=0)  # a changed copy is checked again
    assert dataclasses.replace(s, hits=10).hits == 10
    assert SearchSettings("bm25", "i", fields={"title": 1.0}).fields == {"title": 1.0}


@pytest.mark.parametrize(("given", "said"), [
    ({"retriever": "dense", "k1": 1.2, "b": 0.75}, "--k1, --b: not used by a dense search "
                                                    "without --bm25-index; leave them out"),
    ({"retriever": "impact", "alpha": 0.5}, "--alpha: not used by an impact search"),
    ({"retriever": "bm25", "encoder": "m", "alpha": 0.3}, "--encoder, --alpha: not used by a "
                                                           "BM25 search"),
    ({"retriever": "bm25", "query_max_length": 32}, "--query-max-length: not used by a BM25"),
])
def test_settings_a_search_would_ignore_are_refused(given, said) -> None:  # H84
    with pytest.raises(UserError, match=said):
        SearchSettings(**{"index": "i", **given})


def test_a_hybrid_takes_both_sides_settings() -> None:
    s = SearchSettings("dense", "i", bm25_index="b", k1=1.2, b=0.75, alpha=0.5,
                       hybrid_normalize=True)
    assert (s.k1, s.alpha) == (1.2, 0.5)
