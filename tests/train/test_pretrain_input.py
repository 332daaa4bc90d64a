"""Pre-training arguments and data (:mod:`pyserini_moe.train.pretrain`): settings that
change nothing or numpy cannot take, too few examples, and a pseudo-query file's BOM."""

from __future__ import annotations

import logging

import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.train.pretrain import pseudo_query_pairs
from tests.helpers import pseudo_queries


def test_switch_experts_on_a_siamese_encoder_is_refused() -> None:
    from pyserini_moe.train.pretrain import PretrainArgs

    with pytest.raises(UserError, match="a siamese encoder shares one for both, so nothing would "
                                        "change"):
        PretrainArgs(backbone="b", variant="siamese", corpora=["c"], switch_experts=True).check()
    for variant in ("mote", "separate"):
        PretrainArgs(backbone="b", variant=variant, corpora=["c"], switch_experts=True).check()


def test_pretraining_on_fewer_examples_than_a_step_is_said(tiny_mlm, tmp_path, caplog) -> None:
    from pyserini_moe.train.pretrain import PretrainArgs, pretrain

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text("".join(
        f'{{"_id": "d{i}", "title": "", "text": "First sentence {i}. Second one {i}."}}\n'
        for i in range(6)))
    import torch

    args = PretrainArgs(backbone=str(tiny_mlm), corpora=[str(corpus)], max_steps=1,
                        batch_size=4, grad_accumulation=2, max_length=16, context_max_length=8)
    with caplog.at_level(logging.WARNING, logger="pyserini_moe"):
        pretrain(args, tmp_path / "out", torch.device("cpu"), progress=False)
    assert ("warning: 6 examples are fewer than one optimizer step takes (--batch-size 4 x "
            "--grad-accumulation 2): examples repeat within a step" in caplog.text)


def test_pretrain_refuses_a_seed_numpy_cannot_take() -> None:
    """--seed -5 ended in numpy's traceback after the backbone loaded."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.train.pretrain import PretrainArgs

    with pytest.raises(UserError, match=r"seed: must be in \[0, 2\*\*32\), got -5"):
        PretrainArgs(backbone="b", corpora=("scifact",), seed=-5).check()


def test_a_pseudo_query_file_with_a_bom_reads_its_first_docid(tiny_corpus,
                                                              tmp_path) -> None:
    spec = pseudo_queries(tiny_corpus, tmp_path, "\ufeffd0\tcat sat\r\nd1\tdog\r\n")
    pairs = pseudo_query_pairs(spec)
    assert [query for query, _ in pairs] == ["cat sat", "dog"]
