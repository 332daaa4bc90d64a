"""POOR cases of earlier hostile passes left until now: gzipped topics under a plain name
(H10-62), ``regress --work-dir`` (and ``--smoke``'s) naming an index or a file (H10-54, H10-55),
``sizes --backbone bert-base-uncased`` offline (H10-56)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from pyserini_moe.cli import regress, run_main, sizes
from pyserini_moe.data.topics import load_topics
from pyserini_moe.errors import DataFormatError
from pyserini_moe.index.meta import write_meta


def test_a_gzipped_file_under_a_plain_name_is_named_gzip(tmp_path) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_bytes(gzip.compress(b"q1\tone query\n", mtime=0))
    with pytest.raises(DataFormatError, match=r"topics.tsv:1: gzip-compressed: name it with "
                                              r"\.gz, or gunzip it$"):
        load_topics(str(topics))


@pytest.mark.parametrize("smoke", [False, True], ids=["run", "smoke"])
def test_a_work_dir_that_is_an_index_or_a_file_is_refused(tmp_path, capsys, error_line,
                                                          smoke) -> None:
    index = tmp_path / "index"
    index.mkdir()
    write_meta(index, "dense", encoder="/models/m", encoder_fingerprint="m")
    target = "regressions/bm25-paper.yaml" if smoke else "regressions/bm25-scifact.yaml"
    flags = ["--smoke"] if smoke else ["--dry-run"]
    assert error_line(regress.main, [target, "--work-dir", str(index), *flags], capsys) == (
        f"error: --work-dir {index} is an index: name a folder of its own (made if missing)")
    assert sorted(p.name for p in index.iterdir()) == ["pyserini_moe_index.json"]
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    assert error_line(regress.main, [target, "--work-dir", str(afile), *flags], capsys) == (
        f"error: --work-dir {afile} is a file: name a folder (made if missing)")


def test_sizes_of_bert_base_offline_points_at_the_flag(monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run_main(sizes.main, ["--backbone", "bert-base-uncased-not-cached"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        "(for bert-base-uncased's shape offline: --bert-base)")


def test_a_results_dir_that_is_a_training_run_is_refused(tmp_path: Path, capsys,
                                                         error_line) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("output_dir: run\n")
    assert error_line(regress.main, ["regressions/bm25-scifact.yaml", "--results-dir",
                                     str(run), "--dry-run"], capsys) == (
        f"error: --results-dir {run} is a training run: name a folder of its own (made if "
        "missing)")
