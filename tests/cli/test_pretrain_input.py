"""Unusual input to the ``pretrain`` command (:mod:`pyserini_moe.cli.pretrain`): flags and
their help, non-finite numbers, inputs listed twice or written over, ``--overwrite`` of a
folder holding a user's files, an interrupted pre-training, and ``--quiet``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe.cli import pretrain, run_main
from pyserini_moe.cli import pretrain as pretrain_cli
from pyserini_moe.errors import UserError
from pyserini_moe.pretrain import main as pretrain_main
from tests.helpers import (
    err_text,
    exit_code,
    folder_files,
    help_blocks,
    kept,
    pseudo_queries,
    refused,
    user_files,
)

pytestmark = pytest.mark.usefixtures("one_thread")


# --- --help defaults ------------------------------------------------------------------------------


def test_every_pretrain_flag_has_a_help_text_and_its_default() -> None:
    from pyserini_moe.cli.pretrain import build_parser

    parser = build_parser()
    blocks = help_blocks(parser.format_help())
    for action in parser._actions:
        if not action.option_strings or action.option_strings == ["-h", "--help"]:
            continue
        flag = action.option_strings[-1]
        assert action.help, flag
        if action.default not in (None, False, [], ()) and not action.required:
            assert "default" in blocks[flag], blocks[flag]
    for flag in ("--max-steps", "--learning-rate", "--warmup-ratio", "--variant", "--seed"):
        assert "(default: " in blocks[flag], blocks[flag]


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


def _pretrain(tiny_bert: Path, output: Path, *extra: str) -> int:
    return run_main(pretrain_main, ["--backbone", str(tiny_bert), "--output-dir", str(output),
                                    "--max-steps", "2", "--batch-size", "2", "--max-length",
                                    "16", "--context-max-length", "8", "--device", "cpu",
                                    "--quiet", *extra])


def test_pretrain_overwrite_keeps_a_folder_of_user_files(tiny_bert, tiny_corpus, tmp_path,
                                                         capsys) -> None:
    folder = user_files(tmp_path / "pu")
    code = _pretrain(tiny_bert, folder, "--pseudo-queries",
                     pseudo_queries(tiny_corpus, tmp_path), "--overwrite")
    assert code == 2 and "holds files this toolkit did not write (e.g. notes.txt), also sub/" \
        in err_text(capsys)
    assert kept(folder) and sorted(p.name for p in folder.iterdir()) == ["notes.txt", "sub"]


def test_pretrain_overwrite_whose_inputs_fail_keeps_the_earlier_output(
        tiny_bert, tiny_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "pt"
    pq = pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 0
    before = sorted(p.name for p in out.iterdir())
    assert before == ["model", "pretrain_args.json", "pretrain_log.jsonl"]
    # the tiny corpus has no multi-sentence document: no examples, exit 2, nothing deleted
    assert _pretrain(tiny_bert, out, "--corpus", str(tiny_corpus), "--overwrite") == 2
    assert "no pre-training examples" in err_text(capsys)
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
    pq = pseudo_queries(tiny_corpus, tmp_path)
    assert _pretrain(tiny_bert, out, "--pseudo-queries", pq) == 130
    assert "interrupted" in err_text(capsys)
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
    before = folder_files(out)
    assert _pretrain_on_pseudo_queries(tiny_bert, tiny_corpus, out, "--overwrite") == 2
    assert "did not write (e.g. model/NOTES.md), also model/mine/" in err_text(capsys)
    assert folder_files(out) == before


def test_pre_training_over_its_backbone_is_refused(bm25_ws, capsys) -> None:
    refused(pretrain.main, ["--backbone", str(bm25_ws["model"]), "--corpus", str(bm25_ws["corpus"]),
                            "--output-dir", str(bm25_ws["model"]), "--overwrite"],
            "is also an input", capsys, bm25_ws["model"])
