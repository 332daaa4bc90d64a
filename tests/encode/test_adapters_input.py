"""The Pyserini encoder adapters (:mod:`pyserini_moe.encode.adapters`): a model without the
representation asked for, and queries that encode to non-finite vectors."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import ColbertEncoder, SiameseBiEncoder, SpladeEncoder
from pyserini_moe.modeling.base import RetrievalModel

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_model_without_the_representation_names_retriever_kinds(tiny_bert) -> None:
    from pyserini_moe.encode.adapters import MultiVectorDocumentEncoder
    from pyserini_moe.modeling import SiameseBiEncoder

    with pytest.raises(UserError, match=r"^model type 'siamese' has no multivector "
                                        r"representation \(its --retriever kinds: dense\)$"):
        MultiVectorDocumentEncoder(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"))


def _nan(model: RetrievalModel) -> RetrievalModel:
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return model.eval()


@pytest.mark.parametrize("kind", ["dense", "impact", "multivector"])
def test_every_query_encoder_refuses_non_finite_vectors(tiny_bert, tiny_mlm, kind) -> None:
    from pyserini_moe.encode.adapters import (
        DenseQueryEncoder,
        ImpactQueryEncoder,
        MultiVectorQueryEncoder,
    )

    encoder, model = {
        "dense": (DenseQueryEncoder, lambda: SiameseBiEncoder.from_backbone(tiny_bert,
                                                                            device="cpu")),
        "impact": (ImpactQueryEncoder, lambda: SpladeEncoder.from_backbone(tiny_mlm,
                                                                           device="cpu")),
        "multivector": (MultiVectorQueryEncoder,
                        lambda: ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu")),
    }[kind]
    torch.manual_seed(0)
    sound = encoder(model().eval(), max_length=16)
    assert len(sound.encode_batch(["cat", "the cat sat on the mat"])) == 2  # padding is not NaN
    broken = encoder(_nan(model()), max_length=16)
    with pytest.raises(UserError, match="query 'cat' encodes to NaN or infinite values"):
        broken.encode_batch(["cat", "dog"])
