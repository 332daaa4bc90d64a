"""The ``sizes`` command (:mod:`pyserini_moe.cli.sizes`) on backbones it cannot read, tiny
backbones, trained models and ONNX exports."""

from __future__ import annotations

import json
import shutil

import pytest

from pyserini_moe.cli import run_main, sizes
from tests.helpers import refused


def test_sizes_of_bert_base_offline_points_at_the_flag(monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run_main(sizes.main, ["--backbone", "bert-base-uncased-not-cached"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        "(for bert-base-uncased's shape offline: --bert-base)")


# --- sizes of a tiny backbone ---------------------------------------------------------------------


def test_sizes_of_a_tiny_backbone_tell_the_models_apart(tiny_bert, capsys) -> None:
    from pyserini_moe.cli import sizes

    assert run_main(sizes.main, ["--backbone", str(tiny_bert)]) == 0
    rows = dict(line.strip("| ").split(" | ") for line in capsys.readouterr().out.splitlines()[2:]
                if "cannot be built" not in line)
    assert "0.0M" not in rows.values() and "0.1M" not in rows.values()
    assert rows["siamese"] != rows["colbert"] and rows["siamese"].endswith("M")
    assert sizes.size(42_123) == "0.042123M" and sizes.size(109_482_240) == "109.5M"


def test_sizes_of_a_trained_model_gives_its_own_count_first(tiny_bert, tmp_path, capsys) -> None:
    from pyserini_moe.modeling import SiameseBiEncoder

    folder = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(tmp_path / "m")
    assert run_main(sizes.main, ["--backbone", str(folder)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{folder} is a saved siamese model: ") and "parameters" in first


def test_sizes_of_an_onnx_export_names_its_source(tmp_path, capsys, error_line) -> None:
    export = tmp_path / "onnx"
    export.mkdir()
    (export / "pyserini_moe_onnx.json").write_text('{"source": "/models/taser"}')
    assert error_line(sizes.main, ["--backbone", str(export)], capsys) == (
        f"error: {export} is an ONNX export of /models/taser: give --backbone /models/taser, "
        "the model it was exported from")


def test_sizes_reports_every_architecture_a_small_backbone_can_hold(tiny_bert, capsys) -> None:
    """One architecture needing more layers (TASER's T=2 on 2 layers) refused the table."""
    from pyserini_moe.cli import run_main, sizes

    assert run_main(sizes.main, ["--backbone", str(tiny_bert)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert any(r.startswith("| siamese | ") and r.endswith("M |") for r in rows)
    assert "| taser det-r (T=2, I=2) | cannot be built: every=2 leaves no specialised block in 2 " \
           "layers |" in rows


@pytest.mark.parametrize(("config", "said"), [
    ({"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 2, "d_ff": 128,
      "vocab_size": 100}, "intermediate_size is None"),  # was an AttributeError traceback
    ({"model_type": "bert", "num_hidden_layers": -3}, "num_hidden_layers is -3"),  # was 0.0M
])
def test_sizes_refuses_a_config_that_is_no_bert_style_encoder(tmp_path, capsys, config,
                                                              said) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    refused(sizes.main, ["--backbone", str(tmp_path)],
            f"{tmp_path}: its config's {said}, not a count >= 1", capsys)


def test_a_config_no_model_can_be_built_from(tmp_path, tiny_bert, capsys) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_bert, bad)
    config = json.loads((bad / "config.json").read_text())
    config["hidden_size"] = -5
    (bad / "config.json").write_text(json.dumps(config))
    refused(sizes.main, ["--backbone", str(bad)], "its config's hidden_size is -5, not a count "
            ">= 1", capsys)
    assert "| model" not in capsys.readouterr().out
