"""``python -m pyserini_moe.analyze routing`` on tiny TASER models."""

import json

import pytest
import torch

from pyserini_moe.analyze import format_shares, main, routing_shares
from pyserini_moe.cli import run_main
from pyserini_moe.modeling import SiameseBiEncoder, Side, TaserEncoder

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
