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


def test_an_interrupted_command_leaves_no_semaphore_behind(tmp_path) -> None:
    """An interrupted command ends with ``os._exit`` (no finaliser runs): the named semaphores
    of a tokenizer pool (its queues, its start barrier) were then reported by the resource
    tracker as leaked, 9 lines after "interrupted". They are unlinked before the exit."""
    script = tmp_path / "command.py"
    script.write_text(
        "import multiprocessing, sys\n"
        "from pyserini_moe.cli import run_main\n"
        "def main(argv):\n"
        "    context = multiprocessing.get_context('spawn')\n"
        "    held = context.Barrier(2), context.Lock()  # what a tokenizer pool holds\n"
        "    raise KeyboardInterrupt\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(run_main(main))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 130
    assert done.stderr.strip().splitlines() == ["interrupted"], done.stderr
