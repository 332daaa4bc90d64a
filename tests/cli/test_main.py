"""The ``pyserini-moe`` console script runs the same command modules as ``python -m``."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import pyserini_moe
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


def _entry_modules() -> list[str]:
    """Every ``python -m`` module of the package: its ``__main__`` runs a command."""
    root = Path(pyserini_moe.__file__).parent
    return sorted(".".join(("pyserini_moe", *path.relative_to(root).with_suffix("").parts))
                  for path in root.rglob("*.py") if "run_main(" in path.read_text()
                  and path.parent.name != "cli")


@pytest.mark.parametrize("module", _entry_modules())
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")
def test_importing_a_command_module_as_a_spawned_child_runs_nothing(module: str,
                                                                   monkeypatch) -> None:
    """A tokenizer worker process (spawn) imports the parent's main module again, as
    ``__mp_main__``: a command run at import would run once more in every worker (the bench
    did: its two-worker pipeline ran at 0.4-0.6x one worker, each worker re-running the bench)."""
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    runpy.run_module(module, run_name="__mp_main__")  # no SystemExit: nothing ran


def test_the_entry_modules_are_found() -> None:
    assert {"pyserini_moe.lab.bench.__main__", "pyserini_moe.index.__main__",
            "pyserini_moe.fuse"} <= set(_entry_modules())
