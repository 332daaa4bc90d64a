"""Unusual input to the ``pretrain`` command (:mod:`pyserini_moe.cli.pretrain`): flags and
their help, non-finite numbers, inputs listed twice or written over, ``--overwrite`` of a
folder holding a user's files, an interrupted pre-training, and ``--quiet``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyserini_moe.cli import index as index_cli
from pyserini_moe.cli import pretrain, run_main
from pyserini_moe.cli import pretrain as pretrain_cli
from pyserini_moe.errors import UserError
from pyserini_moe.modeling import SiameseBiEncoder
from pyserini_moe.pretrain import main as pretrain_main

pytestmark = pytest.mark.usefixtures("one_thread")


# --- --help defaults ------------------------------------------------------------------------------


def _help_blocks(text: str) -> dict[str, str]:
    """``--flag`` -> its help block, from an argparse help text."""
    blocks: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and stripped.startswith("--"):
            flag = stripped.split()[0].rstrip(",")
            blocks[flag] = stripped
        elif flag is not None and line.startswith("    ") and stripped:
            blocks[flag] += " " + stripped
        else:
            flag = None
    return blocks


def test_every_pretrain_flag_has_a_help_text_and_its_default() -> None:
    from pyserini_moe.cli.pretrain import build_parser

    parser = build_parser()
    blocks = _help_blocks(parser.format_help())
    for action in parser._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        flag = action.option_strings[-1]
        assert action.help, flag
        if action.default not in (None, False, [], ()) and not action.required:
            assert "default" in blocks[flag], blocks[flag]
    for flag in ("--max-steps", "--learning-rate", "--warmup-ratio", "--variant", "--seed"):
        assert "(default: " in blocks[flag], blocks[flag]


def exit_code(main, argv: list[str]) -> int:
    """The command's exit code, argparse's refusals (SystemExit 2) included."""
    try:
        return run_main(main, argv)
    except SystemExit as e:
        return e.code


def test_pretrain_refuses_an_infinite_learning_rate_before_writing_anything(
        tmp_path: Path, capsys) -> None:
    """Accepted, diverged, and left a folder (log with Infinity) that blocked a rerun."""
    out = tmp_path / "pt"
    code = exit_code(pretrain.main, ["--backbone", str(tmp_path), "--corpus", "scifact",
                                    "--output-dir", str(out), "--learning-rate", "inf"])
    assert code == 2 and not out.exists()
    assert "expected a finite number, got 'inf'" in capsys.readouterr().err


# --- transformers' LOAD REPORT under --quiet ------------------------------------------------------


def test_quiet_silences_the_load_report_of_a_checkpoint_with_extra_weights(tiny_mlm,
                                                                            tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "the cat sat on the mat. a dense model reads it. the sparse one too. and more."
    (corpus / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i in range(8)))
    command = [sys.executable, "-m", "pyserini_moe.pretrain", "--backbone", str(tiny_mlm),
               "--corpus", str(corpus), "--max-steps", "1", "--batch-size", "4", "--device",
               "cpu"]
    env = {**{k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"},
           "OMP_NUM_THREADS": "1"}  # a --quiet run in this process set it
    loud = subprocess.run([*command, "--output-dir", str(tmp_path / "a")], env=env,
                          capture_output=True, text=True, check=True)
    quiet = subprocess.run([*command, "--output-dir", str(tmp_path / "b"), "--quiet"], env=env,
                           capture_output=True, text=True, check=True)
    assert "LOAD REPORT" in loud.stderr  # the checkpoint's MLM head is unused by the encoder
    assert "LOAD REPORT" not in quiet.stderr


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _user_files(folder: Path) -> Path:
    """``folder`` with a user's notes and a sub-folder of theirs put in it."""
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "sub" / "y").write_text("mine")
    (folder / "notes.txt").write_text("keep")
    return folder


def _kept(folder: Path) -> bool:
    return (folder / "notes.txt").read_text() == "keep" and (folder / "sub" / "y").is_file()


def _pretrain(tiny_bert: Path, output: Path, *extra: str) -> int:
    return run_main(pretrain_main, ["--backbone", str(tiny_bert), "--output-dir", str(output),
                                    "--max-steps", "2", "--batch-size", "2", "--max-length",
                                    "16", "--context-max-length", "8", "--device", "cpu",
                                    "--quiet", *extra])


def _pseudo_queries(corpus: Path, tmp_path: Path, text: str = "d0\tcat sat\nd1\tdog\n") -> str:
    file = tmp_path / "pq.tsv"
    file.write_text(text, encoding="utf-8")
    return f"{corpus}={file}"


def test_pretrain_overwrite_keeps_a_folder_of_user_files(tiny_bert, tiny_corpus, tmp_path,
                                                         capsys) -> None:
    folder = _user_files(tmp_path / "pu")
    code = _pretrain(tiny_bert, folder, "--pseudo-queries",
                     _pseudo_queries(tiny_corpus, tmp_path), "--overwrite")
    assert code == 2 and "holds files this toolkit did not write (e.g. notes.txt), also sub/" \
        in _err(capsys)
    assert _kept(folder) and sorted(p.name for p in folder.iterdir()) == ["notes.txt", "sub"]


def test_pretrain_overwrite_whose_inputs_fail_keeps_the_earlier_output(
        tiny_bert, tiny_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "pt"
    pq = _pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 0
    before = sorted(p.name for p in out.iterdir())
    assert before == ["model", "pretrain_args.json", "pretrain_log.jsonl"]
    # the tiny corpus has no multi-sentence document: no examples, exit 2, nothing deleted
    assert _pretrain(tiny_bert, out, "--corpus", str(tiny_corpus), "--overwrite") == 2
    assert "no pre-training examples" in _err(capsys)
    assert sorted(p.name for p in out.iterdir()) == before and (out / "model").is_dir()
    # its own earlier output is replaced, and the card names where the model is
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq, "--overwrite") == 0
    assert 'load_model("model")' in (out / "model" / "README.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.tsv", "pt"]


def test_an_interrupted_pretraining_leaves_nothing_and_reruns(tiny_bert, tiny_corpus, tmp_path,
                                                              capsys, monkeypatch) -> None:
    import pyserini_moe.train.pretrain as module  # noqa: PLC0415

    real = module._pass
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(module, "_pass", interrupted)
    out = tmp_path / "runs" / "p7"
    pq = _pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 130
    assert "interrupted" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq.tsv"]  # not even runs/
    monkeypatch.setattr(module, "_pass", real)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 0  # not "already exists"
    assert (out / "model" / "pyserini_moe.json").is_file()


@pytest.mark.parametrize("flags", [
    lambda c, f: ["--corpus", str(c), f"{c}/."],
    lambda c, f: ["--pseudo-queries", f"{c}={f}", f"other={f}"]])
def test_pretrain_refuses_an_input_listed_twice(tmp_path, tiny_bert, tiny_corpus, flags):
    pseudo = tmp_path / "pq.tsv"
    pseudo.write_text("d0\tcat\n")
    out = tmp_path / "out"
    with pytest.raises(UserError, match="are one input: give each once"):
        pretrain_cli.main(["--backbone", str(tiny_bert), *flags(tiny_corpus, pseudo),
                           "--output-dir", str(out), "--device", "cpu"])
    assert not out.exists()


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _pretrain_on_pseudo_queries(tiny_bert: Path, tiny_corpus: Path, output: Path, *extra: str) -> int:
    pq = output.parent / "pq.tsv"
    pq.write_text("d0\tcat sat\nd1\tdog\n", encoding="utf-8")
    return run_main(pretrain_main, ["--backbone", str(tiny_bert), "--output-dir", str(output),
                                    "--pseudo-queries", f"{tiny_corpus}={pq}", "--max-steps",
                                    "1", "--batch-size", "2", "--max-length", "16",
                                    "--context-max-length", "8", "--device", "cpu", "--quiet",
                                    *extra])


def test_pretrain_overwrite_keeps_a_users_files_in_its_model(tiny_bert, tiny_corpus, tmp_path,
                                                             capsys) -> None:
    out = tmp_path / "pt"
    assert _pretrain_on_pseudo_queries(tiny_bert, tiny_corpus, out) == 0
    (out / "model" / "NOTES.md").write_text("mine")
    (out / "model" / "mine").mkdir()
    (out / "model" / "mine" / "a.txt").write_text("mine")
    before = _files(out)
    assert _pretrain_on_pseudo_queries(tiny_bert, tiny_corpus, out, "--overwrite") == 2
    assert "did not write (e.g. model/NOTES.md), also model/mine/" in _err(capsys)
    assert _files(out) == before


@pytest.fixture(scope="module")
def bm25_ws(tiny_bert, tiny_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bm25-ws")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "model")
    corpus = root / "corpus"
    shutil.copytree(tiny_corpus, corpus)
    bm25 = root / "bm25"
    assert index_cli.main(["--retriever", "bm25", "--corpus", str(corpus), "--index", str(bm25),
                           "--quiet"]) == 0
    run = root / "run.trec"
    run.write_text("q0 Q0 d1 1 2.0 t\nq0 Q0 d2 2 1.0 t\nq1 Q0 d3 1 1.0 t\n")
    other = root / "other.trec"
    other.write_text("q0 Q0 d2 1 2.0 t\nq1 Q0 d4 1 1.0 t\n")
    return {"root": root, "model": model, "corpus": corpus, "bm25": bm25, "run": run,
            "other": other}


def snapshot_path(path: Path) -> dict[str, bytes]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def refused(main, argv: list[str], message: str, capsys, keep: Path | None = None) -> None:
    before = snapshot_path(keep) if keep is not None else None
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err
    if keep is not None:
        assert snapshot_path(keep) == before  # the input is untouched


def test_pre_training_over_its_backbone_is_refused(bm25_ws, capsys) -> None:
    refused(pretrain.main, ["--backbone", str(bm25_ws["model"]), "--corpus", str(bm25_ws["corpus"]),
                            "--output-dir", str(bm25_ws["model"]), "--overwrite"],
            "is also an input", capsys, bm25_ws["model"])
