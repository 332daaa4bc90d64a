"""Integration: our Siamese encoder on the packaged MiniLM reproduces sentence-transformers."""

import torch

from pyserini_moe.modeling import SiameseBiEncoder, Side
from pyserini_moe.modeling.backbone import packaged_minilm


def test_siamese_minilm_matches_sentence_transformers(texts) -> None:
    from sentence_transformers import SentenceTransformer

    ours = SiameseBiEncoder.from_backbone("all-minilm-l6-v2", pooling="mean", normalize=True,
                                          device="cpu").eval()
    got = ours.encode(texts, Side.PASSAGE).dense
    reference = torch.from_numpy(SentenceTransformer(str(packaged_minilm()),
                                                     device="cpu").encode(texts))
    assert got.shape == reference.shape == (3, 384)
    assert (torch.nn.functional.cosine_similarity(got, reference) > 0.99).all()
