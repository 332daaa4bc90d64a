"""The bench's end-to-end tests run its command on the tiny three-layer model and corpus."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyserini_moe.cli.bench import FLAG_SECTIONS, SECTIONS, main


@pytest.fixture
def tiny_bench(bert3: Path, tiny_corpus: Path, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Runs ``python -m pyserini_moe.lab.bench`` with ``args`` on the tiny model (three layers: TASER's
    default block pattern needs them) and corpus, at sizes that keep a run to minutes; returns
    its bench.json."""

    small = {"topics": f"{tiny_corpus}:test", "docs": "8", "batch_size": "4", "repeats": "1",
             "latency_queries": "3"}

    def run(*args: str) -> dict[str, Any]:
        # the small sizes of the sections that run only: bench refuses a setting none reads
        given = list(args)
        sections = set(SECTIONS)
        if "--sections" in given:
            at = given.index("--sections") + 1
            sections = set(given[at:at + next((i for i, a in enumerate(given[at:])
                                                if a.startswith("--")), len(given) - at)])
        sizes = [item for dest, value in small.items() if sections & set(FLAG_SECTIONS[dest])
                 for item in (f"--{dest.replace('_', '-')}", value)]
        out = tmp_path / "out"
        assert main(["--backbone", str(bert3), "--corpus", str(tiny_corpus), "--max-length",
                     "16", *sizes, *args, "--output-dir", str(out)]) == 0
        return json.loads((out / "bench.json").read_text())

    return run
