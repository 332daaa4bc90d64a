"""Sixth hostile pass (work/hostile6/report.md), a list flag given twice (H6-24, 25, 43, 44, 50,
77): argparse kept the last list and dropped the first without a word; every command's parser
now refuses it in one line."""

from __future__ import annotations

import pytest

from pyserini_moe.cli import analyze, fuse, merge, pretrain
from pyserini_moe.cli import eval as eval_cli


@pytest.mark.parametrize(("main", "argv", "flag"), [
    (eval_cli.main, ["--run", "a", "--run", "b", "--qrels", "q"], "--run"),
    (eval_cli.main, ["--run", "a", "--qrels", "q", "--metrics", "map", "--metrics", "mrr"],
     "--metrics"),
    (fuse.main, ["--runs", "a", "b", "--runs", "c", "d", "--output", "o"], "--runs"),
    (merge.main, ["--shards", "a", "b", "--shards", "c", "--index", "i"], "--shards"),
    (pretrain.main, ["--corpus", "a", "--corpus", "b", "--output-dir", "o"], "--corpus"),
    (analyze.main, ["checkpoints", "--train-dir", "a", "--train-dir", "b", "--corpus", "c"],
     "--train-dir"),
])
def test_a_list_flag_given_twice_is_refused(main, argv, flag, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"error: {flag} is given twice: give all its values after one {flag}" in \
        capsys.readouterr().err


def test_a_list_flag_given_once_still_reads_every_value(tmp_path) -> None:
    from pyserini_moe.cli import ArgumentParser

    parser = ArgumentParser()
    group = parser.add_argument_group("g")
    group.add_argument("--runs", nargs="+")
    parser.add_argument("--one")
    args = parser.parse_args(["--runs", "a", "b", "--one", "x", "--one", "x"])
    assert args.runs == ["a", "b"] and args.one == "x"  # one value twice: harmless
