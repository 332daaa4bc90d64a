"""Loading an encoder (:mod:`pyserini_moe.modeling.auto`) from a model folder without its
metadata."""

from __future__ import annotations

import shutil

import torch

from pyserini_moe.modeling.folder import MODEL_FILE


def test_a_siamese_model_without_its_metadata_is_still_a_backbone(ws, tmp_path) -> None:
    """Its weights are transformers' own file and its sentence-transformers files say how it
    pools: read as a backbone it gives the trained model's vectors, so it is not refused."""
    from pyserini_moe.modeling.auto import load_encoder
    from pyserini_moe.modeling.base import Side
    from pyserini_moe.modeling.folder import load_model

    bare = tmp_path / "siamese"
    shutil.copytree(ws["model"], bare)
    (bare / MODEL_FILE).unlink()
    texts = ["what is dense retrieval"]
    expected = load_model(ws["model"], "cpu").encode(texts, Side.QUERY).dense
    got = load_encoder(str(bare), device="cpu").encode(texts, Side.QUERY).dense
    assert torch.allclose(got, expected, atol=1e-5)
