"""No code from a model folder runs: a folder whose configuration names code of its own
(``auto_map``) is refused in one line, before transformers could prompt for it or run it,
whether it is a saved model, a backbone used zero-shot or its tokenizer that names the code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling import TaserEncoder, load_model
from pyserini_moe.modeling.auto import load_encoder

AUTO_MAP = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}


def _with_code(folder: Path, file: str = "config.json") -> Path:
    config = json.loads((folder / file).read_text())
    (folder / file).write_text(json.dumps({**config, "auto_map": AUTO_MAP}))
    (folder / "evil.py").write_text("open('RAN', 'w').write('the folder ran its code')\n")
    return folder


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_a_saved_model_naming_custom_code_is_refused(tiny_bert, tmp_path, file) -> None:
    torch.manual_seed(0)
    folder = _with_code(TaserEncoder.from_backbone(tiny_bert, every=1, device="cpu")
                        .save(tmp_path / "m"), file)
    with pytest.raises(UserError, match=rf"{file}: names code of its own .*custom code refused"):
        load_model(folder, device="cpu")


def test_a_backbone_naming_custom_code_is_refused(tiny_bert, tmp_path) -> None:
    import shutil

    folder = _with_code(Path(shutil.copytree(tiny_bert, tmp_path / "backbone")))
    with pytest.raises(UserError, match="custom code refused"):
        load_encoder(str(folder), device="cpu")


def test_answering_yes_runs_nothing(tiny_bert, tiny_corpus, tmp_path) -> None:
    """`yes | python -m pyserini_moe.index ... --encoder FOLDER`: no prompt to answer, the folder's
    code does not run, one error line."""
    import shutil

    folder = _with_code(Path(shutil.copytree(tiny_bert, tmp_path / "backbone")))
    done = subprocess.run(
        [sys.executable, "-m", "pyserini_moe.index", "--retriever", "dense", "--corpus",
         str(tiny_corpus), "--encoder", str(folder), "--index", str(tmp_path / "idx"),
         "--device", "cpu", "--quiet"],
        input="y\n" * 20, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "custom code refused" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "RAN").exists()
