"""Topics and qrels exported for Pyserini and trec_eval: Pyserini's trec_eval reads the qrels
(the collections' BEIR qrels, with their header, it does not) and gives our evaluation."""

from __future__ import annotations

import subprocess
import sys

from pyserini_moe.cli import run_main
from pyserini_moe.cli.convert import main
from pyserini_moe.data.topics import load_qrels, load_topics


def test_topics_and_qrels_round_trip(tiny_corpus, tmp_path) -> None:
    assert run_main(main, ["--topics", f"{tiny_corpus}:test", "--output",
                           str(tmp_path / "t.tsv")]) == 0
    assert load_topics(str(tmp_path / "t.tsv")) == load_topics(f"{tiny_corpus}:test")
    assert run_main(main, ["--qrels", f"{tiny_corpus}:test", "--output",
                           str(tmp_path / "q.txt")]) == 0
    assert load_qrels(str(tmp_path / "q.txt")) == load_qrels(f"{tiny_corpus}:test")
    assert run_main(main, ["--qrels", f"{tiny_corpus}:test", "--output",
                           str(tmp_path / "q.txt")]) == 2  # exists: --overwrite


def test_pyserini_trec_eval_reads_the_exported_qrels(tmp_path) -> None:
    qrels = tmp_path / "qrels.txt"
    assert run_main(main, ["--qrels", "scifact:test", "--output", str(qrels)]) == 0
    run = tmp_path / "run.trec"
    judged = load_qrels(str(qrels))
    run.write_text("".join(f"{q} Q0 {d} 1 1.0 t\n" for q, docs in judged.items() for d in docs))
    done = subprocess.run([sys.executable, "-m", "pyserini.eval.trec_eval", "-m", "recall.100",
                           str(qrels), str(run)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1000:]
    assert "recall_100" in done.stdout and "1.0000" in done.stdout
