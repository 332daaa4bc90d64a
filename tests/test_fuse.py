"""``python -m pyserini_moe.fuse``: each method family through the command line, tuning, errors."""

import json

import pytest

from pyserini_moe import fuse
from pyserini_moe.cli import run_main
from pyserini_moe.runs import read_trec_run, write_trec_run

A = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"d4": 1.0, "d5": 0.5}}
B = {"q1": {"d2": 10.0, "d3": 8.0}, "q2": {"d5": 4.0, "d4": 2.0}}
QRELS = "q1 0 d2 1\nq2 0 d5 1\n"


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "a.trec", tmp_path / "b.trec"
    write_trec_run(A, a)
    write_trec_run(B, b)
    (tmp_path / "qrels.txt").write_text(QRELS)
    return tmp_path


def fused(runs, *args) -> dict:
    out = runs / "out.trec"
    assert fuse.main(["--runs", str(runs / "a.trec"), str(runs / "b.trec"), "--output", str(out),
                      *args]) == 0
    return read_trec_run(out)


def test_came_sum_fills_missing_with_kth_score(runs):
    run = fused(runs, "--method", "came_sum")
    # q1: d1 = 3 + 8 (B's last score), d2 = 2 + 10, d3 = 1 + 8
    assert run["q1"] == pytest.approx({"d2": 12.0, "d1": 11.0, "d3": 9.0})


def test_rrf_through_ranx(runs):
    run = fused(runs, "--method", "rrf", "--rrf-k", "60")
    assert run["q1"]["d2"] == pytest.approx(1 / 62 + 1 / 61, abs=1e-6)
    assert run["q1"]["d1"] == pytest.approx(1 / 61, abs=1e-6)


def test_hybrid_alpha_and_dev_tuning(runs, capsys):
    run = fused(runs, "--method", "hybrid", "--alpha", "2.0")
    # q1: d1 is missing from B -> B's minimum 8: 3 + 2*8 = 19; d2 = 2 + 2*10 = 22
    assert run["q1"] == pytest.approx({"d2": 22.0, "d1": 19.0, "d3": 17.0})
    capsys.readouterr()
    for name in ("a", "b"):  # the same systems on dev queries (the fused runs' rankings under
        # other query ids: the very runs fused are refused as dev runs)
        run = read_trec_run(runs / f"{name}.trec")
        write_trec_run({f"dev-{q}": hits for q, hits in run.items()}, runs / f"{name}.dev.trec",
                       tag="dev")
    (runs / "dev-qrels.txt").write_text(QRELS.replace("q", "dev-q"))
    fused(runs, "--method", "hybrid", "--hybrid-normalize", "--dev-runs",
          str(runs / "a.dev.trec"), str(runs / "b.dev.trec"), "--dev-qrels",
          str(runs / "dev-qrels.txt"))
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("tuned on dev: "))
    tuned = json.loads(line.removeprefix("tuned on dev: "))
    # Normalised, q1's relevant d2 (0 + 0.5a) beats d1 (0.5 - 0.5a) only from alpha = 1 on.
    assert tuned["dev"]["0.9"] < tuned["dev"]["1.1"] == 1.0
    assert tuned["dev"][str(tuned["alpha"])] == max(tuned["dev"].values())


def test_wsum_needs_weights_or_dev(runs, capsys):
    argv = ["--runs", str(runs / "a.trec"), str(runs / "b.trec"), "--output", str(runs / "o"),
            "--method", "wsum"]
    assert run_main(fuse.main, argv) == 2
    assert "needs --weights" in capsys.readouterr().err
    assert fused(runs, "--method", "linear", "--weights", "1", "0")["q1"]["d1"] == pytest.approx(3.0)


@pytest.mark.parametrize("extra, message", [
    (["--method", "rrf", "--hits", "0"], "argument --hits/--k: must be >= 1, got 0"),
    (["--method", "linear", "--weights", "1"], "needs 2 values"),
    (["--method", "rrf", "--dev-runs", "x"], "go together"),
])
def test_errors(runs, extra, message, capsys):
    argv = ["--runs", str(runs / "a.trec"), str(runs / "b.trec"), "--output", str(runs / "o"), *extra]
    try:
        code = run_main(fuse.main, argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (runs / "o").exists()


def test_missing_run_file(runs, capsys):
    argv = ["--runs", str(runs / "a.trec"), str(runs / "nope.trec"), "--method", "rrf",
            "--output", str(runs / "o")]
    assert run_main(fuse.main, argv) == 2
    assert "nope.trec" in capsys.readouterr().err


def test_output_naming_a_directory_is_refused_and_kept(runs, capsys):
    folder = runs / "results"
    folder.mkdir()
    (folder / "keep.trec").write_text("precious\n")
    with pytest.raises(SystemExit) as stop:
        fuse.main(["--runs", str(runs / "a.trec"), str(runs / "b.trec"), "--output", str(folder),
                   "--method", "rrf"])
    assert stop.value.code == 2
    assert "is a directory" in capsys.readouterr().err
    assert (folder / "keep.trec").read_text() == "precious\n"
