"""The model contract: an abstract base whose training hooks have plain defaults, so the trainer
calls every hook unconditionally and a model overrides only what its method changes."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.modeling import Encoded, RetrievalModel, SiameseBiEncoder, model_types
from pyserini_moe.modeling.losses import contrastive_loss
from pyserini_moe.modeling.registry import model_class


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


def test_model_arguments_are_declared_once_in_the_model_args_class(tiny_bert) -> None:
    """One dataclass per model lists its arguments, defaults and checks: the constructor,
    ``from_backbone`` and the recipe check read it, so an argument added there is a recipe field
    at once, and a bad value is refused in one line wherever it was given."""
    import dataclasses

    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import TaserEncoder
    from pyserini_moe.modeling.taser import TaserArgs

    assert TaserEncoder.argument_names() == [f.name for f in dataclasses.fields(TaserArgs)] == [
        "router", "num_experts", "every", "pooling", "normalize", "entropy_weight", "gumbel_tau",
        "entropy"]
    model = TaserEncoder.from_backbone(tiny_bert, router="seq", every=0, device="cpu")
    assert model.args["router"] == "seq" and model.args["every"] == 0
    assert model.args["num_experts"] == 2  # the default the router needs, resolved and saved
    with pytest.raises(UserError, match=r"^taser models have no argument routr \(they have: "):
        TaserEncoder.from_backbone(tiny_bert, routr="seq", device="cpu")
    with pytest.raises(UserError, match=r"^taser model argument gumbel_tau: must be > 0, got 0"):
        TaserEncoder.from_backbone(tiny_bert, gumbel_tau=0, device="cpu")
    with pytest.raises(UserError, match="router: must be one of det, seq, tok, shared, mean"):
        TaserArgs(router="sequence")


@pytest.mark.parametrize("name", model_types())
def test_every_model_declares_its_arguments_and_saves_them_all(name: str) -> None:
    """Every registered model has an ``Args`` class whose defaults are valid and whose saved form
    names only its fields (what ``load_model`` passes back to the constructor)."""
    from pyserini_moe.modeling.args import ModelArgs

    cls = model_class(name)
    assert issubclass(cls.Args, ModelArgs) and cls.Args is not ModelArgs
    assert set(cls.Args().saved()) <= set(cls.argument_names())


def test_argument_types_are_checked_and_equal_values_kept_as_given() -> None:
    """An integer where a number is declared stays an integer (the saved arguments enter the
    fingerprint every index records); a list where a tuple is declared becomes the tuple; a
    wrong type is one line."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling.came import CameArgs
    from pyserini_moe.modeling.sbmoe import SbMoeArgs

    assert SbMoeArgs(balance_weight=0).saved()["balance_weight"] == 0
    assert isinstance(SbMoeArgs(balance_weight=0).balance_weight, int)
    args = CameArgs(experts=["global", "lexical"])
    assert args.experts == ("lexical", "global") and args.saved()["experts"] == ["lexical", "global"]
    with pytest.raises(UserError, match=r"^dim: expected an integer, found '128'"):
        CameArgs(dim="128")
    with pytest.raises(UserError, match="normalize_local: expected true or false"):
        CameArgs(normalize_local="no")
    with pytest.raises(UserError, match=r"experts: unknown expert\(s\) \['semantic'\]"):
        CameArgs(experts=["semantic"])
    with pytest.raises(UserError, match="n_experts: must be >= 2"):
        SbMoeArgs(n_experts=1)
