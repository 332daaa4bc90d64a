"""``--help`` states each default once, and only where it says something; runs are tagged with
what made them."""

from __future__ import annotations

import importlib
import re

import pytest

from pyserini_moe.cli.main import COMMANDS
from pyserini_moe.cli.search import run_tag
from pyserini_moe.search.dispatch import SearchSettings


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_has_no_empty_or_repeated_default(name, capsys) -> None:
    module = importlib.import_module(f"pyserini_moe.cli.{COMMANDS[name][0]}")
    with pytest.raises(SystemExit):
        module.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: False)" not in text
    assert not re.search(r"\(default:[^()]*\) \(default:", text)


@pytest.mark.parametrize("settings,tag", [
    (SearchSettings("dense", "i"), "dense"),
    (SearchSettings("impact", "i", bm25_index="b"), "impact+bm25"),
    (SearchSettings("fused", ["a", "b"], fusion="exact"), "fused-exact"),
    (SearchSettings("fused", ["a", "b"], bm25_index="b"), "fused-came_sum+bm25"),
])
def test_runs_are_tagged_with_what_made_them(settings, tag) -> None:
    assert run_tag(settings) == tag


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_device_flag_is_the_one_definition(name, capsys) -> None:
    """``--device`` takes the same values with the same default wherever a command has it
    (cli.args.add_device_arg; bench keeps its CPU default)."""
    module = importlib.import_module(f"pyserini_moe.cli.{COMMANDS[name][0]}")
    with pytest.raises(SystemExit):
        module.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    if "--device DEVICE " in text:
        assert "--device DEVICE auto, cpu, cuda, cuda:1 ... (default: CUDA when present)" in text
