"""The model contract: an abstract base whose training hooks have plain defaults, so the trainer
calls every hook unconditionally and a model overrides only what its method changes."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.modeling import Encoded, RetrievalModel, SiameseBiEncoder, model_types
from pyserini_moe.modeling.base import model_class
from pyserini_moe.modeling.losses import contrastive_loss


def test_a_model_missing_forward_cannot_be_built() -> None:
    class Incomplete(RetrievalModel):
        model_type = "incomplete"
        representations = ("dense",)

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(tokenizer=None, args={})


def test_default_hooks_give_plain_contrastive_training(tiny_bert) -> None:
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu")
    q = Encoded(dense=torch.randn(3, 4))
    p = Encoded(dense=torch.randn(5, 4))
    positives = torch.tensor([0, 1, 2])
    torch.testing.assert_close(model.compute_loss(q, p, positives, 0.5),
                               contrastive_loss(q.dense @ p.dense.T, positives, 0.5))
    assert model.loss_parts() == {} and model.flops_multiplier() == 1.0
    assert model.regularization(q, p) is None and model.on_train_step(0, 10) is None


@pytest.mark.parametrize("name", model_types())
def test_every_registered_model_is_a_complete_retrieval_model(name: str) -> None:
    cls = model_class(name)
    assert issubclass(cls, RetrievalModel) and not cls.__abstractmethods__


def test_model_arguments_are_written_once_in_the_constructor(tiny_bert) -> None:
    """``from_backbone`` passes the constructor's arguments through, and recipes are checked
    against the same list: an argument added to ``__init__`` is a recipe field at once."""
    from pyserini_moe.modeling import TaserEncoder

    assert TaserEncoder.argument_names() == ["router", "num_experts", "every", "pooling",
                                             "normalize", "entropy_weight", "gumbel_tau",
                                             "entropy"]
    model = TaserEncoder.from_backbone(tiny_bert, router="seq", every=0, device="cpu")
    assert model.args["router"] == "seq" and model.args["every"] == 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'routr'"):
        TaserEncoder.from_backbone(tiny_bert, routr="seq", device="cpu")
