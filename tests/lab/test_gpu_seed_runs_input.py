"""The GPU plans of ``lab/gpu_seed_runs.py``: a plan's names, and ``snapshots=yes`` beside a
``--set`` of the same setting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
import gpu_seed_runs as tool  # noqa: E402

SIAMESE = "encoders/siamese-minilm.yaml"


def test_a_plan_name_keeps_its_model_however_spelt(tmp_path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"a 42 {SIAMESE} --set training.epochs=2 --set training.batch_size=4\n"
                    f"a 43 ./{SIAMESE} --set training.batch_size=4 --set training.epochs=2\n")
    assert [j["name"] for j in tool.parse_plan(plan, check_sets=False)] == ["a-s42", "a-s43"]


def test_snapshots_yes_with_a_keep_snapshots_set_is_refused(tmp_path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text(f"a 42 {SIAMESE} --set training.keep_snapshots=false | snapshots=yes\n")
    with pytest.raises(SystemExit, match="snapshots=yes sets training.keep_snapshots itself"):
        tool.parse_plan(plan, check_sets=False)
