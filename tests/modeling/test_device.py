"""Device selection: CUDA whenever it is present and nothing else is asked for, one error line
otherwise. Runs on CPU machines by pretending CUDA is there (nothing is moved to it)."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.device import check_device, default_device


@pytest.fixture
def cuda_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.usefixtures("cuda_present")
def test_cuda_is_picked_when_present() -> None:
    assert default_device() == torch.device("cuda")
    assert check_device(None) == torch.device("cuda")
    assert check_device("auto") == torch.device("cuda")
    assert check_device("cuda:1") == torch.device("cuda", 1)
    assert check_device("cpu") == torch.device("cpu")  # asked for: kept


def test_cpu_without_cuda_and_bad_names(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_device(None) == torch.device("cpu")
    with pytest.raises(UserError, match="CUDA is not available"):
        check_device("cuda")
    with pytest.raises(UserError, match="not a device name"):
        check_device("gpu0")
    with pytest.raises(UserError, match="only cpu and cuda"):
        check_device("meta")


def test_bench_refuses_cuda_it_does_not_have(monkeypatch, tmp_path) -> None:
    from pyserini_moe.cli.bench import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="CUDA is not available"):
        main(["--device", "cuda", "--output-dir", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()  # refused before any work


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_model_loads_on_cuda_by_default(tiny_bert) -> None:
    from pyserini_moe.modeling.auto import load_encoder

    assert load_encoder(str(tiny_bert)).device.type == "cuda"
