"""The pipeline section's logic on a tiny model: the padding count, the rows and targets of the
host and throughput parts (``make bench`` measures them on the real MiniLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.lab.bench import pipeline
from pyserini_moe.lab.bench.report import Report
from pyserini_moe.modeling import SiameseBiEncoder

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["a " * n for n in (9, 1, 1, 9, 2, 8, 1, 9)]  # 9 = longest; "a " x n is n tokens + 2


def test_padding_share_counts_what_sorting_saves() -> None:
    lengths = [len(t.split()) for t in TEXTS]
    # batches of 2 in corpus order pad (9,1) (1,9) (2,8) (1,9) to 9, 9, 8, 9: 70 positions
    assert pipeline.padding_share(TEXTS, lengths, 2, 1) == pytest.approx(1 - 40 / 70)
    # one window of 4 batches sorted longest first: (9,9) (9,8) (2,1) (1,1): 18+18+4+2 = 42
    assert pipeline.padding_share(TEXTS, lengths, 2, 4) == pytest.approx(1 - 40 / 42)


def test_host_and_throughput_rows_and_targets(tiny_bert: Path) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").eval()
    report = Report()
    pipeline.bench_host(report, model, TEXTS * 4, 16, 4, repeats=1)
    saved = []  # what a run stopped mid-table keeps: the rows of every model timed so far
    pipeline.bench_throughput(report, {"tiny siamese fp32": model}, TEXTS * 4, 16, 4, 1, "cpu",
                              workers=2, bucket=2,
                              on_model=lambda: saved.append(len(report.sections[
                                  "pipeline: throughput"])))
    assert saved == [5]
    host = report.sections["pipeline: host"]
    assert [row["what"] for row in host] == ["tokenizer alone", "pipeline, 1 worker",
                                             "pipeline, 2 workers"]
    assert all(row["docs_per_s"] > 0 for row in host)
    paths = [row["path"] for row in report.sections["pipeline: throughput"]]
    assert paths == ["loop", "pipeline, 1 thread", "pipeline, 2 processes",
                     "pipeline, 2 processes, bucket 2", "device alone"]
    assert [t["target"].split(" ")[2] for t in report.targets] == ["pipeline", "pipeline"]
    assert model.encode_tokens.__func__ is SiameseBiEncoder.encode_tokens  # spies removed
