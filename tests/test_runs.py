"""Run files: MS MARCO's three-column runs (``search --output-format msmarco``) read as TREC runs
are, so ``eval`` and ``fuse`` take what ``search`` writes (issue 39: both refused them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.cli import eval as eval_cli
from pyserini_moe.cli import fuse as fuse_cli
from pyserini_moe.cli import run_main
from pyserini_moe.runs import (
    RunFormatError,
    ranked,
    read_trec_run,
    write_msmarco_run,
    write_trec_run,
)

# Scores that a 6-decimal TREC file still orders, some docids out of order, 12 hits a query.
RUN = {f"q{q}": {f"d{(7 * q + 3 * i) % 40}": round(10 - i * 0.37 + q * 0.01, 6)
                 for i in range(12)} for q in range(6)}


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    trec, msmarco = tmp_path / "run.trec", tmp_path / "run.tsv"
    write_trec_run(RUN, trec)
    write_msmarco_run(RUN, msmarco)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{q} 0 d{(7 * q + 3 * i) % 40} {1 + i % 2}\n"
                             for q in range(6) for i in (1, 4, 9)))
    return trec, msmarco, qrels


def test_an_msmarco_run_keeps_its_order_with_scores_one_over_rank(runs) -> None:
    trec, msmarco, _ = runs
    read = read_trec_run(msmarco)
    assert {q: [d for d, _ in ranked(hits)] for q, hits in read.items()} == \
        {q: [d for d, _ in ranked(hits)] for q, hits in read_trec_run(trec).items()}
    assert sorted(read["q0"].values(), reverse=True)[:3] == [1.0, 1 / 2, 1 / 3]


def test_eval_of_an_msmarco_run_equals_eval_of_the_same_trec_run(runs, tmp_path, capsys) -> None:
    trec, msmarco, qrels = runs
    metrics = ["ndcg@10", "recall@5", "map", "mrr@10", "precision@3"]
    results = {}
    for run in (trec, msmarco):
        out = tmp_path / f"{run.name}.json"
        assert eval_cli.main(["--run", str(run), "--qrels", str(qrels), "--metrics", *metrics,
                              "--output", str(out)]) == 0
        results[run] = json.loads(out.read_text())["runs"][run.name]["metrics"]
    assert results[msmarco] == results[trec]
    assert 0 < results[trec]["ndcg@10"] < 1


def test_fuse_takes_an_msmarco_run(runs, tmp_path) -> None:
    trec, msmarco, _ = runs
    out = tmp_path / "fused.trec"
    assert fuse_cli.main(["--runs", str(trec), str(msmarco), "--method", "rrf", "--output",
                          str(out)]) == 0
    fused = read_trec_run(out)
    assert {q: [d for d, _ in ranked(h)] for q, h in fused.items()} == \
        {q: [d for d, _ in ranked(h)] for q, h in RUN.items()}  # the same order twice


@pytest.mark.parametrize(("text", "message"), [
    ("q1\td1\t1\nq1\td2\n", "run.tsv:2: expected 3 columns (qid docid rank: an MS MARCO run"),
    ("q1\td1\t1\nq1\td2\t0\n", "run.tsv:2: rank '0' is not a whole number >= 1"),
    ("q1\td1\tfirst\n", "run.tsv:1: rank 'first' is not a whole number >= 1"),
    ("q1\td1\t1\nq1\td1\t2\n", "run.tsv:2: document 'd1' is listed twice"),
    ("q1 Q0 d1 1 3.0 t\nq1\td2\t2\n", "run.tsv:2: expected 6 columns"),
])
def test_a_bad_msmarco_line_is_named(tmp_path, capsys, text, message) -> None:
    (tmp_path / "run.tsv").write_text(text)
    with pytest.raises(RunFormatError, match=message.replace("(", r"\(")):
        read_trec_run(tmp_path / "run.tsv")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    assert run_main(eval_cli.main, ["--run", str(tmp_path / "run.tsv"), "--qrels",
                                    str(tmp_path / "qrels.txt")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: ")


def test_scores_that_six_decimals_would_tie_are_written_in_full(tmp_path) -> None:
    """2e-7 and 1e-7 were both written 0.000000, and trec_eval, ranking by the written score
    and breaking the tie by docid, scored the run read back otherwise than the run written."""
    from pyserini_moe.runs import read_trec_run, write_trec_run

    tiny = {"a": {"d1": 2e-7, "d2": 1e-7}, "b": {"d1": 0.5, "d2": 0.25}}
    path = write_trec_run(tiny, tmp_path / "tiny.trec")
    lines = path.read_text().splitlines()
    assert lines[0].split()[4] == "2e-07" and lines[1].split()[4] == "1e-07"
    assert lines[2].split()[4] == "0.500000"  # the other query keeps six decimals, as Pyserini
    assert read_trec_run(path) == tiny
