"""Search depths (:mod:`pyserini_moe.search.base`): ``--remove-query`` never asks Lucene for
more hits than a Java int."""

from __future__ import annotations

from pyserini_moe.runs import JAVA_INT_MAX
from pyserini_moe.search.base import depth_for_remove_query


def test_remove_query_never_asks_lucene_for_more_than_a_java_int() -> None:
    """--hits 2147483647 --remove-query asked for 2^31 hits (jnius traceback)."""
    assert depth_for_remove_query(10) == 11
    assert depth_for_remove_query(JAVA_INT_MAX) == JAVA_INT_MAX
