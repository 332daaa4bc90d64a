"""Checkpoint-selection study: snapshots indexed and searched for real, rules across seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.errors import UserError
from pyserini_moe.lab import checkpoints
from pyserini_moe.lab.checkpoints import Snapshot, compare_rules, evaluate_training, select
from pyserini_moe.modeling.biencoder import SiameseBiEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


def training_folder(root: Path, tiny_bert: Path, losses: dict[int, float]) -> Path:
    """A training output folder as the trainer leaves it with keep_snapshots: one snapshot per
    validation (the tiny BERT, perturbed per step), its log, its dev split."""
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(str(tiny_bert), device="cpu", pooling="mean")
    for step in losses:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.save(root / "snapshots" / f"step-{step}")
    (root / "train_log.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 1.0, **({"val_loss": v} if v is not None else {})}) + "\n"
        for s, v in losses.items()))
    (root / "dev_topics.tsv").write_text("q0\twhat is dense retrieval\nq1\tcat sat on the mat\n")
    (root / "dev_qrels.txt").write_text("q0 0 d0 1\nq1 0 d1 1\n")
    return root


def test_every_snapshot_is_indexed_searched_and_cached(tiny_bert, tiny_corpus, tmp_path,
                                                      capsys, monkeypatch):
    folder = training_folder(tmp_path / "s1", tiny_bert, {2: 0.5, 4: 0.4})
    test = f"{tiny_corpus}:test"
    snaps = evaluate_training(folder, str(tiny_corpus), [test], ["ndcg@10"], progress=False)
    assert [(s.step, s.val_loss) for s in snaps] == [(2, 0.5), (4, 0.4)]
    assert set(snaps[0].metrics) == {"dev", test}
    assert all(0 <= s.metrics[test]["ndcg@10"] <= 1 for s in snaps)
    assert snaps[0].metrics != snaps[1].metrics  # two different models, measured each

    def never(*_args: object) -> dict:
        raise AssertionError("a cached snapshot was evaluated again")

    again = evaluate_training(folder, str(tiny_corpus), [test], ["ndcg@10"], searcher=never)
    assert again == snaps
    # a query length of its own is another evaluation (cached under it); the default keeps
    # the caches made before the flag existed
    lengths: list[int | None] = []

    def record(_folder, _corpus, _sets, _metrics, _kind, _max_length, query_max_length,
               _progress) -> dict:
        lengths.append(query_max_length)
        return snaps[0].metrics

    evaluate_training(folder, str(tiny_corpus), [test], ["ndcg@10"], query_max_length=8,
                      searcher=record)
    assert lengths == [8, 8]
    evaluate_training(folder, str(tiny_corpus), [test], ["ndcg@10"], query_max_length=8,
                      searcher=never)
    # the command: a report with every rule, and a plot; its --query-max-length reaches the
    # evaluation (the cache made for 8 above serves it: nothing is searched)
    monkeypatch.setattr(checkpoints, "_index_and_search", never)
    out, png = tmp_path / "report.md", tmp_path / "curve.png"
    assert run_main(analyze_main, ["checkpoints", "--train-dir", f"1={folder}", "--corpus",
                                   str(tiny_corpus), "--test", test, "--output", str(out),
                                   "--query-max-length", "8",
                                   "--plot", str(png), "--quiet"]) == 0
    text = out.read_text()
    assert "| val-loss " in text and "| last " in text and "| dev-ndcg@10 " in text
    assert "#### seed 1" in text and png.stat().st_size > 0


def fake(values: dict[int, tuple[float | None, float, float]]) -> list[Snapshot]:
    """Snapshots from ``{step: (val_loss, dev ndcg, test ndcg)}``."""
    return [Snapshot(step, loss, {"dev": {"ndcg@10": dev}, "t": {"ndcg@10": test}})
            for step, (loss, dev, test) in values.items()]


def test_rules_pick_their_steps_and_report_the_spread_across_seeds():
    a = fake({10: (0.30, 0.50, 0.70), 20: (0.29, 0.55, 0.72), 30: (0.31, 0.55, 0.74)})
    b = fake({10: (0.28, 0.40, 0.60), 20: (0.30, 0.60, 0.73), 30: (0.32, 0.50, 0.74)})
    assert select(a, "ndcg@10") == {"last": 30, "val-loss": 20, "dev-ndcg@10": 20}  # tie: earlier
    rules = {o.rule: o for o in compare_rules({"1": a, "2": b}, "t", "ndcg@10", "ndcg@10")}
    assert rules["val-loss"].steps == {"1": 20, "2": 10}
    assert rules["val-loss"].scores == {"1": 0.72, "2": 0.60}
    assert rules["val-loss"].summary.sd == pytest.approx(0.0849, abs=1e-4)
    assert rules["last"].summary.mean == pytest.approx(0.74) and rules["last"].summary.sd == 0.0
    assert rules["dev-ndcg@10"].steps == {"1": 20, "2": 20}


def test_a_training_without_snapshots_is_one_error_line(tmp_path):
    (tmp_path / "train_log.jsonl").write_text("")
    with pytest.raises(UserError, match="keep_snapshots"):
        checkpoints.snapshot_folders(tmp_path)


def test_a_label_given_twice_and_a_foreign_corpus_are_refused(tmp_path) -> None:
    from pyserini_moe.errors import UserError
    from pyserini_moe.lab.checkpoints import check_corpus, training_folders

    with pytest.raises(UserError, match="the label '1' is given twice"):
        training_folders([f"1={tmp_path / 'a'}", f"1={tmp_path / 'b'}"])
    assert list(training_folders([str(tmp_path / "a"), f"7={tmp_path / 'b'}"])) == ["a", "7"]
    (tmp_path / "recipe.yaml").write_text("data:\n  collection: scifact\n")
    check_corpus(tmp_path, "scifact")
    check_corpus(tmp_path, "/elsewhere/scifact")
    with pytest.raises(UserError, match="trained on 'scifact'.*--corpus cranfield"):
        check_corpus(tmp_path, "cranfield")


def test_a_came_snapshot_is_searched_as_its_fused_rows(bert3, tiny_corpus, tmp_path) -> None:
    """``--kind fused``: a CAME snapshot scores what the regression rows' commands give it (an
    index per expert from one ``index`` call, ``search --retriever fused``, came_sum)."""
    from pyserini_moe.data.topics import load_qrels
    from pyserini_moe.eval.metrics import evaluate
    from pyserini_moe.index import __main__ as index_cli
    from pyserini_moe.modeling import CameEncoder
    from pyserini_moe.runs import read_trec_run
    from pyserini_moe.search import __main__ as search_cli

    torch.manual_seed(0)
    snapshot = CameEncoder.from_backbone(str(bert3), shared_layers=1,
                                         device="cpu").save(tmp_path / "step-1")
    test, metrics = f"{tiny_corpus}:test", ["ndcg@10", "recall@100"]
    measured = checkpoints._index_and_search(snapshot, str(tiny_corpus), {"t": (test, test)},
                                             metrics, "fused", 64, None, False)
    folders = [str(tmp_path / kind) for kind in ("impact", "multivector", "dense")]
    assert run_main(index_cli.main, ["--retriever", "impact", "multivector", "dense",
                                     "--index", *folders, "--corpus", str(tiny_corpus),
                                     "--encoder", str(snapshot), "--max-length", "64",
                                     "--device", "cpu", "--quiet"]) == 0
    out = tmp_path / "fused.trec"
    assert search_cli.main(["--retriever", "fused", "--index", *folders, "--topics", test,
                            "--fusion", "came_sum", "--output", str(out), "--quiet"]) == 0
    expected = evaluate(read_trec_run(out), load_qrels(test), metrics)
    assert measured["t"] == pytest.approx(expected, abs=1e-4)
    assert 0 < expected["recall@100"]  # the fused run found relevant passages to compare
