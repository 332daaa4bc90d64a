"""Metrics (:mod:`pyserini_moe.eval.metrics`): cut-offs beyond a Java int, a metric repeated,
and runs of different depths compared past the shallower."""

from __future__ import annotations

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import parse_metric, say_if_depths_differ
from pyserini_moe.runs import JAVA_INT_MAX


def _run(depth: int) -> dict[str, dict[str, float]]:
    return {"q1": {f"d{i}": 1 / (i + 1) for i in range(depth)}}


def test_runs_of_different_depths_are_said_where_a_metric_reads_past_the_shallower(capsys) -> None:
    say_if_depths_differ({"a": _run(10), "b": _run(30)}, ["ndcg@10", "recall@100", "map"])
    assert capsys.readouterr().err == (
        "warning: the runs hold different numbers of hits a query (at most a: 10, b: 30): "
        "recall@100, map then compare list lengths as well as rankings; cut the runs to one "
        "depth to compare rankings alone\n")
    say_if_depths_differ({"a": _run(10), "b": _run(30)}, ["ndcg@10", "recall@10"])
    say_if_depths_differ({"a": _run(10), "b": _run(10)}, ["recall@100"])
    assert capsys.readouterr().err == ""


def test_a_metric_cut_off_beyond_a_java_int_is_one_line() -> None:
    """Ndcg@99999999999999999999 ended in a 47-line numba traceback."""
    with pytest.raises(UserError, match=r"k an integer in \[1, 2147483647\]"):
        parse_metric("ndcg@99999999999999999999")
    assert parse_metric(f"ndcg@{JAVA_INT_MAX}").name == f"ndcg@{JAVA_INT_MAX}"


def test_a_metric_repeated_as_written_is_still_one_row() -> None:
    from pyserini_moe.eval.metrics import distinct_metrics

    assert [m.name for m in distinct_metrics(["ndcg@10", "ndcg@10", "map"])] == ["ndcg@10", "map"]


def test_a_significance_test_over_one_query_is_refused() -> None:
    """It reported p = 1.000 beside numpy's divide-by-zero warnings."""
    from pyserini_moe.eval.metrics import compare

    runs = {"a": {"q1": {"d1": 2.0, "d2": 1.0}}, "b": {"q1": {"d2": 2.0, "d1": 1.0}}}
    with pytest.raises(UserError, match="needs at least 2 judged queries; these runs have 1"):
        compare(runs, {"q1": {"d1": 1}}, ["ndcg@10"])
