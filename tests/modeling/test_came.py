"""CAME on a tiny random 3-layer BERT: the manual shared-bottom + stacks forward, each expert's
scoring function, the competitive weights and losses of both stages (eq. 9-11), stage switching,
expert subsets, save/load, a real optimisation step through the trainer and the shipped recipes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pyserini_moe.modeling import CameEncoder, ColbertEncoder, Encoded, Side, load_model
from pyserini_moe.modeling.came import competitive_weights, positive_rank
from pyserini_moe.modeling.pooling import pretrained_encoder
from pyserini_moe.train.config import from_dict, load_config
from pyserini_moe.train.trainer import Trainer, parameter_groups

ENCODERS = Path(__file__).resolve().parents[2] / "encoders"
WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
         "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]
TEXTS = [f"{WORDS[i % 18]} {WORDS[(3 * i + 1) % 18]} {WORDS[(5 * i + 2) % 18]}" for i in range(24)]
PADDED = ["what is dense retrieval?", "a cat", "the mixture of sparse and dense experts model"]


def make(path: Path, **args) -> CameEncoder:
    torch.manual_seed(0)
    return CameEncoder.from_backbone(path, device="cpu", **{"dim": 16, **args})


def spread_stacks(model: CameEncoder) -> CameEncoder:
    """Make the stacks differ from the pretrained layers they copy, as training would."""
    torch.manual_seed(1)
    with torch.no_grad():
        for i, stack in enumerate(model.stacks.values()):
            for param in stack.parameters():
                param.add_(torch.randn_like(param) * 0.1 * (i + 1))
    return model


# -- architecture -------------------------------------------------------------------------------
@pytest.mark.parametrize("shared", [0, 1, 2, 3])
def test_unchanged_stacks_reproduce_the_backbone(bert3, shared) -> None:
    """Shared bottom + each private stack, run by hand, is exactly the plain backbone's forward
    (embeddings, padding mask, every layer) while the stacks are the pretrained copies."""
    plain = pretrained_encoder(bert3).eval()
    model = make(bert3, shared_layers=shared).eval()
    assert len(model.backbone.encoder.layer) == shared
    assert all(len(stack) == 3 - shared for stack in model.stacks.values())
    batch = model.tokenize(PADDED, Side.PASSAGE, 16)
    assert not batch["attention_mask"].all()  # padding is exercised
    with torch.no_grad():
        expected = plain(**batch).last_hidden_state
        hidden = model.hidden_states(**batch)
    assert set(hidden) == {"lexical", "local", "global"}
    keep = batch["attention_mask"].bool()
    for name, states in hidden.items():
        torch.testing.assert_close(states[keep], expected[keep], atol=1e-5, rtol=0, msg=name)


def test_forward_fills_each_field_from_its_own_stack(bert3) -> None:
    model = spread_stacks(make(bert3, shared_layers=1)).eval()
    batch = model.tokenize(PADDED, Side.PASSAGE, 16)
    with torch.no_grad():
        hidden = model.hidden_states(**batch)
        out = model(**batch, side=Side.PASSAGE)
    assert not torch.allclose(hidden["local"], hidden["global"])  # the stacks differ
    torch.testing.assert_close(out.dense, hidden["global"][:, 0])
    torch.testing.assert_close(out.multi, model.heads["local"](hidden["local"]))
    torch.testing.assert_close(out.sparse, model.heads["lexical"](hidden["lexical"],
                                                                  batch["attention_mask"]))
    assert torch.equal(out.mask, batch["attention_mask"]) and out.mask[:, 0].all()  # [CLS] kept
    assert out.sparse.shape == (3, len(model.tokenizer)) and (out.sparse > 0).any()
    torch.testing.assert_close(out.multi.norm(dim=-1), torch.ones(out.mask.shape))


@torch.no_grad()
def test_mean_pooled_global_expert_averages_real_tokens(bert3, tmp_path) -> None:
    """pooling="mean" (the MiniLM recipes): the global vector is the mean of the global stack's
    non-padding tokens; the other experts do not change, and the choice survives save/load."""
    cls_model = spread_stacks(make(bert3, shared_layers=1)).eval()
    mean_model = spread_stacks(make(bert3, shared_layers=1, pooling="mean")).eval()
    batch = mean_model.tokenize(PADDED, Side.PASSAGE, 16)
    hidden = mean_model.hidden_states(**batch)["global"]
    out = mean_model(**batch, side=Side.PASSAGE)
    for row, length in enumerate(batch["attention_mask"].sum(1).tolist()):
        torch.testing.assert_close(out.dense[row], hidden[row, :length].mean(0))
    reference = cls_model(**batch, side=Side.PASSAGE)
    assert not torch.allclose(out.dense, reference.dense)
    torch.testing.assert_close(out.sparse, reference.sparse, atol=0, rtol=0)
    mean_model.save(tmp_path / "mean")
    loaded = load_model(tmp_path / "mean", device="cpu")
    assert loaded.args["pooling"] == "mean"
    torch.testing.assert_close(loaded.encode(PADDED, Side.PASSAGE).dense,
                               mean_model.encode(PADDED, Side.PASSAGE).dense, atol=0, rtol=0)


@torch.no_grad()
def test_only_one_representation_runs_one_stack(bert3) -> None:
    model = spread_stacks(make(bert3, shared_layers=1)).eval()
    batch = model.tokenize(PADDED, Side.QUERY, 16)
    full = model(**batch, side=Side.QUERY)
    dense = model(**batch, side=Side.QUERY, only="dense")
    assert dense.sparse is None and dense.multi is None
    torch.testing.assert_close(dense.dense, full.dense, atol=0, rtol=0)
    multi = model(**batch, side=Side.QUERY, only="multi")
    assert multi.dense is None and multi.sparse is None
    torch.testing.assert_close(multi.multi, full.multi, atol=0, rtol=0)
    with pytest.raises(ValueError, match="not 'multi'"):
        make(bert3, experts=["global"])(**batch, side=Side.QUERY, only="multi")


def test_no_shared_layers_gives_each_expert_a_full_copy(bert3) -> None:
    model = make(bert3, shared_layers=0)
    assert len(model.backbone.encoder.layer) == 0
    assert [len(s) for s in model.stacks.values()] == [3, 3, 3]
    default = make(bert3)  # all but the top two layers shared, as in the paper
    assert default.args["shared_layers"] == 1
    layer = sum(p.numel() for p in model.stacks["local_layers"][0].parameters())
    assert (sum(p.numel() for p in model.parameters())
            - sum(p.numel() for p in default.parameters())) == 2 * layer  # 3 copies vs 1 shared


def test_an_expert_left_out_is_not_built(bert3) -> None:
    model = make(bert3, experts=["global", "lexical"])
    assert model.experts == ("lexical", "global") and model.args["experts"] == ["lexical", "global"]
    assert set(model.stacks) == {"lexical_layers", "global_layers"} and set(model.heads) == {"lexical"}
    assert model.representations == ("sparse", "dense")
    q = model.encode(PADDED[:2], Side.QUERY)
    assert q.multi is None and q.mask is None and q.dense is not None and q.sparse is not None
    p = model.encode(PADDED, Side.PASSAGE)
    scores = model.expert_scores(q, p)
    assert set(scores) == {"lexical", "global"}
    torch.testing.assert_close(model.score(q, p), scores["lexical"] + scores["global"])
    single = make(bert3, experts=["local"])
    assert single.encode(PADDED, Side.QUERY).dense is None and "lexical" not in single.heads


@pytest.mark.parametrize("args,words", [
    ({"experts": ["lexical", "semantic"]}, "unknown expert"),
    ({"experts": []}, "at least one is needed"),
    ({"experts": ["local", "local"]}, "listed twice"),
    ({"shared_layers": 4}, r"shared_layers: must be in \[0, 3\]"),
    ({"shared_layers": -1}, "shared_layers"),
    ({"tau": 0.0}, "tau"),
    ({"tau": float("inf")}, "tau"),
    ({"stages": "collaborative"}, "stages: must be one of"),
    ({"standardized_ratio": 1.5}, "standardized_ratio"),
    ({"dim": 0}, "dim"),
    ({"pooling": "first"}, "pooling: must be one of"),
])
def test_bad_arguments_are_refused(bert3, args, words) -> None:
    with pytest.raises(ValueError, match=words):
        make(bert3, **args)


# -- scoring ------------------------------------------------------------------------------------
def test_each_expert_scores_as_the_paper_says(bert3) -> None:
    model = make(bert3)
    q = Encoded(sparse=torch.tensor([[1.0, 0.0, 2.0]]),
                # tokens: [CLS], one word, padding (which would add 5 + 9 if it counted)
                multi=torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]]),
                mask=torch.tensor([[1, 1, 0]]),
                dense=torch.tensor([[1.0, 2.0]]))
    p = Encoded(sparse=torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]]),
                multi=torch.tensor([[[0.5, 0.5], [1.0, 0.0], [9.0, 9.0]],
                                    [[0.0, 2.0], [1.0, 1.0], [-1.0, 0.0]]]),
                mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
                dense=torch.tensor([[3.0, 4.0], [-1.0, 0.0]]))
    scores = model.expert_scores(q, p)
    # lexical: 1*0 + 0*3 + 2*1 = 2 and 1*2 = 2 (eq. 4)
    torch.testing.assert_close(scores["lexical"], torch.tensor([[2.0, 2.0]]))
    # local (eq. 5), [CLS] on both sides, padding on neither:
    #   p0: [CLS]q -> max(0.5, 1) = 1, word -> max(0.5, 0) = 0.5 => 1.5
    #   p1: [CLS]q -> max(0, 1, -1) = 1, word -> max(2, 1, 0) = 2 => 3
    torch.testing.assert_close(scores["local"], torch.tensor([[1.5, 3.0]]))
    # global: [CLS] dot products 1*3 + 2*4 = 11 and -1 (eq. 6)
    torch.testing.assert_close(scores["global"], torch.tensor([[11.0, -1.0]]))
    torch.testing.assert_close(model.score(q, p), torch.tensor([[14.5, 4.0]]))  # eq. 12


# -- competitive learning -----------------------------------------------------------------------
# Two queries, one hard negative each: passages [pos0, pos1, neg0, neg1].
SCORES = {
    # q0: own negative 1 < 3 -> rank 1, although q1's negative (5) beats it; q1: rank 1
    "lexical": [[3.0, 0.0, 1.0, 5.0], [0.0, 2.0, 0.0, 1.0]],
    # q0: own negative 2 > 1 -> rank 2; q1: a tie with its negative counts against it -> rank 2
    "local": [[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 1.0]],
    # q0: rank 1; q1: negative 3 > 0 -> rank 2
    "global": [[2.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 3.0]],
}
RANKS = [[1, 2, 1], [1, 2, 2]]


def test_rank_is_taken_among_the_querys_own_candidates() -> None:
    for e, expert in enumerate(SCORES):
        ranks = positive_rank(torch.tensor(SCORES[expert]), torch.tensor([0, 1]))
        assert ranks.tolist() == [RANKS[0][e], RANKS[1][e]], expert
    # three negatives each: [pos0, pos1, neg0 x 3, neg1 x 3]; the other query's passages (9, 5)
    # never count
    three_negatives = torch.tensor([[0.5, 9.0, 1.0, 0.0, 0.2, 9.0, 9.0, 9.0],
                                    [0.0, 1.0, 5.0, 5.0, 5.0, 0.0, 0.0, 2.0]])
    assert positive_rank(three_negatives, torch.tensor([0, 1])).tolist() == [2, 2]
    with pytest.raises(ValueError, match="same number of hard negatives"):
        positive_rank(torch.zeros(2, 5), torch.tensor([0, 1]))


def test_competitive_weights_by_hand() -> None:
    # tau 0.5: (1 / rank) / tau = (2, 1, 2) and (2, 1, 1)
    e, e2 = math.e, math.e ** 2
    expected = torch.tensor([[e2 / (2 * e2 + e), e / (2 * e2 + e), e2 / (2 * e2 + e)],
                             [e2 / (e2 + 2 * e), e / (e2 + 2 * e), e / (e2 + 2 * e)]])
    weights = competitive_weights(torch.tensor(RANKS, dtype=torch.float), 0.5)
    torch.testing.assert_close(weights, expected)
    # a higher temperature softens the competition (tau 2: logits 0.5, 0.25, 0.5)
    soft = competitive_weights(torch.tensor([[1.0, 2.0, 1.0]]), 2.0)
    torch.testing.assert_close(soft, torch.tensor([[1, math.exp(-0.25), 1]])
                               / (2 + math.exp(-0.25)))


def _losses_by_hand(temperature: float) -> torch.Tensor:
    """[B, E] cross-entropy of each query's positive, from math.exp/log."""
    out = []
    for i in range(2):
        row = []
        for expert in SCORES:
            s = [x / temperature for x in SCORES[expert][i]]
            row.append(math.log(sum(math.exp(x) for x in s)) - s[i])
        out.append(row)
    return torch.tensor(out)


def _hooked(model: CameEncoder, scores: dict[str, torch.Tensor]) -> CameEncoder:
    model.expert_scores = lambda q, p: scores  # compute_loss reads the scores through it
    return model


def test_standardized_loss_is_the_plain_sum_of_expert_losses(bert3) -> None:
    model = _hooked(make(bert3), {k: torch.tensor(v) for k, v in SCORES.items()})
    assert model.stage == "standardized"
    loss = model.compute_loss(Encoded(), Encoded(), torch.tensor([0, 1]), 0.5)
    assert loss.item() == pytest.approx(_losses_by_hand(0.5).sum(1).mean().item(), rel=1e-6)
    assert model.last_weights == {"lexical": 1.0, "local": 1.0, "global": 1.0}


def test_specialized_loss_weights_each_query_by_rank_without_gradient(bert3) -> None:
    scores = {k: torch.tensor(v, requires_grad=True) for k, v in SCORES.items()}
    model = _hooked(make(bert3, stages="specialized"), scores)
    assert model.stage == "specialized"
    loss = model.compute_loss(Encoded(), Encoded(), torch.tensor([0, 1]), 0.5)
    weights = competitive_weights(torch.tensor(RANKS, dtype=torch.float), 0.5)
    assert loss.item() == pytest.approx((weights * _losses_by_hand(0.5)).sum(1).mean().item(),
                                        rel=1e-6)
    assert model.last_weights == pytest.approx(dict(zip(SCORES, weights.mean(0).tolist())))
    loss.backward()
    for e, expert in enumerate(SCORES):
        # d/ds of mean_i w_ie * CE_ie with w constant: w_ie (softmax(s_i / T) - onehot_i) / T / B
        s = scores[expert].detach()
        expected = (F.softmax(s / 0.5, dim=1) - torch.eye(2, 4)) / 0.5 / 2
        torch.testing.assert_close(scores[expert].grad, weights[:, e:e + 1] * expected)


def test_a_single_expert_gets_the_plain_contrastive_loss(bert3) -> None:
    scores = {"global": torch.tensor(SCORES["global"])}
    model = _hooked(make(bert3, experts=["global"], stages="specialized"), scores)
    loss = model.compute_loss(Encoded(), Encoded(), torch.tensor([0, 1]), 2.0)
    assert loss.item() == pytest.approx(F.cross_entropy(scores["global"] / 2.0,
                                                        torch.tensor([0, 1])).item())


def test_stage_follows_the_step(bert3) -> None:
    model = make(bert3, standardized_ratio=0.25)
    stages = []
    for step in range(10):
        model.on_train_step(step, 10)
        stages.append(model.stage)
    assert stages == ["standardized"] * 3 + ["specialized"] * 7  # ceil(0.25 * 10) = 3
    model.on_train_step(0, 10)  # resuming recomputes the stage from the step
    assert model.stage == "standardized"
    for stages_arg in ("standardized", "specialized"):
        fixed = make(bert3, stages=stages_arg)
        for step in (0, 5, 9):
            fixed.on_train_step(step, 10)
            assert fixed.stage == stages_arg


# -- saving and training ------------------------------------------------------------------------
def test_save_load_round_trip(bert3, tmp_path) -> None:
    model = spread_stacks(make(bert3, shared_layers=1, tau=2.0, normalize_local=False)).eval()
    state = model.state_dict()
    assert {k.split(".")[3] for k in state if k.startswith("backbone.encoder.layer.")} == {"0"}
    assert {k.split(".")[2] for k in state if k.startswith("stacks.global_layers.")} == {"0", "1"}
    model.save(tmp_path / "came")
    loaded = load_model(tmp_path / "came", device="cpu")
    assert type(loaded) is CameEncoder and loaded.args == model.args and loaded.tau == 2.0
    embeddings = loaded.backbone.get_input_embeddings().weight
    assert loaded.heads["lexical"].embedding_weight is embeddings  # still tied
    for side in Side:
        before, after = model.encode(PADDED, side), loaded.encode(PADDED, side)
        for name in ("dense", "sparse", "multi", "mask"):
            torch.testing.assert_close(getattr(after, name), getattr(before, name), atol=0, rtol=0)


def test_a_saved_model_continues_under_another_schedule(bert3, tmp_path, tiny_bert) -> None:
    """The paper's hard-negative round trains the first round's model further (eq. 10 only)."""
    model = spread_stacks(make(bert3)).eval()
    model.save(tmp_path / "round1")
    again = make(tmp_path / "round1", stages="specialized", tau=2.0).eval()
    assert again.stage == "specialized" and again.args["stages"] == "specialized"
    assert again.tau == 2.0 and again.args["shared_layers"] == model.args["shared_layers"]
    torch.testing.assert_close(again.encode(PADDED, Side.PASSAGE).dense,
                               model.encode(PADDED, Side.PASSAGE).dense, atol=0, rtol=0)
    with pytest.raises(ValueError, match="another architecture"):
        make(tmp_path / "round1", shared_layers=0)
    with pytest.raises(ValueError, match=r"saved != asked.*experts"):
        make(tmp_path / "round1", experts=["global"])
    ColbertEncoder.from_backbone(tiny_bert, dim=16, device="cpu").save(tmp_path / "colbert")
    with pytest.raises(ValueError, match="holds a colbert model"):
        make(tmp_path / "colbert")
    with pytest.raises(ValueError, match="tau"):
        make(tmp_path / "round1", tau=-1.0)


def toy_recipe(bert3: Path, out: Path, flops_weight: object) -> object:
    """A CAME recipe on the toy task: one shared layer, 2 negatives, FLOPS as given."""
    return from_dict({
        "output_dir": str(out),
        "model": {"type": "came", "backbone": str(bert3), "args": {"shared_layers": 1, "dim": 16}},
        "data": {"collection": "toy", "num_negatives": 2, "query_max_length": 8,
                 "passage_max_length": 8},
        "training": {"learning_rate": 1e-3, "batch_size": 4, "temperature": 0.5,
                     "flops_weight": flops_weight, "device": "cpu"},
    }, "toy.yaml")


@pytest.mark.parametrize("stage_step", [0, 9])  # standardized, then specialized (ratio 0.2 of 10)
def test_one_training_step_moves_every_stack(bert3, tmp_path, stage_step, toy_data) -> None:
    config = toy_recipe(bert3, tmp_path / "run", 0.01)
    model = make(bert3, **config.model.args).train()
    trainer = Trainer(model, config, toy_data(2), progress=False)
    model.on_train_step(stage_step, 10)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)  # moves
    #   a parameter only if it has a gradient
    loss, parts = trainer.loss(trainer.collator(trainer.data.epoch_batches(0, 4)[0]))
    loss.backward()
    optimizer.step()
    assert parts["flops_query"] > 0 and parts["flops_passage"] > 0  # the trainer's FLOPS term
    weights = model.last_weights
    # the training log gets each expert's loss and weight
    assert {k: parts[f"weight_{k}"] for k in weights} == weights
    assert all(parts[f"loss_{k}"] > 0 for k in weights)
    if stage_step == 9:
        assert model.stage == "specialized" and sum(weights.values()) == pytest.approx(1.0)
    else:
        assert model.stage == "standardized" and set(weights.values()) == {1.0}
    for name, param in model.named_parameters():
        assert not torch.equal(param.detach(), before[name]), name  # every stack, head, layer


@pytest.mark.parametrize("name,args", [
    ("came-minilm", {"stages": "competitive", "shared_layers": 4}),
    ("came-standardized-minilm", {"stages": "standardized", "shared_layers": 4}),
    ("came-specialized-minilm", {"stages": "specialized", "shared_layers": 4}),
    ("came-noshared-minilm", {"stages": "competitive", "shared_layers": 0}),
])
def test_the_recipes_load_and_their_learning_rates_match_the_model(name, args, bert3) -> None:
    config = load_config(ENCODERS / f"{name}.yaml")
    assert config.model.type == "came" and config.model.backbone == "all-minilm-l6-v2"
    assert {k: config.model.args[k] for k in args} == args
    assert config.model.args["tau"] == 0.5 and config.data.collection == "scifact"
    assert config.training.flops_weight.query > 0
    tiny_args = {**config.model.args, "shared_layers": min(args["shared_layers"], 1)}
    model = make(bert3, **tiny_args)
    groups = {g["name"]: g for g in parameter_groups(model, config.training)}
    heads = [p for name, g in groups.items() if name.startswith("heads.") for p in g["params"]]
    assert heads and all(p is not model.backbone.get_input_embeddings().weight for p in heads)


@pytest.mark.parametrize("stage_step", [0, 9])  # standardized, then specialized (ratio 0.2 of 10)
def test_flops_is_weighted_like_the_lexical_experts_loss(bert3, tmp_path, stage_step,
                                                         toy_data) -> None:
    """Eq. 10 weights the lexical expert's whole loss, FLOPS included, by w_lex: the trainer's
    FLOPS term is lambda * w_lex * FLOPS in the specialized stage, lambda * FLOPS before."""
    config = toy_recipe(bert3, tmp_path / "run", {"query": 0.3, "passage": 0.2})
    model = make(bert3, **config.model.args).eval()  # no dropout: the two passes agree
    trainer = Trainer(model, config, toy_data(2), progress=False)
    model.on_train_step(stage_step, 10)
    batch = trainer.collator(trainer.data.epoch_batches(0, 4)[0])
    with torch.no_grad():
        loss, parts = trainer.loss(batch)
        q = model(**batch.queries, side=Side.QUERY)
        p = model(**batch.passages, side=Side.PASSAGE)
        ranking = model.compute_loss(q, p, batch.positive_index, config.training.temperature)
    w_lex = model.last_weights["lexical"]
    assert (w_lex < 0.9) if stage_step == 9 else (w_lex == 1.0)
    expected = ranking + w_lex * (0.3 * parts["flops_query"] + 0.2 * parts["flops_passage"])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
