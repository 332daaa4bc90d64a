"""Every one-index searcher is a Searcher: the dispatcher and the bench call them alike."""

from __future__ import annotations

import inspect

import pytest

from pyserini_moe.search.base import Searcher
from pyserini_moe.search.bm25 import Bm25Searcher
from pyserini_moe.search.encoded import DenseSearcher, ImpactSearcher, MultiVectorSearcher

PROTOCOL = inspect.signature(Searcher.search).parameters


@pytest.mark.parametrize("cls", [Bm25Searcher, DenseSearcher, ImpactSearcher, MultiVectorSearcher])
def test_each_searcher_takes_the_protocol_s_arguments_with_its_defaults(cls) -> None:
    assert issubclass(cls, Searcher)
    params = inspect.signature(cls.search).parameters
    for name, param in PROTOCOL.items():
        assert name in params, f"{cls.__name__}.search lacks {name}"
        assert params[name].default == param.default, (cls.__name__, name)
    extra = [p for name, p in params.items() if name not in PROTOCOL]
    assert all(p.default is not inspect.Parameter.empty for p in extra), extra
