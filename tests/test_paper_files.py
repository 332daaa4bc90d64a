"""Paper-scale files cross-checked where a mismatch between two of their steps would give wrong
numbers on a GPU cluster without any error: pre-training vs fine-tuning heads, the pre-training
batch, the Faiss search settings of token indexes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from pyserini_moe.lab.regress import load_regression
from pyserini_moe.train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PAPER_FILES = sorted((ROOT / "regressions").glob("*-paper.yaml"))


def steps(path: Path) -> list[list[str]]:
    """Every step of a regression file as argv (placeholders left as they are)."""
    reg = load_regression(path)
    return [shlex.split(s) for s in reg.steps + [s for c in reg.conditions for s in c.steps]]


def flag(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def settings(argv: list[str]) -> dict[str, str]:
    return dict(s.split("=", 1) for s, prev in zip(argv[1:], argv) if prev == "--set")


@pytest.mark.parametrize("path", PAPER_FILES, ids=lambda p: p.name)
def test_token_index_searches_set_nprobe(path: Path) -> None:
    """Faiss's default nprobe = 1 on an IVF token index would cut the local expert's recall."""
    for argv in steps(path):
        if "pyserini_moe.search" in argv and any(a.endswith(".multivector") for a in argv):
            assert re.fullmatch(r"nprobe=\d+", flag(argv, "--faiss-params", "") or ""), argv


def test_cotmote_fine_tuning_uses_the_head_pre_training_trained() -> None:
    path = ROOT / "regressions" / "cotmote-paper.yaml"
    pretrained = {}  # output folder -> its sparse head
    pairs = 0
    for argv in steps(path):
        if "pyserini_moe.pretrain" in argv:
            pretrained[flag(argv, "--output-dir") + "/model"] = flag(argv, "--sparse-head",
                                                                      "plain")
            assert int(flag(argv, "--batch-size")) * int(flag(argv, "--grad-accumulation", "1")) \
                == 2048, "CoT-MAE pre-training batch (section 4.1)"
            assert flag(argv, "--learning-rate") == "3e-4" and flag(argv, "--max-steps") == "80000"
        elif "pyserini_moe.train" in argv:
            backbone = settings(argv).get("model.backbone")
            if backbone in pretrained:
                recipe = load_config(flag(argv, "--config").replace("{root}", str(ROOT)))
                assert recipe.model.args.get("sparse_head", "plain") == pretrained[backbone], argv
                pairs += 1
    assert pairs >= 4


def test_dpr_format_recipes_train_on_the_gold_positive() -> None:
    """DPR and TASER train on each question's first (gold) positive, one example a question."""
    for name in ("came-nq-bert-base", "taser-detr-bert-base"):
        assert load_config(ROOT / "encoders" / f"{name}.yaml").data.positives == "first", name


# BEIR collections whose queries are corpus documents: each query retrieves itself first unless
# the search drops it (BEIR's ignore_identical_ids, Pyserini's 2CR --remove-query).
SELF_RETRIEVING = ("arguana", "quora")


@pytest.mark.parametrize("path", sorted((ROOT / "regressions").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_searches_of_self_retrieving_collections_remove_the_query(path: Path) -> None:
    for argv in steps(path):
        topics = flag(argv, "--topics") or ""
        if "pyserini_moe.search" in argv and any(name in topics for name in SELF_RETRIEVING):
            assert "--remove-query" in argv, argv
