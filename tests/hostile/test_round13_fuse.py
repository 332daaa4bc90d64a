"""Cases of the thirteenth hostile pass on ``fuse`` and ``analyze``: tuning with trec_eval's metric
names (H13-31), dev runs given out of order (H13-28) or as copies of the fused runs (H13-29);
``analyze came-competition`` on a gzipped or binary log (H13-51), on a training folder (H13-50),
with more ``--bins`` than steps (H13-48); ``analyze --plot`` an existing folder (H13-46)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.search.fusion import optimize_weights

# -- fuse: tuning on dev runs (H13-31, H13-28, H13-29) -------------------------------------------


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Test runs of q1-q2 tagged dense and bm25; dev runs of q3-q4 with the same tags; qrels of
    q3-q4."""
    (tmp_path / "d.trec").write_text("q1 Q0 d1 1 3.0 dense\nq2 Q0 d2 1 3.0 dense\n")
    (tmp_path / "b.trec").write_text("q1 Q0 d2 1 3.0 bm25\nq2 Q0 d1 1 3.0 bm25\n")
    (tmp_path / "dev-d.trec").write_text("q3 Q0 d3 1 3.0 dense\nq3 Q0 d4 2 2.0 dense\n"
                                         "q4 Q0 d4 1 3.0 dense\nq4 Q0 d3 2 2.0 dense\n")
    (tmp_path / "dev-b.trec").write_text("q3 Q0 d4 1 3.0 bm25\nq3 Q0 d3 2 2.0 bm25\n"
                                         "q4 Q0 d3 1 3.0 bm25\nq4 Q0 d4 2 2.0 bm25\n")
    (tmp_path / "qrels.txt").write_text("q3 0 d3 1\nq4 0 d4 1\n")
    return tmp_path


@pytest.mark.parametrize("metric", ["ndcg_cut.10", "P.10", "recip_rank", "map_cut.100",
                                    "recall.100"])
def test_wsum_tunes_on_trec_eval_metric_names(fuse_argv, runs, capsys, metric) -> None:
    """H13-31: ``--metric ndcg_cut.10`` (or ``P.10``), which eval takes, died in ranx with
    "Metric ndcg_cut.10 not supported"."""
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"),
                                     "--metric", metric)) == 0
    assert "tuned on dev: " in capsys.readouterr().err
    assert (runs / "f.trec").is_file()


def test_optimize_weights_reads_a_trec_eval_name_as_its_measure(runs) -> None:
    from pyserini_moe.data.topics import load_qrels
    from pyserini_moe.runs import read_trec_run

    dev = [read_trec_run(runs / "dev-d.trec"), read_trec_run(runs / "dev-b.trec")]
    qrels = load_qrels(str(runs / "qrels.txt"))
    assert (optimize_weights(dev, qrels, "wsum", "ndcg_cut.10")
            == optimize_weights(dev, qrels, "wsum", "ndcg@10"))


def test_dev_runs_whose_tags_are_the_runs_in_another_order_are_warned_of(fuse_argv, runs, capsys) -> None:
    """H13-28: dev runs tagged bm25, dense against --runs dense, bm25 were tuned and applied by
    position without a word."""
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-b.trec", "dev-d.trec"))) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == [
        "warning: the --dev-runs' run tags (bm25, dense) are those of --runs (dense, bm25) in "
        "another order: --dev-runs pair with --runs by position, so the tuned values would go "
        "to the wrong runs; list the dev runs in the order of --runs"]
    assert run_main(fuse.main, fuse_argv(runs, "wsum", ("dev-d.trec", "dev-b.trec"))) == 0
    assert "warning:" not in capsys.readouterr().err


@pytest.mark.parametrize("method", ["hybrid", "wsum", "linear"])
def test_dev_runs_that_are_copies_of_the_fused_runs_are_refused(fuse_argv, runs, capsys, error_line,
                                                                method) -> None:
    """H13-29: ``cp`` copies of the --runs files passed the path-only "also fused" check and
    tuned on the test queries."""
    shutil.copy(runs / "d.trec", runs / "copy-d.trec")
    shutil.copy(runs / "b.trec", runs / "copy-b.trec")
    (runs / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    assert error_line(fuse.main, fuse_argv(runs, method, ("copy-d.trec", "copy-b.trec")), capsys) == (
        f"error: --dev-runs {runs / 'copy-d.trec'} holds the same rankings as --runs "
        f"{runs / 'd.trec'}: tuning on a copy of a run being fused fits it to its own queries; "
        "give the same systems' runs on dev queries")
    assert not (runs / "f.trec").exists()


# -- analyze came-competition: the log (H13-51, H13-50), --bins (H13-48) ---------------------------

def _rows(steps: int) -> str:
    return "".join(json.dumps(
        {"step": i + 1, "loss": 1.0, "weight_lexical": 0.5, "weight_local": 0.3,
         "weight_global": 0.2, "loss_lexical": 1.0, "loss_local": 2.0, "loss_global": 3.0}) + "\n"
        for i in range(steps))


def test_a_gzipped_log_is_read(tmp_path, capsys) -> None:
    """H13-51: ``--log c=log.jsonl.gz`` died with a UnicodeDecodeError traceback."""
    log = tmp_path / "train_log.jsonl.gz"
    with gzip.open(log, "wt") as f:
        f.write(_rows(2))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={log}", "--bins", "1"]) == 0
    assert "| 1-2 | 0.500 | 0.300 | 0.200 |" in capsys.readouterr().out


@pytest.mark.parametrize("name, data", [
    ("a60.PNG", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
    ("utf16.jsonl", _rows(1).encode("utf-16")),
    # mtime=0: a gzip header holds the time, and xdist's workers must collect the same ids
    ("packed.jsonl", gzip.compress(_rows(1).encode(), mtime=0)),
], ids=["png", "utf16", "gzip-named-jsonl"])
def test_a_log_that_is_not_utf8_text_is_refused_in_one_line(tmp_path, capsys, error_line, name,
                                                            data) -> None:
    """H13-51: a PNG or a UTF-16 file as the log ended in a UnicodeDecodeError traceback."""
    log = tmp_path / name
    log.write_bytes(data)
    line = error_line(analyze_main, ["came-competition", "--log", f"c={log}"], capsys)
    assert line.startswith(f"error: {log}:1: " + ("gzip-compressed: name it with .gz"
                                                   if name == "packed.jsonl" else
                                                   "not valid UTF-8"))
    assert line.endswith("not a training log, which is UTF-8 JSON lines (or gzipped, named .gz)")


def test_a_training_folder_is_read_as_its_log(tmp_path, capsys, error_line) -> None:
    """H13-50: ``--log c=<training folder>`` said "no such training log" of an existing
    folder."""
    (tmp_path / "train_log.jsonl").write_text(_rows(2))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}"]) == 0
    assert "| 1-1 | 0.500 | 0.300 | 0.200 |" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert error_line(analyze_main, ["came-competition", "--log", f"c={empty}"], capsys) == (
        f"error: {empty} is a folder without a train_log.jsonl: give a training output folder or "
        "its train_log.jsonl")


def test_the_header_counts_the_stretches_shown(tmp_path, capsys) -> None:
    """H13-48: ``--bins 1000`` on a one-step log said "in 1000 stretches of steps" above one
    row."""
    (tmp_path / "train_log.jsonl").write_text(_rows(1))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--bins", "1000"]) == 0
    out = capsys.readouterr().out
    assert "in 1 stretch of steps (not --bins 1000:" in out
    assert "1000 stretches" not in out
    (tmp_path / "train_log.jsonl").write_text(_rows(10))
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--bins", "5"]) == 0
    out = capsys.readouterr().out
    assert "in 5 stretches of steps: each" in out


# -- analyze --plot an existing folder (H13-46) -----------------------------------------------------

def test_a_plot_that_is_a_folder_is_refused_before_the_analysis(tmp_path, capsys) -> None:
    """H13-46: the refusal came after the whole table was printed to stdout."""
    (tmp_path / "train_log.jsonl").write_text(_rows(2))
    plot = tmp_path / "d62.png"
    plot.mkdir()
    assert run_main(analyze_main, ["came-competition", "--log", f"c={tmp_path}",
                                   "--plot", str(plot)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"error: --plot {plot} is a directory: name a file to write"

