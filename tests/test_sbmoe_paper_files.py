"""SB-MoE's paper-scale files: the reproduction recipes follow the paper and, where it is silent,
the authors' public code (the published mixture, 512 tokens, one positive drawn per query each
epoch), and regressions/sbmoe-paper.yaml runs every random-gate / TOP-1 / ALL row both on the
published mixture and on the repaired (residual) one, each step fed by an earlier step.

Nothing here trains or downloads: the recipes are validated, the regression's commands parsed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pyserini_moe.lab.regress import load_regression
from pyserini_moe.modeling import SbMoeEncoder
from pyserini_moe.train.config import TrainConfig, load_config
from pyserini_moe.train.trainer import parameter_groups

ROOT = Path(__file__).resolve().parents[1]
ENCODERS = ROOT / "encoders"
REGRESSION = ROOT / "regressions" / "sbmoe-paper.yaml"
# backbone -> (Hugging Face checkpoint, epochs, temperature): sb-moe.txt section IV-B and the
# public code's conf/model/*.yaml
BACKBONES = {
    "tinybert": ("huawei-noah/TinyBERT_General_4L_312D", 30, 1.0),
    "bert-small": ("google/bert_uncased_L-4_H-512_A-8", 20, 1.0),
    "bert-base": ("google-bert/bert-base-uncased", 20, 1.0),
    "contriever": ("facebook/contriever", 20, 0.05),
}
PUBLISHED_VARIANTS = ("random-gate", "sbmoe-top1", "sbmoe-all")
RESIDUAL_SETTINGS = ("model.args.mixture=residual", "model.args.balance_weight=0.01")


def _check_shared_settings(config: TrainConfig, backbone: str) -> None:
    """What the SB-MoE recipe and its fine-tuned baseline share ("the same training data and
    hyperparameters", section IV-A)."""
    checkpoint, epochs, temperature = BACKBONES[backbone]
    assert config.model.backbone == checkpoint
    assert config.model.args["pooling"] == "mean" and config.model.args["normalize"] is False
    data = config.data
    assert data.collection == "msmarco" and data.split == "train"
    assert data.query_max_length == data.passage_max_length == 512  # the public code's max_tokens
    assert data.positives == "sample"  # one positive drawn per query each epoch
    assert data.num_negatives == 0  # in-batch negatives only
    assert data.validation_fraction == 0.05 and data.seed == 42
    training = config.training
    assert training.batch_size == 64 and training.grad_accumulation == 1
    assert training.epochs == epochs and training.temperature == temperature
    assert training.seed == 42 and training.warmup_ratio == 0.0 and training.max_grad_norm is None


@pytest.mark.parametrize("backbone", BACKBONES)
def test_sbmoe_recipe_runs_the_published_model(backbone: str, tiny_bert: Path) -> None:
    config = load_config(ENCODERS / f"sbmoe-{backbone}.yaml")
    assert config.model.type == "sbmoe"
    _check_shared_settings(config, backbone)
    assert config.model.args == {"n_experts": 6, "pooling": "mean", "normalize": False,
                                 "inference": "top1", "gate": "learned", "mixture": "published",
                                 "balance_weight": 0.0}
    assert config.training.learning_rate == 1e-4  # experts and gate
    assert config.training.group_learning_rates == {"backbone": 1e-6}  # the underlying DRM
    # the backbone's key names exactly the backbone's parameters (a tiny BERT stands in)
    model = SbMoeEncoder.from_backbone(tiny_bert, device="cpu", **config.model.args)
    rates = {id(p): group["lr"] for group in parameter_groups(model, config.training)
             for p in group["params"]}
    for name, param in model.named_parameters():
        if param.requires_grad:
            assert rates[id(param)] == (1e-6 if name.startswith("backbone.") else 1e-4), name
        else:  # the published gate's noise projection never reaches the optimiser
            assert name.startswith("gate.noise.") and id(param) not in rates
    # the residual twins of regressions/sbmoe-paper.yaml are the same recipe with two settings
    residual = config.with_settings(list(RESIDUAL_SETTINGS))
    assert residual.model.args["mixture"] == "residual"
    assert residual.model.args["balance_weight"] == 0.01
    assert residual.with_settings(["model.args.gate=random"]).model.args["gate"] == "random"


@pytest.mark.parametrize("backbone", BACKBONES)
def test_fine_tuned_baseline_shares_the_sbmoe_recipes_settings(backbone: str) -> None:
    config = load_config(ENCODERS / f"sbmoe-ft-{backbone}.yaml")
    assert config.model.type == "siamese"
    _check_shared_settings(config, backbone)
    assert config.training.learning_rate == 1e-6 and not config.training.group_learning_rates
    sbmoe = load_config(ENCODERS / f"sbmoe-{backbone}.yaml")
    assert config.data == sbmoe.data
    assert config.training.group_learning_rates == {}
    assert sbmoe.training.group_learning_rates["backbone"] == config.training.learning_rate


@pytest.mark.parametrize("name", [f"sbmoe-{b}" for b in BACKBONES]
                         + [f"sbmoe-ft-{b}" for b in BACKBONES])
def test_recipe_comments_do_not_repeat_the_old_wrong_facts(name: str) -> None:
    """The public code's max_tokenizer_length (256) and latent_size (192) are never used."""
    text = (ENCODERS / f"{name}.yaml").read_text(encoding="utf-8")
    assert "256 tokens" not in text and "max_tokenizer_length 256 for" not in text
    assert "192" not in text
    assert "no inference flag" not in text  # --encoder-option inference=all exists


# -- regressions/sbmoe-paper.yaml --------------------------------------------------------------

def _argv(step: str) -> list[str]:
    return shlex.split(step)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _settings(argv: list[str]) -> list[str]:
    return [value for value, prev in zip(argv[1:], argv) if prev == "--set"]


def _recipe(argv: list[str]) -> TrainConfig:
    """The recipe a train step runs: its --config with its --set settings and --epochs."""
    config = load_config(_flag(argv, "--config").replace("{root}", str(ROOT)))
    config = config.with_settings(_settings(argv))
    epochs = _flag(argv, "--epochs")
    return config.with_overrides(epochs=int(epochs)) if epochs else config


def _variant(name: str) -> str:
    return name.split(".")[1]


def test_regression_file_loads_with_published_and_residual_rows() -> None:
    reg = load_regression(REGRESSION)
    names = [c.name for c in reg.conditions]
    published = [n for n in names if _variant(n) in PUBLISHED_VARIANTS]
    residual = [n for n in names if _variant(n).endswith("-residual")]
    fine_tuned = [n for n in names if _variant(n) == "fine-tuned"]
    assert len(published) == len(residual) == 4 * (7 + 20 + 20)  # random gate: table I only
    assert len(fine_tuned) == 4 * 20 and len(names) == len(published) * 2 + len(fine_tuned)
    by_name = {c.name: c for c in reg.conditions}
    for name in published:  # each twin right after its published row, with the paper's numbers
        backbone, variant, rest = name.split(".", 2)
        twin = f"{backbone}.{variant}-residual.{rest}"
        assert names[names.index(name) + 1] == twin
        a, b = by_name[name], by_name[twin]
        assert (a.qrels, a.checks) == (b.qrels, b.checks), twin
        assert "residual" in b.source and "residual" not in a.source


def test_each_train_step_runs_the_mixture_its_row_names() -> None:
    reg = load_regression(REGRESSION)
    trained = {"published": 0, "residual": 0, "fine-tuned": 0}
    for condition in reg.conditions:
        variant = _variant(condition.name)
        for argv in map(_argv, condition.steps):
            if "pyserini_moe.train" not in argv:
                continue
            config = _recipe(argv)
            backbone = condition.name.split(".")[0]
            assert config.model.backbone == BACKBONES[backbone][0], condition.name
            assert config.data.positives == "sample" and config.data.query_max_length == 512
            if variant == "fine-tuned":
                assert config.model.type == "siamese"
                trained["fine-tuned"] += 1
                continue
            form = "residual" if variant.endswith("-residual") else "published"
            assert config.model.args["mixture"] == form, condition.name
            assert config.model.args["balance_weight"] == (0.01 if form == "residual" else 0.0)
            gate = "random" if variant.startswith("random-gate") else "learned"
            assert config.model.args["gate"] == gate, condition.name
            cs = ".cs." in condition.name
            assert config.training.epochs == (30 if backbone == "tinybert" else 10 if cs else 20)
            trained[form] += 1
    # per backbone: 5 training sets x (fine-tuned | random gate + SB-MoE) for each form
    assert trained == {"published": 40, "residual": 40, "fine-tuned": 20}


def test_every_step_reads_what_an_earlier_step_wrote() -> None:
    """Models, indexes and runs: written once, by a step that comes before any reader; 512 tokens
    for every index and every search."""
    reg = load_regression(REGRESSION)
    models: set[str] = set()
    indexes: set[str] = set()
    runs: set[str] = set()
    assert not reg.steps
    for condition in reg.conditions:
        for argv in map(_argv, condition.steps):
            if "pyserini_moe.train" in argv:
                out = _flag(argv, "--output-dir")
                assert out not in models, out
                models.add(out)
            elif "pyserini_moe.index" in argv:
                assert _flag(argv, "--encoder").removesuffix("/best") in models, argv
                assert _flag(argv, "--max-length") == "512", argv
                index = _flag(argv, "--index")
                assert index not in indexes, index
                indexes.add(index)
                options = [v for v, prev in zip(argv[1:], argv) if prev == "--encoder-option"]
                assert options == (["inference=all"] if ".sbmoe-all" in condition.name else [])
                residual = "-residual." in condition.name
                assert ("residual" in _flag(argv, "--encoder")) == residual, argv
            elif "pyserini_moe.search" in argv:
                assert _flag(argv, "--index") in indexes, argv
                # the index records the recipe's 512 query tokens: search needs no flag
                assert "--query-max-length" not in argv, argv
                run = _flag(argv, "--output")
                assert run == condition.run and run not in runs, run
                runs.add(run)
            else:
                pytest.fail(f"unexpected step {argv}")
    assert len(runs) == len(reg.conditions)
