"""What the hostile tests share: a workspace of a saved model, its dense index, a run, qrels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.modeling import SiameseBiEncoder


@pytest.fixture(scope="session")
def model_index_run(tiny_bert: Path, tiny_corpus: Path) -> Callable[[Path], dict[str, Path]]:
    """Builds, in a folder, the workspace below (each module's own ``ws`` adds its files)."""
    return lambda root: _model_index_run(root, tiny_bert, tiny_corpus)


def _model_index_run(root: Path, tiny_bert: Path, tiny_corpus: Path) -> dict[str, Path]:
    """A tiny Siamese model saved in ``root``, its dense index over the tiny corpus, a two-query
    run and its qrels (``run.trec``, ``qrels.txt``)."""
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    index = root / "dense"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(tiny_corpus), "--index",
                           str(index), "--encoder", str(model), "--device", "cpu",
                           "--max-length", "64", "--quiet"]) == 0
    (root / "run.trec").write_text("q0 Q0 d0 1 3.0 t\nq1 Q0 d1 1 2.0 t\n")
    (root / "qrels.txt").write_text("q0 0 d0 1\nq1 0 d1 1\n")
    return {"root": root, "model": model, "index": index, "corpus": tiny_corpus}


@pytest.fixture
def smoked(monkeypatch) -> list:
    """The regressions ``regress --smoke`` would run, recorded instead of run."""
    from pyserini_moe.lab import smoke as smoke_module

    calls: list = []
    monkeypatch.setattr(smoke_module, "smoke", lambda regs, work: calls.append(regs) or 0)
    return calls


@pytest.fixture
def error_line() -> Callable[..., str]:
    """``error_line(main, argv, capsys)``: the one error line a refused command prints (exit
    2)."""
    from pyserini_moe.cli import run_main

    def line(main: Callable[[list[str]], int], argv: list[str],
             capsys: pytest.CaptureFixture) -> str:
        assert run_main(main, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]
    return line


@pytest.fixture
def fuse_argv() -> Callable[..., list[str]]:
    """``fuse_argv(files, method, (dev_a, dev_b), *extra)``: a fuse command over ``files``'
    d.trec and b.trec, tuned on two dev runs there against its qrels.txt."""

    def argv(files: Path, method: str, dev: tuple[str, str], *extra: str) -> list[str]:
        return ["--runs", str(files / "d.trec"), str(files / "b.trec"), "--method", method,
                "--dev-runs", *(str(files / name) for name in dev), "--dev-qrels",
                str(files / "qrels.txt"), "--output", str(files / "f.trec"), *extra]
    return argv
