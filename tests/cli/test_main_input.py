"""The ``pyserini-moe`` entry point (:mod:`pyserini_moe.cli.main`, ``python -m
pyserini_moe``): an unknown command names the nearest one, and the package door stays a
thin door to the console script."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_an_unknown_command_names_the_nearest_one() -> None:
    """``python -m pyserini_moe encode_queries``: the command is spelt encode-queries."""
    done = subprocess.run([sys.executable, "-m", "pyserini_moe", "encode_queries"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "unknown command 'encode_queries' (did you mean 'encode-queries'?)" in done.stderr


def test_python_m_pyserini_moe_is_the_console_script() -> None:
    done = subprocess.run([sys.executable, "-m", "pyserini_moe", "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: pyserini-moe COMMAND")
    assert "encode-queries" in done.stdout
    bare = subprocess.run([sys.executable, "-m", "pyserini_moe"], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: pyserini-moe COMMAND")


def test_the_package_door_is_thin() -> None:
    """Like every ``python -m`` door: it imports its command and nothing else."""
    door = Path(__file__).resolve().parents[2] / "pyserini_moe" / "__main__.py"
    imported = {node.module for node in ast.walk(ast.parse(door.read_text()))
                if isinstance(node, ast.ImportFrom)}
    assert imported == {"pyserini_moe.cli.main"}
