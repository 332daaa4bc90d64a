"""CoT-MoTE's divergence analysis (appendix A.1): the formulas on hand-made vectors, the pairing of
queries with passages, and the command on tiny models (table + t-SNE plot)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyserini_moe.analyze.cotmote import divergences, judged_pairs
from pyserini_moe.cli import run_main
from pyserini_moe.cli.analyze import main as analyze_main
from pyserini_moe.modeling import CotMoteEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


def test_divergences_follow_eq_14_to_19_on_a_hand_computed_example() -> None:
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    p = np.array([[1.0, 0.0], [1.0, 1.0]])
    kl, js = divergences(q, p)
    # d = 1 - cos: [[0, 1 - 1/sqrt2], [1, 1 - 1/sqrt2]]
    c = 1 - 1 / math.sqrt(2)
    d = np.array([[0.0, c], [1.0, c]])
    p1 = np.exp(-d) / np.exp(-d).sum(1, keepdims=True)
    p2 = np.exp(-d.T) / np.exp(-d.T).sum(1, keepdims=True)
    expected_kl = (p1 * np.log(p1 / p2)).sum(1)
    m = (p1 + p2) / 2
    expected_js = ((p1 * np.log(p1 / m)).sum(1) + (p2 * np.log(p2 / m)).sum(1)) / 2
    np.testing.assert_allclose(kl, expected_kl)
    np.testing.assert_allclose(js, expected_js)
    assert (js >= 0).all() and (js <= math.log(2)).all()


def test_symmetric_geometry_has_zero_divergence_and_separation_raises_it() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 8))
    kl, js = divergences(x, x)  # d is symmetric: p1 == p2
    np.testing.assert_allclose(kl, 0, atol=1e-12)
    np.testing.assert_allclose(js, 0, atol=1e-12)
    shifted = x + np.r_[np.zeros(4), 5 * np.ones(4)]  # passages pushed into another region
    kl2, _ = divergences(x, shifted)
    assert kl2.mean() > 0
    with pytest.raises(ValueError, match="paired"):
        divergences(x, x[:5])


def test_pairs_take_the_first_relevant_document_and_sample_reproducibly() -> None:
    topics = {"q1": "a", "q2": "b", "q3": "c"}
    qrels = {"q1": {"d2": 1, "d1": 1}, "q2": {"d3": 0}, "q3": {"d3": 2}}
    docs = {"d1": "one", "d2": "two", "d3": "three"}
    assert judged_pairs(topics, qrels, docs, 0, 0) == [("a", "one"), ("c", "three")]
    with pytest.raises(ValueError, match="fewer than two"):
        judged_pairs({"q2": "b"}, qrels, docs, 0, 0)
    many = {f"q{i}": f"t{i}" for i in range(10)}
    rel = {f"q{i}": {"d1": 1} for i in range(10)}
    assert judged_pairs(many, rel, docs, 4, 7) == judged_pairs(many, rel, docs, 4, 7)
    assert len(judged_pairs(many, rel, docs, 4, 7)) == 4


def test_the_command_writes_the_table_and_the_tsne_plot(tiny_bert, tiny_corpus, tmp_path,
                                                       capsys) -> None:
    torch.manual_seed(0)
    paths = {}
    for variant in ("siamese", "mote"):
        model = CotMoteEncoder.from_backbone(tiny_bert, variant=variant, device="cpu")
        if variant == "mote":
            with torch.no_grad():
                for block in model.expert_layers:
                    block.experts[1].intermediate.dense.weight.mul_(2.0)
        paths[variant] = model.save(tmp_path / variant)
    out, plot = tmp_path / "div.md", tmp_path / "tsne.png"
    assert analyze_main(["divergence", "--model", f"siamese={paths['siamese']}",
                         f"mote={paths['mote']}", "--corpus", str(tiny_corpus), "--topics",
                         f"{tiny_corpus}:test", "--qrels", f"{tiny_corpus}:test", "--device",
                         "cpu", "--output", str(out), "--plot", str(plot), "--quiet"]) == 0
    text = out.read_text()
    assert "| siamese |" in text and "| mote |" in text and "4 judged pairs" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run_main(analyze_main, ["divergence", "--model", f"a={paths['mote']}",
                                   f"a={paths['siamese']}", "--corpus", str(tiny_corpus),
                                   "--topics", f"{tiny_corpus}:test", "--qrels",
                                   f"{tiny_corpus}:test"]) == 2
    assert "given twice" in capsys.readouterr().err
