"""``make demo`` (the README's first command) names only flags its commands take, and runs the
main job: BM25, the zero-shot backbone, a trained MoE retriever, a hybrid, an evaluation. The
demo itself takes ~11 minutes (README), so this checks its command lines, not its numbers."""

from __future__ import annotations

import importlib
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def demo_commands(work: Path) -> list[list[str]]:
    """The ``python -m pyserini_moe.<command>`` lines ``make -n demo`` would run."""
    out = subprocess.run(["make", "-n", "demo", f"WORK={work}", "STAMP=Makefile"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    lines = out.replace("\\\n", " ").splitlines()
    commands = [shlex.split(line)[2:] for line in lines if " -m pyserini_moe." in line]
    return [c for c in commands if c[0] != "pyserini_moe._java"]  # setup's, when it would run


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_every_demo_command_parses(tmp_path) -> None:
    commands = demo_commands(tmp_path)
    modules = [c[0] for c in commands]
    assert modules.count("pyserini_moe.index") == 3 and "pyserini_moe.train" in modules
    assert modules[-1] == "pyserini_moe.eval"
    for module, *args in commands:
        parser = importlib.import_module(f"pyserini_moe.cli.{module.split('.')[1]}")
        parser.build_parser().parse_args(args)  # SystemExit on an unknown or malformed flag
    train = next(c for c in commands if c[0] == "pyserini_moe.train")
    config = ROOT / train[train.index("--config") + 1]
    assert "type: taser" in config.read_text()  # an MoE retriever, trained in the demo
    hybrid = [c for c in commands if "--bm25-index" in c]
    assert len(hybrid) == 1
