"""SB-MoE on a tiny random BERT: routing, gradients to the gate and the noise, inference modes,
the random gate, save/load, a short training run and the shipped recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pyserini_moe.modeling import SbMoeEncoder, Side, load_model
from pyserini_moe.modeling.losses import contrastive_loss
from pyserini_moe.train.config import TrainingConfig, from_dict, load_config
from pyserini_moe.train.trainer import Trainer, parameter_groups, set_seed

ENCODERS = Path(__file__).resolve().parents[2] / "encoders"
WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]
TEXTS = [f"{WORDS[i % 18]} {WORDS[(3 * i + 1) % 18]} {WORDS[(5 * i + 2) % 18]}" for i in range(24)]
LEARNING_RATES = {"backbone.": 1e-6, "experts.": 1e-4, "gate.": 1e-4}


def make(tiny_bert: Path, **args) -> SbMoeEncoder:
    torch.manual_seed(0)
    return SbMoeEncoder.from_backbone(tiny_bert, device="cpu", **args)


def spread_experts(model: SbMoeEncoder) -> SbMoeEncoder:
    """Experts far from their near-identity start, as after training: their outputs differ."""
    torch.manual_seed(1)
    with torch.no_grad():
        for expert in model.experts:
            expert.up.weight.normal_(0, 0.5)
            expert.down.weight.normal_(0, 0.5)
    return model


def batch(model: SbMoeEncoder, texts: list[str]) -> dict[str, torch.Tensor]:
    return model.tokenize(texts, Side.PASSAGE, 16)


def pooled_and_residuals(model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    x = model._pooled(**inputs)
    return x, torch.stack([expert(x) for expert in model.experts], dim=1)


def test_shapes_and_normalised_vectors(tiny_bert, texts) -> None:
    model = make(tiny_bert).eval()
    q, p = model.encode(texts[:2], Side.QUERY), model.encode(texts, Side.PASSAGE)
    assert q.dense.shape == (2, 32) and p.dense.shape == (3, 32)
    assert model.score(q, p).shape == (2, 3) and q.aux_loss is None
    torch.testing.assert_close(p.dense.norm(dim=-1), torch.ones(3))
    raw = make(tiny_bert, pooling="cls", normalize=False, n_experts=3).eval()
    assert not torch.allclose(raw.encode(texts, Side.PASSAGE).dense.norm(dim=-1), torch.ones(3))
    assert len(raw.experts) == 3 and raw.gate.net[-1].out_features == 3


@pytest.mark.parametrize("training", [True, False], ids=["noisy-training", "top1-inference"])
def test_top1_uses_exactly_one_expert_per_input(tiny_bert, training) -> None:
    model = spread_experts(make(tiny_bert)).train(training)
    inputs = batch(model, TEXTS)
    x, residuals = pooled_and_residuals(model, inputs)
    gating = model.mixture_weights(x, **inputs)
    assert ((gating.weights != 0).sum(-1) == 1).all()
    torch.testing.assert_close(gating.weights.sum(-1), torch.ones(len(TEXTS)))  # value 1: eq. 2
    chosen = gating.weights.argmax(-1)
    if not training:  # the clean gate's argmax (eq. 1)
        assert torch.equal(chosen, gating.probs.argmax(-1))
        expected = F.normalize(x + residuals[torch.arange(len(TEXTS)), chosen], dim=-1)
        torch.testing.assert_close(model(**inputs, side=Side.PASSAGE).dense, expected)


def test_all_weights_are_the_gate_probabilities_and_sum_to_one(tiny_bert) -> None:
    model = spread_experts(make(tiny_bert, inference="all")).eval()
    inputs = batch(model, TEXTS)
    x, residuals = pooled_and_residuals(model, inputs)
    gating = model.mixture_weights(x, **inputs)
    assert (gating.weights > 0).all() and torch.equal(gating.weights, gating.probs)
    torch.testing.assert_close(gating.weights.sum(-1), torch.ones(len(TEXTS)))
    experts = x.unsqueeze(1) + residuals  # f_i(x) = x + a_i(x)
    expected = F.normalize((gating.weights.unsqueeze(-1) * experts).sum(1), dim=-1)  # eq. 3
    torch.testing.assert_close(model(**inputs, side=Side.PASSAGE).dense, expected)


def test_ranking_loss_reaches_the_gate_and_the_noise_projection_trains(tiny_bert) -> None:
    model = spread_experts(make(tiny_bert, balance_weight=0.0)).train()  # ranking loss only
    q = model(**model.tokenize(TEXTS[:8], Side.QUERY, 16), side=Side.QUERY)
    p = model(**batch(model, TEXTS[:8]), side=Side.PASSAGE)
    assert q.aux_loss is None
    contrastive_loss(model.score(q, p), torch.arange(8), temperature=0.1).backward()
    for name in ("gate.net.0.weight", "gate.net.2.weight", "gate.noise.weight"):
        grad = model.get_parameter(name).grad  # ~1e-8 (rounding noise) if p_m were cancelled
        assert grad is not None and grad.norm() > 1e-3, name

    groups = parameter_groups(model, TrainingConfig(learning_rate=1e-3,
                                                    group_learning_rates=LEARNING_RATES))
    lr = {id(param): group["lr"] for group in groups for param in group["params"]}
    noise = [model.gate.noise.weight, model.gate.noise.bias]
    assert all(lr[id(param)] == 1e-4 for param in noise)  # in AdamW, at the gate's rate
    before = [param.detach().clone() for param in noise]
    optimizer = torch.optim.AdamW(groups)
    optimizer.step()
    assert all(not torch.equal(b, param) for b, param in zip(before, noise))


def test_balance_loss_only_in_training_and_larger_when_routing_collapses(tiny_bert) -> None:
    model = make(tiny_bert).train()
    inputs = batch(model, TEXTS)
    torch.manual_seed(0)
    spread = model(**inputs, side=Side.PASSAGE).aux_loss
    with torch.no_grad():
        model.gate.net[-1].bias.copy_(torch.tensor([20.0, 0, 0, 0, 0, 0]))  # everything -> 0
    torch.manual_seed(0)
    collapsed = model(**inputs, side=Side.PASSAGE).aux_loss
    assert 0 <= spread < collapsed and collapsed.requires_grad
    assert model.eval()(**inputs, side=Side.PASSAGE).aux_loss is None


def test_save_load_round_trip_in_both_inference_modes(tiny_bert, tmp_path) -> None:
    model = spread_experts(make(tiny_bert)).eval()
    model.save(tmp_path / "top1")
    model.with_inference("all").save(tmp_path / "all")
    for mode in ("top1", "all"):
        loaded = load_model(tmp_path / mode, device="cpu")
        assert isinstance(loaded, SbMoeEncoder) and loaded.inference == mode
        assert loaded.args == {**model.args, "inference": mode}
        assert json.loads((tmp_path / mode / "pyserini_moe.json").read_text())["args"][
            "inference"] == mode
        model.with_inference(mode)
        for side in Side:
            torch.testing.assert_close(loaded.encode(TEXTS, side).dense,
                                       model.encode(TEXTS, side).dense, rtol=0, atol=0)


def test_inference_mode_changes_the_output(tiny_bert) -> None:
    model = spread_experts(make(tiny_bert)).eval()
    top1 = model.encode(TEXTS, Side.PASSAGE).dense
    assert model.with_inference("all") is model and model.args["inference"] == "all"
    every = model.encode(TEXTS, Side.PASSAGE).dense
    assert not torch.allclose(top1, every, atol=1e-3)
    with pytest.raises(ValueError, match="inference: must be one of top1, all"):
        model.with_inference("top2")


def test_random_gate_has_no_parameters_and_reproducible_random_weights(tiny_bert) -> None:
    model = spread_experts(make(tiny_bert, gate="random")).eval()
    assert model.gate is None and not any(n.startswith("gate.") for n, _ in
                                          model.named_parameters())
    routing = model.route(TEXTS, Side.PASSAGE)
    torch.testing.assert_close(routing.probs.sum(-1), torch.ones(len(TEXTS)))
    assert len(set(routing.expert.tolist())) >= 4  # unrelated to content: spread over experts
    # Seeded by the text's tokens: the same in another batch (other padding), and on every call.
    alone = model.route(TEXTS[3:4], Side.PASSAGE)
    torch.testing.assert_close(alone.probs[0], routing.probs[3], rtol=0, atol=0)
    inputs = batch(model, TEXTS)
    x, _ = pooled_and_residuals(model, inputs)
    weights = model.mixture_weights(x, **inputs).weights  # top1: the highest-weighted expert only
    assert torch.equal(weights.argmax(-1), routing.expert)
    assert ((weights != 0).sum(-1) == 1).all()
    model.eval().with_inference("all")
    torch.testing.assert_close(model.mixture_weights(x, **inputs).weights, routing.probs)
    once = model.encode(TEXTS, Side.QUERY).dense
    torch.testing.assert_close(model.encode(TEXTS, Side.QUERY).dense, once, rtol=0, atol=0)
    assert model.train()(**inputs, side=Side.PASSAGE).aux_loss is None
    with pytest.raises(ValueError, match=r"'gate\.'\] match no parameter"):
        parameter_groups(model, TrainingConfig(learning_rate=1e-3,
                                               group_learning_rates=LEARNING_RATES))


@pytest.mark.parametrize("mixture", ["residual", "published"])
def test_random_gate_draws_afresh_in_training(tiny_bert, mixture) -> None:
    """The paper's random gate: new random expert weights at every training forward pass (a
    seeded draw there would be a fixed hash router); one expert per text all the same."""
    model = spread_experts(make(tiny_bert, gate="random", mixture=mixture)).train()
    inputs = batch(model, TEXTS)
    x, _ = pooled_and_residuals(model, inputs)
    torch.manual_seed(5)
    first, second = (model.mixture_weights(x, **inputs).weights for _ in range(2))
    assert ((first != 0).sum(-1) == 1).all() and ((second != 0).sum(-1) == 1).all()
    assert not torch.equal(first.argmax(-1), second.argmax(-1))
    seeded = model.eval().mixture_weights(x, **inputs).weights.argmax(-1)
    assert not torch.equal(first.argmax(-1), seeded)


def test_published_mixture_is_the_public_codes_form(tiny_bert) -> None:
    """y = normalize(normalize(sum_i g_i E_i(x)) + x), x the unit-length pooled vector, plain
    experts at PyTorch's default init, a frozen random noise projection, top-1 masking that keeps
    the gate's value (which the unit-length mixture then cancels)."""
    model = make(tiny_bert, mixture="published").eval()
    assert model.args["mixture"] == "published"
    assert not model.gate.noise.weight.requires_grad and model.gate.noise.weight.abs().sum() > 0
    assert model.experts[0].up.weight.std() > 5 * 1e-2  # default init, not near-identity
    inputs = batch(model, TEXTS)
    hidden = model.backbone(**inputs).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    x = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    probs = model.gate(x).softmax(-1)
    top = probs.argmax(-1)
    outs = torch.stack([e.up(F.relu(e.down(x))) for e in model.experts], dim=1)
    chosen = outs[torch.arange(len(TEXTS)), top] * probs[torch.arange(len(TEXTS)), top, None]
    expected = F.normalize(F.normalize(chosen, dim=-1, eps=1e-6) + x, dim=-1)
    torch.testing.assert_close(model(**inputs, side=Side.PASSAGE).dense, expected)
    gating = model.mixture_weights(x, **inputs)
    torch.testing.assert_close(gating.weights.sum(-1), probs.max(-1).values)  # the value p_m
    every = model.with_inference("all").mixture_weights(x, **inputs).weights
    torch.testing.assert_close(every, probs)
    model.train()
    assert model(**inputs, side=Side.PASSAGE).aux_loss is None  # no balancing in the public code
    loss = model(**inputs, side=Side.PASSAGE).dense.sum()
    loss.backward()
    assert model.gate.noise.weight.grad is None


def test_route_reports_the_gates_first_choice(tiny_bert) -> None:
    model = spread_experts(make(tiny_bert)).eval()
    routing = model.route(TEXTS, Side.QUERY)
    assert routing.expert.shape == (24,) and routing.probs.shape == (24, 6)
    assert torch.equal(routing.expert, routing.probs.argmax(-1))
    torch.testing.assert_close(routing.probs.sum(-1), torch.ones(24))


def test_bad_arguments_are_refused(tiny_bert) -> None:
    for args, words in (({"inference": "top2"}, "inference: must be one of top1, all"),
                        ({"gate": "hash"}, "gate"),
                        ({"n_experts": 1}, "n_experts"), ({"pooling": "sum"}, "pooling"),
                        ({"balance_weight": -1.0}, "balance_weight"),
                        ({"mixture": "sum"}, "mixture")):
        with pytest.raises(ValueError, match=words):
            make(tiny_bert, **args)


def test_a_short_training_run_learns_and_writes_best(tiny_bert, tmp_path, toy_data) -> None:
    config = from_dict({
        "output_dir": str(tmp_path / "run"),
        "model": {"type": "sbmoe", "backbone": str(tiny_bert), "args": {"n_experts": 3}},
        "data": {"collection": "toy", "query_max_length": 8, "passage_max_length": 8},
        "training": {"learning_rate": 3e-3, "group_learning_rates": {"gate.": 1e-2},
                     "batch_size": 6, "epochs": 4, "temperature": 0.1, "seed": 11,
                     "device": "cpu"},
    }, "toy.yaml")
    set_seed(11)
    model = SbMoeEncoder.from_backbone(tiny_bert, device="cpu", **config.model.args)
    summary = Trainer(model, config, toy_data(), progress=False).train()
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text()
           .splitlines()]
    assert summary["metrics"]["steps"] == len(log) == 12
    # the balance loss reached the trainer, through the model's regularization hook
    assert all(entry["regularization"] > 0 for entry in log)
    losses = [entry["rank_loss"] for entry in log]
    assert sum(losses[-3:]) < sum(losses[:3])
    best = load_model(tmp_path / "run" / "best", device="cpu")
    assert best.model_type == "sbmoe" and best.args["inference"] == "top1"


@pytest.mark.parametrize("name,gate", [("sbmoe-minilm", "learned"),
                                       ("sbmoe-random-minilm", "random")])
def test_the_recipes_load_and_their_learning_rates_match_the_model(name, gate, tiny_bert) -> None:
    config = load_config(ENCODERS / f"{name}.yaml")
    assert config.model.type == "sbmoe" and config.model.args["gate"] == gate
    assert config.model.backbone == "all-minilm-l6-v2" and config.data.collection == "scifact"
    assert config.data.validation_fraction == 0.05 and config.training.epochs == 2
    rates = config.training.group_learning_rates
    assert rates["backbone."] == 1e-6 and rates["experts."] == 1e-4
    model = make(tiny_bert, **config.model.args)  # every prefix names parameters of the model
    assert parameter_groups(model, config.training)


def test_capacity_control_is_one_wide_adapter_without_routing(tiny_bert) -> None:
    """gate none + one expert of width n x h/2: the experts' parameters, applied to every text."""
    routed = make(tiny_bert, n_experts=6)
    control = spread_experts(make(tiny_bert, n_experts=1, gate="none", expert_width=6 * 16)).eval()
    assert control.gate is None and control.experts[0].down.out_features == 96

    def adapter_parameters(model):
        return sum(p.numel() for n, p in model.named_parameters() if n.startswith("experts."))
    # same weights; the six experts' biases of width 16 and the control's of width 96 agree too
    assert adapter_parameters(control) == adapter_parameters(routed) - 5 * 32
    inputs = batch(control, TEXTS)
    x, residuals = pooled_and_residuals(control, inputs)
    for training in (True, False):
        weights = control.train(training).mixture_weights(x, **inputs).weights
        assert torch.equal(weights, torch.ones(len(TEXTS), 1))
    torch.testing.assert_close(control.eval()(**inputs, side=Side.PASSAGE).dense,
                               F.normalize(x + residuals[:, 0], dim=-1))
    for args in ({"n_experts": 1}, {"n_experts": 3, "gate": "none"}, {"expert_width": 0}):
        with pytest.raises(ValueError, match="n_experts|expert_width"):
            make(tiny_bert, **args)
