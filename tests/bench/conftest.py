"""The bench's end-to-end tests run its command on the tiny three-layer model and corpus."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyserini_moe.bench.run import main


@pytest.fixture
def tiny_bench(bert3: Path, tiny_corpus: Path, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Runs ``python -m pyserini_moe.bench`` with ``args`` on the tiny model (three layers: TASER's
    default block pattern needs them) and corpus, at sizes that keep a run to minutes; returns
    its bench.json."""

    def run(*args: str) -> dict[str, Any]:
        out = tmp_path / "out"
        assert main(["--backbone", str(bert3), "--corpus", str(tiny_corpus), "--topics",
                     f"{tiny_corpus}:test", "--docs", "8", "--max-length", "16",
                     "--batch-size", "4", "--repeats", "1", "--latency-queries", "3",
                     *args, "--output-dir", str(out)]) == 0
        return json.loads((out / "bench.json").read_text())

    return run
