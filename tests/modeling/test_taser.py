"""TASER on tiny random BERTs: block placement, routers, the entropic regulariser, sizes, saving,
and a short training run of every router through the trainer."""

import json
import math

import pytest
import torch
from transformers import BertConfig

from pyserini_moe.cli.sizes import main as sizes_main
from pyserini_moe.modeling import SiameseBiEncoder, Side, TaserEncoder, load_model
from pyserini_moe.modeling.base import Encoded
from pyserini_moe.modeling.experts import ExpertFeedForward, balance_loss, insert_experts
from pyserini_moe.modeling.folder import MODEL_FILE
from pyserini_moe.modeling.losses import contrastive_loss
from pyserini_moe.modeling.registry import model_types
from pyserini_moe.modeling.sizes import parameter_counts
from pyserini_moe.modeling.taser import specialised_layers

pytestmark = pytest.mark.usefixtures("one_thread")

ROUTERS = ("det", "seq", "tok", "shared", "mean")


def taser(path, router: str, **kwargs) -> TaserEncoder:
    torch.manual_seed(0)
    return TaserEncoder.from_backbone(path, router=router, every=0 if router == "tok" else 1,
                                      device="cpu", **kwargs)


def perturb_expert(model: TaserEncoder, expert: int) -> None:
    """Make one expert differ from the pretrained FFN it was copied from, as training would."""
    with torch.no_grad():
        for block in model.expert_layers:
            block.experts[expert].intermediate.dense.weight.mul_(1.5)


def test_specialised_blocks_follow_every_t_shared_ones():
    assert specialised_layers(12, 2) == [2, 5, 8, 11]  # layers 3, 6, 9, 12 of BERT-base
    assert specialised_layers(6, 2) == [2, 5]  # MiniLM
    assert specialised_layers(6, 0) == list(range(6))  # every block (CoT-MoTE's layout)
    with pytest.raises(ValueError, match="no specialised block"):
        specialised_layers(2, 2)


def test_experts_replace_only_the_specialised_ffns(tiny_bert):
    model = taser(tiny_bert, "det")  # tiny BERT: 2 layers, every=1 -> layer 2 specialised
    layers = model.backbone.encoder.layer
    assert model.specialised == [1]
    assert isinstance(layers[1].output, ExpertFeedForward) and len(layers[1].output.experts) == 2
    assert not isinstance(layers[0].output, ExpertFeedForward)
    assert all(not k.startswith("expert_layers") for k in model.state_dict())  # saved once


@pytest.mark.parametrize("router", ROUTERS)
def test_untrained_taser_equals_the_siamese_model(tiny_bert, texts, router):
    """Every expert starts as the pretrained FFN, so before training the routing is invisible."""
    siamese = SiameseBiEncoder.from_backbone(tiny_bert, pooling="cls", normalize=False,
                                             device="cpu").eval()
    model = taser(tiny_bert, router).eval()
    for side in Side:
        torch.testing.assert_close(model.encode(texts, side).dense,
                                   siamese.encode(texts, side).dense, atol=1e-5, rtol=0)


def test_det_r_sends_questions_and_passages_to_their_own_expert(tiny_bert, texts):
    model = taser(tiny_bert, "det").eval()
    q0, p0 = model.encode(texts, Side.QUERY).dense, model.encode(texts, Side.PASSAGE).dense
    perturb_expert(model, 1)  # the passage expert
    torch.testing.assert_close(model.encode(texts, Side.QUERY).dense, q0, rtol=0, atol=0)
    assert not torch.allclose(model.encode(texts, Side.PASSAGE).dense, p0)
    assert [c.tolist() for c in model.route(texts, Side.QUERY)] == [[0, 0, 0]]
    assert [c.tolist() for c in model.route(texts, Side.PASSAGE)] == [[1, 1, 1]]


def test_seq_r_routes_whole_sequences_and_tok_r_single_tokens(tiny_bert, texts):
    seq = taser(tiny_bert, "seq", num_experts=3).eval()
    (choice,) = seq.route(texts, Side.PASSAGE)
    assert choice.shape == (3,) and set(choice.tolist()) <= {0, 1, 2}
    tok = taser(tiny_bert, "tok").eval()
    batch = tok.tokenize(texts, Side.PASSAGE, 32)
    choices = tok.route(texts, Side.PASSAGE)
    assert len(choices) == 2  # every=0: both layers specialised
    for c in choices:
        assert c.shape == batch["input_ids"].shape
        assert ((c == -1) == (batch["attention_mask"] == 0)).all()  # padding is not routed


def test_inference_routing_is_the_argmax_and_deterministic(tiny_bert, texts):
    model = taser(tiny_bert, "seq").eval()
    perturb_expert(model, 0)
    first = model.encode(texts, Side.QUERY).dense
    torch.testing.assert_close(model.encode(texts, Side.QUERY).dense, first, rtol=0, atol=0)
    block = model.expert_layers[0]
    assert (block.choice == block.probs.argmax(-1)).all()


@pytest.mark.parametrize("router", ("seq", "tok"))
def test_training_routes_each_unit_to_exactly_one_expert(tiny_bert, router):
    """Hard Gumbel-softmax in training: every token's output is one expert's output, unscaled."""
    model = taser(tiny_bert, router)
    perturb_expert(model, 1)
    block = model.expert_layers[0]
    for module in block.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # so that training and reference differ only in the routing
    block.train().mask = torch.ones(4, 5)
    hidden = torch.randn(4, 5, 32)
    out = block(hidden, hidden)
    references = torch.stack([expert(hidden) for expert in block.experts])  # [I, B, L, H]
    choice = block.choice if router == "tok" else block.choice[:, None].expand(4, 5)
    picked = references.gather(0, choice[None, :, :, None].expand(1, 4, 5, 32))[0]
    torch.testing.assert_close(out, picked, atol=1e-6, rtol=0)
    assert not torch.allclose(references[0], references[1])


@pytest.mark.parametrize("router", ("seq", "tok"))
def test_learned_routers_get_gradient_from_the_ranking_loss(tiny_bert, texts, router):
    """Hard Gumbel-softmax: one expert in the forward pass, the router still learns."""
    model = taser(tiny_bert, router).train()
    perturb_expert(model, 1)  # with identical experts the choice could not matter
    q = model(**model.tokenize(texts, Side.QUERY, 16), side=Side.QUERY)
    p = model(**model.tokenize(texts, Side.PASSAGE, 16), side=Side.PASSAGE)
    contrastive_loss(model.score(q, p), torch.arange(3)).backward()
    for block in model.expert_layers:
        assert block.route.weight.grad is not None and block.route.weight.grad.abs().sum() > 0
    gates = q.routing[0]
    torch.testing.assert_close(gates.sum(-1), torch.ones(len(gates)))


def test_balance_loss_penalises_collapse_not_specialisation():
    collapsed = [torch.tensor([[1.0, 0.0]] * 4)]
    other = [torch.tensor([[0.0, 1.0]] * 4)]
    assert balance_loss(collapsed, collapsed).item() == pytest.approx(math.log(2))
    assert balance_loss(collapsed, other).item() == pytest.approx(0.0, abs=1e-6)  # Det-R-like
    half = [torch.full((4, 2), 0.5)]
    assert balance_loss(half, half).item() == pytest.approx(0.0, abs=1e-6)


def test_the_regulariser_pulls_a_collapsing_router_back(tiny_bert, texts):
    """Optimised alone, it spreads inputs that all went to expert 0 over both experts."""
    model = taser(tiny_bert, "tok", entropy_weight=1.0).train()
    routers = [block.route for block in model.expert_layers]
    with torch.no_grad():
        for r in routers:
            r.bias.copy_(torch.tensor([4.0, -4.0]))  # almost everything to expert 0
    optimizer = torch.optim.SGD([p for r in routers for p in r.parameters()], lr=5.0)

    def encode_both():
        q = model(**model.tokenize(texts, Side.QUERY, 16), side=Side.QUERY)
        p = model(**model.tokenize(texts, Side.PASSAGE, 16), side=Side.PASSAGE)
        return q, p

    q, p = encode_both()
    before = model.regularization(q, p)
    for _ in range(30):
        optimizer.zero_grad()
        q, p = encode_both()
        model.regularization(q, p).backward()
        optimizer.step()
    q, p = encode_both()
    after = model.regularization(q, p)
    assert after.item() < 0.2 * before.item()
    share = torch.cat([q.routing[0], p.routing[0]]).mean(0)
    assert share.min().item() > 0.3


# Fixed router probabilities, one specialised block, I = 2: two questions, two passages.
HAND_Q = [[0.5, 0.5], [0.9, 0.1]]
HAND_P = [[0.2, 0.8], [0.2, 0.8]]


def _plogp(*probs: float) -> float:
    return sum(x * math.log(x) for x in probs)


def test_the_two_entropy_forms_on_hand_built_router_probabilities(tiny_bert):
    """batch: log I - H(P-bar), P-bar = mean of the two sides' means; per_input (released code):
    mean over sides of each side's mean of sum_i P log P. Values worked out by hand."""
    q, p = Encoded(routing=[torch.tensor(HAND_Q)]), Encoded(routing=[torch.tensor(HAND_P)])
    # batch: P-bar = ([0.7, 0.3] + [0.2, 0.8]) / 2 = [0.45, 0.55]
    batch = math.log(2) + _plogp(0.45, 0.55)
    assert batch == pytest.approx(0.0050084, abs=1e-6)
    # per input: questions (-0.693147 - 0.325083) / 2 = -0.509115; passages -0.500402
    per_input = ((_plogp(0.5, 0.5) + _plogp(0.9, 0.1)) / 2 + _plogp(0.2, 0.8)) / 2
    assert per_input == pytest.approx(-0.5047586, abs=1e-6)
    for entropy, expected in (("batch", batch), ("per_input", per_input)):
        model = taser(tiny_bert, "seq", entropy_weight=0.01, entropy=entropy)
        assert model.regularization(q, p).item() == pytest.approx(0.01 * expected, abs=1e-8)
    assert taser(tiny_bert, "seq").entropy == "batch"  # the default: models saved before stay
    # the forms disagree on what they reward: every input undecided is the best per_input value
    # (-log 2) and a perfectly balanced batch (0) for batch; a certain router that splits the
    # batch evenly is balanced (0) yet maximally confident (0 per input)
    split = Encoded(routing=[torch.tensor([[1.0, 0.0], [0.0, 1.0]])])
    undecided = Encoded(routing=[torch.full((2, 2), 0.5)])
    per_input_model = taser(tiny_bert, "seq", entropy_weight=1.0, entropy="per_input")
    batch_model = taser(tiny_bert, "seq", entropy_weight=1.0)
    assert per_input_model.regularization(undecided, undecided).item() == pytest.approx(
        -math.log(2))
    assert per_input_model.regularization(split, split).item() == pytest.approx(0.0, abs=1e-6)
    assert batch_model.regularization(split, split).item() == pytest.approx(0.0, abs=1e-6)


def test_per_input_entropy_averages_over_blocks_and_ignores_tok_r_padding(tiny_bert, texts):
    """Two Tok-R blocks: the regulariser is the mean of the blocks' values, computed from the
    real tokens' probabilities only."""
    model = taser(tiny_bert, "tok", entropy_weight=1.0, entropy="per_input").train()
    batch = model.tokenize(texts, Side.QUERY, 16)
    q = model(**batch, side=Side.QUERY)
    real = int(batch["attention_mask"].sum())
    assert len(q.routing) == 2 and all(len(r) == real for r in q.routing)
    by_hand = sum(float((r * r.log()).sum(-1).mean().detach()) for r in q.routing) / 2
    assert model.regularization(q, q).item() == pytest.approx(by_hand, rel=1e-5)


def test_entropy_form_is_validated(tiny_bert):
    with pytest.raises(ValueError, match=r"entropy: must be one of batch, per_input, got 'mean'"):
        taser(tiny_bert, "seq", entropy="mean")


def test_regularization_only_for_learned_routers(tiny_bert, texts):
    for router, expected in (("det", None), ("shared", None)):
        model = taser(tiny_bert, router).train()
        q = model(**model.tokenize(texts, Side.QUERY, 16), side=Side.QUERY)
        assert q.routing is None and model.regularization(q, q) is expected
    model = taser(tiny_bert, "seq", entropy_weight=0.0).train()
    q = model(**model.tokenize(texts, Side.QUERY, 16), side=Side.QUERY)
    assert model.regularization(q, q) is None


@pytest.mark.parametrize("router", ROUTERS)
def test_save_load_round_trip(tiny_bert, texts, tmp_path, router):
    model = taser(tiny_bert, router).eval()
    perturb_expert(model, 0)
    model.save(tmp_path / "taser")
    loaded = load_model(tmp_path / "taser", device="cpu")
    assert isinstance(loaded, TaserEncoder) and loaded.args == model.args
    for side in Side:
        torch.testing.assert_close(loaded.encode(texts, side).dense, model.encode(texts, side).dense,
                                   rtol=0, atol=0)


@pytest.mark.parametrize("entropy", ("batch", "per_input"))
def test_entropy_form_round_trips_through_save_and_load(tiny_bert, tmp_path, entropy):
    model = taser(tiny_bert, "seq", entropy=entropy)
    model.save(tmp_path / "taser")
    loaded = load_model(tmp_path / "taser", device="cpu")
    assert loaded.args["entropy"] == entropy and loaded.entropy == entropy
    assert loaded.args == model.args


def test_models_saved_without_the_entropy_arg_load_with_the_batch_form(tiny_bert, tmp_path):
    taser(tiny_bert, "seq").save(tmp_path / "taser")
    meta_file = tmp_path / "taser" / MODEL_FILE
    meta = json.loads(meta_file.read_text())
    del meta["args"]["entropy"]  # as written before the argument existed
    meta_file.write_text(json.dumps(meta))
    assert load_model(tmp_path / "taser", device="cpu").entropy == "batch"


def test_mean_router_averages_every_expert_for_both_sides(tiny_bert, texts):
    """The capacity control: the experts' parameters on every input, no routing."""
    model = taser(tiny_bert, "mean").eval()
    (block,) = model.expert_layers
    hidden = torch.randn(2, 5, model.backbone.config.hidden_size)
    perturb_expert(model, 1)
    expected = (block.experts[0](hidden) + block.experts[1](hidden)) / 2
    torch.testing.assert_close(block(hidden, hidden), expected, rtol=0, atol=0)
    q0, p0 = model.encode(texts, Side.QUERY).dense, model.encode(texts, Side.PASSAGE).dense
    perturb_expert(model, 0)  # each expert is part of both sides' vectors
    assert not torch.allclose(model.encode(texts, Side.QUERY).dense, q0)
    assert not torch.allclose(model.encode(texts, Side.PASSAGE).dense, p0)
    with pytest.raises(ValueError, match="routes nothing"):
        model.route(texts, Side.QUERY)


def test_mean_router_experts_drift_apart_in_training(tiny_bert, texts):
    """Each copy has its own dropout, so the averaged pair is not one FFN once trained: the
    control has the experts' capacity, which the Siamese model has not."""
    model = taser(tiny_bert, "mean").train()
    (block,) = model.expert_layers
    q = model(**model.tokenize(texts, Side.QUERY, 16), side=Side.QUERY).dense
    p = model(**model.tokenize(texts, Side.PASSAGE, 16), side=Side.PASSAGE).dense
    contrastive_loss(q @ p.T, torch.arange(len(texts))).backward()
    first, second = (e.intermediate.dense.weight.grad for e in block.experts)
    assert first is not None and second is not None
    assert first.abs().sum() > 0 and not torch.allclose(first, second)


def test_bad_router_settings_are_refused(tiny_bert):
    with pytest.raises(ValueError, match="router: must be one of"):
        taser(tiny_bert, "random")
    with pytest.raises(ValueError, match="needs 2 expert"):
        taser(tiny_bert, "det", num_experts=3)
    with pytest.raises(ValueError, match="mean router needs >= 2 experts"):
        taser(tiny_bert, "mean", num_experts=1)
    with pytest.raises(ValueError, match="not a BERT-style encoder"):
        insert_experts(torch.nn.Linear(2, 2), [0], 2, "det")


def test_bert_base_sizes_match_the_paper(capsys):
    """Table A3: DPR 218M, TASER (T=2, I=2) 128M; table A1: I=4 166M."""
    counts = parameter_counts(BertConfig())
    assert counts["dpr (two encoders)"] / 1e6 == pytest.approx(218, abs=1)
    assert counts["taser det-r (T=2, I=2)"] / 1e6 == pytest.approx(128, abs=1)
    assert counts["taser seq-r (T=2, I=4)"] / 1e6 == pytest.approx(166, abs=1)
    assert counts["taser-shared (I=1)"] == counts["siamese"]
    # every registered model is counted, from the registry (not a hand list)
    assert set(model_types()) - {"dpr", "taser"} <= set(counts)
    assert sizes_main(["--bert-base"]) == 0
    assert "| dpr (two encoders) | 217.8M |" in capsys.readouterr().out
