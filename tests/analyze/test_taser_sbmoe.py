"""``python -m pyserini_moe.analyze``: ``routing`` on tiny TASER models; ``experts`` and
``expert-count`` on tiny SB-MoE models and toy runs."""

import json
import math

import pytest
import torch

from pyserini_moe.analyze.sbmoe import (
    ExpertStats,
    activated_experts,
    activation_threshold,
    expert_stats,
    format_experts,
    parse_runs,
)
from pyserini_moe.analyze.taser import format_shares, routing_shares
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main
from pyserini_moe.modeling import SbMoeEncoder, SiameseBiEncoder, Side, TaserEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


def test_det_r_shares_are_the_hard_coded_split(tiny_bert, texts):
    model = TaserEncoder.from_backbone(tiny_bert, every=0, device="cpu").eval()
    shares = routing_shares(model, {"query": texts, "passage": texts * 2}, batch_size=2,
                            progress=False)
    assert [dict(c) for c in shares["query"]] == [{0: 3}, {0: 3}]  # both layers, 3 sequences
    assert [dict(c) for c in shares["passage"]] == [{1: 6}, {1: 6}]
    table = format_shares(shares, model.specialised, 2)
    assert "| layer 1 | query | 1.000 | 0.000 |" in table
    assert "| layer 2 | passage | 0.000 | 1.000 |" in table


def test_tok_r_counts_real_tokens_only(tiny_bert, texts):
    torch.manual_seed(0)
    model = TaserEncoder.from_backbone(tiny_bert, router="tok", every=1, device="cpu").eval()
    shares = routing_shares(model, {"query": texts}, progress=False)
    mask = model.tokenize(texts, Side.QUERY, 256)["attention_mask"]
    assert sum(shares["query"][0].values()) == int(mask.sum())


def test_cli_writes_the_table_and_refuses_models_without_experts(tiny_bert, tmp_path, capsys):
    root = tmp_path / "toy"
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"the cat sat {i}"}) + "\n"
        for i in range(5)))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "a cat"}) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    taser = TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu").save(tmp_path / "taser")
    out = tmp_path / "routing.md"
    assert main(["routing", "--model", str(taser), "--corpus", str(root), "--topics",
                 f"{root}:test", "--output", str(out), "--device", "cpu", "--quiet"]) == 0
    assert "| layer 2 | passage | 0.000 | 1.000 |" in out.read_text()
    siamese = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "siamese")
    assert run_main(main, ["routing", "--model", str(siamese), "--corpus", str(root),
                           "--topics", f"{root}:test", "--quiet"]) == 2
    assert "routing analysis needs expert FFN blocks" in capsys.readouterr().err


# -- SB-MoE: experts won, activated experts, expert count ------------------------------------
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = ["the", "cat", "sat", "on", "mat", "dense", "retrieval", "mixture", "of", "experts"]


def toy_collection(root, n_docs: int = 12):
    """A BEIR-layout folder with ``n_docs`` documents, two test queries and their qrels."""
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "",
                    "text": f"{WORDS[i % 10]} {WORDS[(3 * i + 1) % 10]} {i}"}) + "\n"
        for i in range(n_docs)))
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "a cat"}) + "\n"
        + json.dumps({"_id": "q2", "text": "dense retrieval"}) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


def spread_sbmoe(tiny_bert, n_experts: int = 4) -> SbMoeEncoder:
    """A tiny SB-MoE whose gate's biases make several experts win (as after training)."""
    torch.manual_seed(0)
    model = SbMoeEncoder.from_backbone(tiny_bert, n_experts=n_experts, device="cpu").eval()
    with torch.no_grad():
        model.gate.net[-1].weight.normal_(0, 2.0)
    return model


def test_expert_stats_count_every_text_once(tiny_bert, texts):
    model = spread_sbmoe(tiny_bert)
    items = texts * 5
    stats = expert_stats(model, items, "passage", batch_size=4, progress=False)
    assert len(stats.wins) == 4 and stats.total == len(items)
    assert sum(stats.shares) == pytest.approx(1.0)
    assert sum(stats.mean_probs) == pytest.approx(1.0)
    routing = model.route(items, Side.PASSAGE)
    assert stats.wins == torch.bincount(routing.expert, minlength=4).tolist()


def test_activated_experts_follow_the_papers_threshold():
    # Table III: activated = top expert of >= 100k documents; MS MARCO's 8.8M -> 1.14%.
    assert activation_threshold(100_000, 8_800_000) == pytest.approx(0.011364, abs=1e-6)
    # 1000 documents, threshold 100 documents = 10%: 100 is "at least", 99 is not.
    wins = [600, 200, 100, 99, 1, 0]
    threshold = activation_threshold(100, sum(wins))
    assert activated_experts(wins, threshold) == [0, 1, 2]
    assert activated_experts(wins, 0.0) == [0, 1, 2, 3, 4, 5]
    assert activated_experts(wins, 0.5) == [0]
    table = format_experts({"passage": ExpertStats(wins, [0.5, 0.2, 0.1, 0.1, 0.05, 0.05])},
                           threshold, {"passage": 1000})
    assert "| 2 | 100 | 10.00% * | 0.100 |" in table and "| 3 | 99 | 9.90% | 0.100 |" in table
    assert "| passage | 1000 | 1000 | >= 10.00% | 6 | 3 (50.00%) |" in table


def test_experts_cli_writes_table_and_png(tiny_bert, tmp_path):
    root = toy_collection(tmp_path / "toy")
    model = spread_sbmoe(tiny_bert).save(tmp_path / "sbmoe")
    out, plot = tmp_path / "experts.md", tmp_path / "experts.png"
    assert main(["experts", "--model", str(model), "--corpus", str(root), "--topics",
                 f"{root}:test", "--sample", "10", "--threshold", "20", "--output", str(out),
                 "--plot", str(plot), "--device", "cpu", "--quiet"]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| passage |")
            or line.startswith("| query |")]
    assert [row.split(" | ")[1:3] for row in rows] == [["12", "10"], ["2", "2"]]
    assert ">= 20.00%" in text
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert not list(tmp_path.glob(".*.tmp-*"))  # atomic writes leave no temporaries


def test_experts_default_is_the_papers_100k_documents(tiny_bert, tmp_path, capsys):
    root = toy_collection(tmp_path / "toy")
    model = spread_sbmoe(tiny_bert).save(tmp_path / "sbmoe")
    assert main(["experts", "--model", str(model), "--corpus", str(root), "--device", "cpu",
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "at least 100000 of 12 documents" in text and "| 4 | 0 (0.00%) |" in text
    assert "No expert can be activated" in text
    assert "(more than there are, so none can be)" in text and "a share of" not in text


def test_experts_refuses_other_models(tiny_bert, tmp_path, capsys):
    root = toy_collection(tmp_path / "toy")
    siamese = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "siamese")
    capsys.readouterr()  # transformers' loading bar
    assert run_main(main, ["experts", "--model", str(siamese), "--corpus", str(root),
                           "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expert analysis needs an sbmoe model" in err


def write_run(path, hits: dict[str, list[str]]):
    from pyserini_moe.runs import write_trec_run  # noqa: PLC0415

    write_trec_run({qid: {doc: float(len(docs) - r) for r, doc in enumerate(docs)}
                    for qid, docs in hits.items()}, path)
    return path


def test_expert_count_table_and_plot(tmp_path):
    root = toy_collection(tmp_path / "toy")
    perfect = write_run(tmp_path / "e6.trec", {"q1": ["d1", "d0"], "q2": ["d2", "d0"]})
    half = write_run(tmp_path / "e3.trec", {"q1": ["d1", "d0"], "q2": ["d0", "d3"]})
    second = write_run(tmp_path / "ft.trec", {"q1": ["d0", "d1"], "q2": ["d0", "d2"]})
    out, plot = tmp_path / "count.md", tmp_path / "count.png"
    assert main(["expert-count", "--runs", f"6={perfect}", f"3={half}", "--qrels",
                 f"{root}:test", "--baseline", str(second), "--output", str(out), "--plot",
                 str(plot), "--quiet"]) == 0
    lines = out.read_text().splitlines()
    assert "| experts | ndcg@10 | recall@100 |" in lines
    ndcg_second = 1 / math.log2(3)  # relevant at rank 2
    assert f"| fine-tuned | {ndcg_second:.4f} | 1.0000 |" in lines
    rows = [line for line in lines if line.startswith(("| 3 ", "| 6 "))]
    assert rows == ["| 3 | 0.5000 | 0.5000 |", "| 6 | 1.0000 | 1.0000 |"]  # sorted by count
    assert plot.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("spec", ["six=a.trec", "6", "0=a.trec", "6="])
def test_expert_count_refuses_malformed_runs(tmp_path, capsys, spec):
    assert run_main(main, ["expert-count", "--runs", spec, "--qrels", "x", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "expected EXPERTS=RUN_FILE" in err
    assert parse_runs(["12=b", "3=a"]) == {3: "a", 12: "b"}
    with pytest.raises(ValueError, match="given twice"):
        parse_runs(["3=a", "3=b"])
