"""Sixth hostile pass (work/hostile6/report.md): flags and inputs of train, regress and sizes that
were dropped, blamed on the wrong thing or ended in a traceback (H6-15, 72, 73, 89, 90, 92)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyserini_moe.cli import regress, run_main, sizes, train

RECIPE = Path(__file__).resolve().parents[2] / "encoders" / "siamese-minilm.yaml"


def _refused(main, argv: list[str], message: str, capsys) -> None:
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err


def test_train_refuses_resume_with_init_only(tmp_path, capsys) -> None:  # H6-72
    _refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "o"),
                          "--resume", "--init-only"], "--resume and --init-only exclude", capsys)
    assert not (tmp_path / "o").exists()


def test_train_names_an_output_dir_that_is_a_file(tmp_path, capsys) -> None:  # H6-92
    (tmp_path / "f").write_text("mine")
    _refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "f")],
             f"--output-dir {tmp_path / 'f'} is a file: name a folder", capsys)
    assert (tmp_path / "f").read_text() == "mine"


def test_train_refuses_a_typo_sized_epoch_count_at_once(tmp_path, capsys) -> None:  # H6-73
    _refused(train.main, ["--config", str(RECIPE), "--output-dir", str(tmp_path / "o"),
                          "--epochs", str(10**20)], "must be <= 100,000", capsys)
    assert not (tmp_path / "o").exists()


def test_regress_names_a_folder_given_as_a_file(tmp_path, capsys) -> None:  # H6-15
    _refused(regress.main, [str(tmp_path), "--dry-run"],
             f"{tmp_path} is a folder: name its regression files", capsys)


@pytest.mark.parametrize(("config", "said"), [
    ({"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 2, "d_ff": 128,
      "vocab_size": 100}, "intermediate_size is None"),  # H6-90: an AttributeError traceback
    ({"model_type": "bert", "num_hidden_layers": -3}, "num_hidden_layers is -3"),  # H6-89: 0.0M
])
def test_sizes_refuses_a_config_that_is_no_bert_style_encoder(tmp_path, capsys, config,
                                                              said) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    _refused(sizes.main, ["--backbone", str(tmp_path)],
             f"{tmp_path}: its config's {said}, not a count >= 1", capsys)


def test_a_hybrid_too_shallow_for_its_hits_says_so() -> None:  # H6-60: 8-9 hits, no word
    from pyserini_moe.search.dispatch import short_hybrid_notice

    assert short_hybrid_notice(5, 50) == ("warning: the hybrid fuses BM25's and the model's top 5 "
                                          "(--candidates): at most 10 hits a query, not --hits 50")
    assert short_hybrid_notice(100, 200) is None  # appendix D's K' = 100 fills 200 at most
    assert short_hybrid_notice(1000, 1000) is None
