"""Helpers that several test modules share: file contents they write, what a refused command
printed, what a refusal must leave as it was. (Shared fixtures are in the ``conftest.py`` of
the folder that covers their users.) Heavy imports (torch, pandas, the models) wait for the
helper that needs them: ``tests/conftest.py`` imports this module."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from pyserini_moe.cli import run_main
from pyserini_moe.index.meta import META_FILE

if TYPE_CHECKING:
    from pyserini_moe.train.trainer import Trainer

# --- runs and qrels ---------------------------------------------------------------------------------

SMALL_RUN = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\n"
# Two runs over q1 and q2, and their qrels (``dev_ws`` adds the same rankings of dq1, dq2).
RUN_A = "q1 Q0 d1 1 3.0 t\nq1 Q0 d2 2 2.0 t\nq2 Q0 d2 1 1.0 t\n"
RUN_B = "q1 Q0 d2 1 9.0 t\nq1 Q0 d1 2 8.0 t\nq2 Q0 d1 1 4.0 t\n"
QRELS_AB = "q1 0 d2 1\nq2 0 d2 1\n"
BOM = "\ufeff".encode()
# q0's judged document is at rank 1, q1's is missed: nDCG@10 0.5.
RUN_HALF = "q0 Q0 d3 1 3.0 t\nq0 Q0 d21 2 2.0 t\nq1 Q0 d26 1 1.0 t\n"
QRELS_HALF = "q0 0 d3 1\nq1 0 d1 1\n"


def run_qrels_files(tmp_path: Path) -> Path:
    """``tmp_path`` with a run, an empty run, qrels and headerless BEIR qrels in it."""
    (tmp_path / "run.trec").write_text(SMALL_RUN)
    (tmp_path / "empty.trec").write_text("")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (tmp_path / "headerless.tsv").write_text("q1\td1\t1\n")
    return tmp_path


def dense_queries(folder: Path, embeddings: list) -> Path:
    """``folder`` made, holding dense encoded queries (``embedding.pkl``) of ``embeddings``."""
    import pandas as pd

    folder.mkdir()
    pd.DataFrame({"text": [f"query {i}" for i in range(len(embeddings))],
                  "embedding": embeddings}).to_pickle(folder / "embedding.pkl")
    return folder


def pseudo_queries(corpus: Path, tmp_path: Path, text: str = "d0\tcat sat\nd1\tdog\n") -> str:
    file = tmp_path / "pq.tsv"
    file.write_text(text, encoding="utf-8")
    return f"{corpus}={file}"


# --- regression files ---------------------------------------------------------------------------

GIVEN_RUN = "q1 Q0 d1 1 3.0 t\nq2 Q0 d1 1 3.0 t\nq2 Q0 d2 2 2.0 t\n"
# Writes the run it is given after --output; reads (and checks) what --encoder names.
WRITER = ('{python} -c "import sys, shutil; shutil.copy(sys.argv[3], sys.argv[2])" '
          "--output {work}/model.trec %s")
READER = ('{python} -c "import sys, shutil; shutil.copy(sys.argv[2], sys.argv[4])" '
          "--encoder {work}/model.trec --output {work}/run.trec")


def regression_file(folder: Path, name: str = "tiny", **condition) -> Path:
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\n")
    (folder / "given.trec").write_text(GIVEN_RUN)
    doc = {"name": name, "conditions": [{
        "name": "c", "qrels": str(folder / "qrels.txt"), "tolerance": 0.01, "source": "by hand",
        "steps": ['{python} -c "import sys, shutil; shutil.copy(sys.argv[3], sys.argv[2])" '
                  f"--output {{work}}/copy.trec {folder / 'given.trec'}"],
        "run": "{work}/copy.trec", "metrics": {"mrr@10": 0.75}, **condition}]}
    path = folder / f"{name}-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# --- training folders and indexes ---------------------------------------------------------------


TOY_WORDS = ["the", "a", "of", "what", "is", "retrieval", "query", "passage", "dense", "sparse",
             "expert", "mixture", "model", "cat", "dog", "sat", "on", "mat"]


def toy_collection(root: Path) -> Path:
    """A learnable task in ``root``: 24 documents of three words, each query the text of its
    positive, judged on the train split, with five run negatives a query (negatives.trec)."""
    root.mkdir(parents=True, exist_ok=True)
    texts = [f"{TOY_WORDS[i % 18]} {TOY_WORDS[(3 * i + 1) % 18]} {TOY_WORDS[(5 * i + 2) % 18]}"
             for i in range(24)]
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "qrels").mkdir()
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(24)))
    (root / "negatives.trec").write_text("".join(
        f"q{i} Q0 d{(i + k) % 24} {k} {10 - k} toy\n" for i in range(24) for k in range(1, 6)))
    return root



def seed_training(folder: Path, seed: int, rate: float, **more) -> str:
    folder.mkdir()
    recipe = {"model": {"type": "siamese", "args": more}, "data": {"collection": "tc", "seed": seed},
              "training": {"learning_rate": rate, "seed": seed}, "output_dir": str(folder)}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return f"{seed}={folder}"


def seed_training_with_negatives(folder: Path, seed: int, **negatives) -> str:
    folder.mkdir()
    recipe = {"model": {"type": "siamese"}, "data": {"collection": "tc", "seed": seed,
                                                     "negatives": {"source": "run", **negatives}},
              "training": {"seed": seed}, "output_dir": str(folder)}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return f"{seed}={folder}"


def trainer_into(recipe, toy_data, tiny_bert: Path, output: Path | None = None) -> Trainer:
    """A two-step Siamese training on the toy data, into ``output`` (default: the recipe's)."""
    import torch

    from pyserini_moe.modeling import SiameseBiEncoder
    from pyserini_moe.train.trainer import Trainer

    torch.manual_seed(0)
    if output is not None:
        recipe = dataclasses.replace(recipe, output_dir=output)
    return Trainer(SiameseBiEncoder.from_backbone(tiny_bert, device="cpu"), recipe, toy_data(),
                   progress=False)


def dense_copy(ws: dict[str, Path], folder: Path) -> Path:
    shutil.copytree(ws["index"], folder)
    return folder


def edited_index(ws, folder: Path, **changes) -> Path:
    """A copy of ``ws``'s dense index in ``folder``, its metadata changed by ``changes``."""
    shutil.copytree(ws["index"], folder)
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, **changes}))
    return folder


def edited_length(ws, folder: Path, length: int) -> Path:
    """A copy of ``ws``'s dense index in ``folder`` that records ``length`` as its query length."""
    return edited_index(ws, folder, query_max_length=length)


def user_files(folder: Path) -> Path:
    """``folder`` with a user's notes and a sub-folder of theirs put in it."""
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "sub" / "y").write_text("mine")
    (folder / "notes.txt").write_text("keep")
    return folder


def kept(folder: Path) -> bool:
    return (folder / "notes.txt").read_text() == "keep" and (folder / "sub" / "y").is_file()


# --- what a refusal must leave as it was ----------------------------------------------------------


def snapshot_path(path: Path) -> dict[str, bytes]:
    """The file ``path``, or every file under the folder ``path``, with its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


# --- what a command printed -----------------------------------------------------------------------


def exit_code(main, argv: list[str]) -> int:
    """The command's exit code, argparse's refusals (SystemExit 2) included."""
    try:
        return run_main(main, argv)
    except SystemExit as e:
        return e.code


def refused(main, argv: list[str], message: str, capsys, keep: Path | None = None) -> None:
    """``main(argv)`` exits 2, its last stderr line an ``error:`` holding ``message``; ``keep``
    (a file or folder), when given, is left as it was."""
    before = snapshot_path(keep) if keep is not None else None
    assert run_main(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and message in err[-1], err
    if keep is not None:
        assert snapshot_path(keep) == before  # the input is untouched


def refusal_line(main, argv: list[str], capsys) -> str:
    """The last stderr line of ``main(argv)``, which must exit 2."""
    assert run_main(main, argv) == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def err_text(capsys) -> str:
    """stderr, which must hold no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def err_no_warning(capsys) -> str:
    """stderr, which must hold no traceback and no RuntimeWarning."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeWarning" not in err
    return err


def last_err_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def only_error(capsys) -> str:
    """The one line a refused command prints."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def one_error_line(capsys) -> str:
    """stderr, which must be one ``error:`` line and no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def help_blocks(text: str) -> dict[str, str]:
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
