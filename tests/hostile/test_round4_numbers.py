"""Hostile pass 4, numbers: NaN and infinity passed every ``< 0`` check (runs of nan scores, a
Lucene traceback, a diverging pre-training), a depth of hits + 1 overflowed Lucene's int, and a
metric cut-off beyond 64 bits ended in a numba traceback. Every number flag now takes finite
values only, and the library's own settings refuse what the flags refuse."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pyserini_moe import fuse, pretrain
from pyserini_moe.cli import finite_float, run_main, search
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import parse_metric
from pyserini_moe.runs import JAVA_INT_MAX
from pyserini_moe.search.base import depth_for_remove_query
from pyserini_moe.search.dispatch import SearchSettings
from pyserini_moe.validate import non_negative, positive


def exit_code(main, argv: list[str]) -> int:
    """The command's exit code, argparse's refusals (SystemExit 2) included."""
    try:
        return run_main(main, argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_a_number_flag_refuses_non_finite_values(text: str) -> None:
    with pytest.raises(Exception, match="expected a finite number"):
        finite_float(text)
    assert finite_float("0.1") == 0.1


@pytest.mark.parametrize("argv", [
    ["--alpha", "nan"], ["--alpha", "inf"], ["--k1", "nan"], ["--k1", "inf"], ["--b", "nan"]])
def test_search_refuses_non_finite_bm25_and_hybrid_numbers(tmp_path: Path, capsys,
                                                           argv: list[str]) -> None:
    """H4-16..18: --alpha nan wrote a run of nan scores, --k1 nan a Lucene traceback."""
    out = tmp_path / "run.trec"
    code = exit_code(search.main, ["--retriever", "dense", "--index", str(tmp_path / "i"),
                                  "--bm25-index", str(tmp_path / "b"), "--topics", "scifact:test",
                                  "--output", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert f"expected a finite number, got '{argv[1]}'" in err and "Traceback" not in err


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


def test_remove_query_never_asks_lucene_for_more_than_a_java_int() -> None:
    """H4-19: --hits 2147483647 --remove-query asked for 2^31 hits (jnius traceback)."""
    assert depth_for_remove_query(10) == 11
    assert depth_for_remove_query(JAVA_INT_MAX) == JAVA_INT_MAX


@pytest.mark.parametrize("argv", [["--method", "hybrid", "--alpha", "nan"],
                                  ["--method", "wsum", "--weights", "nan", "1"],
                                  ["--method", "linear", "--weights", "inf", "1"]])
def test_fuse_refuses_non_finite_alpha_and_weights(tmp_path: Path, capsys, argv: list[str]) -> None:
    """H4-20, H4-21: runs of nan / inf scores that fuse and eval then refused."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d{name} 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                "--output", str(out), *argv])
    assert code == 2 and not out.exists()
    assert "expected a finite number" in capsys.readouterr().err


def test_pretrain_refuses_an_infinite_learning_rate_before_writing_anything(
        tmp_path: Path, capsys) -> None:
    """H4-60: accepted, diverged, and left a folder (log with Infinity) that blocked a rerun."""
    out = tmp_path / "pt"
    code = exit_code(pretrain.main, ["--backbone", str(tmp_path), "--corpus", "scifact",
                                    "--output-dir", str(out), "--learning-rate", "inf"])
    assert code == 2 and not out.exists()
    assert "expected a finite number, got 'inf'" in capsys.readouterr().err


def test_the_recipe_checks_refuse_infinity() -> None:
    assert positive(math.inf) == "must be finite" and positive(math.nan) == "must be > 0"
    assert non_negative(math.inf) == "must be finite" and non_negative(0) is None
    assert positive(3) is None and positive(None) is None


def test_a_metric_cut_off_beyond_a_java_int_is_one_line() -> None:
    """H4-49: ndcg@99999999999999999999 ended in a 47-line numba traceback."""
    with pytest.raises(UserError, match=r"k an integer in \[1, 2147483647\]"):
        parse_metric("ndcg@99999999999999999999")
    assert parse_metric(f"ndcg@{JAVA_INT_MAX}").name == f"ndcg@{JAVA_INT_MAX}"


@pytest.mark.parametrize(("argv", "words"), [
    (["--k", "0"], "argument --hits/--k: must be >= 1, got 0"),
    (["--depth", "0"], "argument --candidates/--depth: must be >= 1, got 0"),
    (["--k", "3", "--hits", "5"], "--k 3 and --hits 5 set the same thing; give one"),
    (["--runtag", "a", "--run-tag", "b"], "--runtag a and --run-tag b set the same thing"),
])
def test_fuse_names_the_spelling_typed_and_refuses_two_values(tmp_path: Path, capsys,
                                                               argv: list[str], words: str) -> None:
    """H4-23, H4-24: errors named --hits for --k; --k 3 --hits 5 kept 5 in silence."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.trec").write_text(f"q1 Q0 d{name} 1 3.0 t\n")
    out = tmp_path / "fused.trec"
    code = exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                 "--method", "rrf", "--output", str(out), *argv])
    assert code == 2 and not out.exists() and words in capsys.readouterr().err
    assert exit_code(fuse.main, ["--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
                                 "--method", "rrf", "--output", str(out), "--k", "5",
                                 "--hits", "5"]) == 0  # the same value twice is no conflict


@pytest.mark.parametrize(("setting", "flags"), [
    ({"candidates": 5}, "--candidates"), ({"fusion": "rrf"}, "--fusion"),
    ({"fusion_weights": [1.0, 2.0]}, "--fusion-weights"), ({"query_max_terms": 3}, "--query-max-terms")])
def test_a_dense_search_refuses_settings_it_would_not_read(setting: dict, flags: str) -> None:
    """H4-26: a dense search ignored --candidates, --fusion, --query-max-terms in silence
    (H8-17: "without --bm25-index" only where that flag would make the setting read)."""
    alone = " without --bm25-index" if "candidates" in setting else ""
    with pytest.raises(UserError, match=f"^{flags}: not used by a dense search{alone}; leave "
                                        "it out$"):
        SearchSettings(retriever="dense", index="i", **setting)
    SearchSettings(retriever="dense", index="i", bm25_index="b", candidates=5)  # a hybrid reads it
