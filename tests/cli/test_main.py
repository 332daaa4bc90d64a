"""The ``pyserini-moe`` console script runs the same command modules as ``python -m``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyserini_moe.cli import main as console


def run(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from pyserini_moe.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


def test_help_lists_every_command() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert all(f"  {name} " in done.stdout for name in console.COMMANDS)


@pytest.mark.parametrize("name", list(console.COMMANDS))
def test_each_command_module_has_a_main(name: str) -> None:
    import importlib

    module = importlib.import_module(f"pyserini_moe.cli.{console.COMMANDS[name][0]}")
    assert callable(module.main)


def test_a_command_gets_its_arguments_and_exit_code(tmp_path) -> None:
    done = run("fuse", "--runs", str(tmp_path / "a.trec"), str(tmp_path / "b.trec"),
               "--method", "rrf", "--output", str(tmp_path / "out.trec"))
    assert done.returncode == 2 and done.stderr.startswith("error: ")
    assert not (tmp_path / "out.trec").exists()


def test_an_unknown_command_is_refused() -> None:
    done = run("serach")
    assert done.returncode == 2 and "unknown command 'serach'" in done.stderr
