"""Smoke scale for the paper-scale regression files: every step of every condition, for real, on
small stand-ins, so a wrong flag, path or step order shows up here and not on a GPU cluster.

What the runner changes, never the files themselves:

* **Data.** ``$BEIR_DIR/<name>`` (every name a file uses), ``$MULTIDOMAIN_DIR/<name>``,
  ``$DPR_DIR`` (``psgs_w100.tsv``, ``biencoder-*.json``, ``*.qa.csv`` in DPR's formats) and
  ``$MSMARCO_DOCT5QUERY`` (``docid<TAB>query``) are written from a slice of the local SciFact
  collection: :data:`TRAIN_QUERIES` training and :data:`TEST_QUERIES` test queries, their
  positives and other abstracts up to :data:`DOCS` documents. Pyserini's MS MARCO topic and qrels
  names (dev subset, DL19, DL20) become the stand-in ``msmarco`` folder's dev and test splits: the
  real ones judge documents the stand-in does not hold.
* **Backbone.** Every pre-training and training step starts from :func:`tiny_backbone`, a random
  12-layer BERT 32 wide with BERT's vocabulary and an MLM head: 12 layers keep the recipes' layer
  arithmetic (TASER's every-2nd, CAME's 10 shared) valid. A step's own ``--set model.backbone``
  still wins when it is a previous step's output (a path); a hub name becomes the tiny BERT too.
* **Budget.** Training stops after :data:`TRAIN_STEPS` optimizer steps of :data:`BATCH` queries
  (16 query / 32 passage tokens); pre-training likewise; encoding uses 32 tokens, one thread.

Each ``python -m pyserini_moe...`` step runs in this process (``python -m`` semantics through
:mod:`runpy`), so the JVM, torch and Pyserini start once rather than hundreds of times; any other
step (``ln``) runs as a command. Metric values are not compared: a
condition passes when its run is evaluated.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from pyserini_moe.data import BeirCollection
from pyserini_moe.io import atomic_path
from pyserini_moe.lab.regress import REPO_ROOT, Regression, expand
from pyserini_moe.modeling import load_tokenizer

DOCS = 240
TRAIN_QUERIES = 40
TEST_QUERIES = 12
TRAIN_STEPS = 2
BATCH = 4
SOURCE = "scifact"
# Pyserini names the paper files use for MS MARCO's evaluation topics -> the stand-in's splits.
MSMARCO_NAMES = {"msmarco-passage-dev-subset": "dev", "dl19-passage": "test", "dl20": "test",
                 "dl20-passage": "test"}
_ENV_FOLDER = re.compile(r"\$(BEIR_DIR|MULTIDOMAIN_DIR)/([A-Za-z0-9_.-]+)")
_DPR_FILE = re.compile(r"\$DPR_DIR/([A-Za-z0-9_.-]+)")


@dataclasses.dataclass
class StepFailure:
    """Where a smoke run stopped: the file, the condition (None: the file's shared steps), the
    step's number (1-based) and command, and the error's last line."""

    file: str
    condition: str | None
    step: int
    command: str
    error: str

    def __str__(self) -> str:
        where = f"condition {self.condition}" if self.condition else "shared steps"
        return f"{self.file}: {where}, step {self.step}: {self.error}\n    $ {self.command}"


# ------------------------------------------------------------------------------------- stand-ins
def tiny_backbone(folder: Path) -> Path:
    """A random BERT (12 layers of width 32, BERT's WordPiece vocabulary, an MLM head) saved with
    its tokenizer: what every smoke training starts from."""
    if (folder / "config.json").is_file():
        return folder

    tokenizer = load_tokenizer()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=12,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)

    with atomic_path(folder, directory=True) as tmp:
        BertForMaskedLM(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return folder


@dataclasses.dataclass
class _Slice:
    """The SciFact slice every stand-in is written from."""

    docs: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    train: dict[str, list[str]]  # qid -> positives, in qrels order
    test: dict[str, list[str]]


def _slice() -> _Slice:

    collection = BeirCollection.load(SOURCE)
    splits = {}
    for split, size in (("train", TRAIN_QUERIES), ("test", TEST_QUERIES)):
        judged = collection.qrels(split)
        splits[split] = {q: [d for d, g in docs.items() if g > 0]
                         for q, docs in list(judged.items())[:size]}
    wanted = {d for split in splits.values() for docs in split.values() for d in docs}
    corpus = {doc.id: (doc.title, doc.text) for doc in collection.corpus()}
    keep = wanted | set([d for d in corpus if d not in wanted][:max(0, DOCS - len(wanted))])
    docs = {d: text for d, text in corpus.items() if d in keep}
    queries = collection.queries()
    needed = {q for split in splits.values() for q in split}
    return _Slice(docs, {q: queries[q] for q in needed}, splits["train"], splits["test"])


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _beir_folder(folder: Path, data: _Slice) -> None:
    """BEIR layout; splits train, dev and test (dev = test: MS MARCO's dev is its test split)."""
    _write_lines(folder / "corpus.jsonl", [json.dumps({"_id": i, "title": t, "text": x})
                                           for i, (t, x) in data.docs.items()])
    _write_lines(folder / "queries.jsonl", [json.dumps({"_id": q, "text": t})
                                            for q, t in data.queries.items()])
    for split, judged in (("train", data.train), ("dev", data.test), ("test", data.test)):
        _write_lines(folder / "qrels" / f"{split}.tsv", ["query-id\tcorpus-id\tscore"] + [
            f"{q}\t{d}\t1" for q, docs in judged.items() for d in docs])


def _dpr_files(folder: Path, names: set[str], data: _Slice) -> None:
    """DPR's published formats: psgs_w100.tsv (numeric ids), biencoder-*.json (gold positive
    first, BM25-style hard negatives), *.qa.csv (question, answer list literal)."""
    number = {doc: str(i) for i, doc in enumerate(data.docs, start=1)}
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        if name.startswith("psgs_w100"):
            with path.open("w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f, delimiter="\t")
                writer.writerow(["id", "text", "title"])
                writer.writerows([number[d], x, t] for d, (t, x) in data.docs.items())
        elif name.startswith("biencoder-") and name.endswith(".json"):
            judged = data.train if "-train" in name else data.test
            others = list(data.docs)
            examples = [{
                "question": data.queries[q], "answers": [data.docs[docs[0]][0].split()[0]],
                "positive_ctxs": [_ctx(d, data, number) for d in docs],
                "negative_ctxs": [],
                "hard_negative_ctxs": [_ctx(d, data, number)
                                       for d in others[i % 7::37][:3] if d not in docs],
            } for i, (q, docs) in enumerate(judged.items())]
            path.write_text(json.dumps(examples), encoding="utf-8")
        elif name.endswith(".qa.csv"):
            with path.open("w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f, delimiter="\t")
                writer.writerows([data.queries[q], repr([data.docs[docs[0]][0].split()[0]])]
                                 for q, docs in data.test.items())
        else:
            raise ValueError(f"no stand-in for DPR file {name!r}: add one to {__name__}")


def _ctx(doc: str, data: _Slice, number: dict[str, str]) -> dict[str, object]:
    title, text = data.docs[doc]
    return {"title": title, "text": text, "score": 1.0, "passage_id": number[doc]}


def build_standins(root: Path, regressions: list[Regression]) -> dict[str, str]:
    """Write every stand-in the files name under ``root``; return the environment variables that
    point the files at them."""
    data = _slice()
    texts = [" ".join(reg.steps + [s for c in reg.conditions for s in c.steps + [c.qrels or ""]]
                      + [str(d) for d in reg.requires.get("data") or []])
             for reg in regressions]
    text = "\n".join(texts)
    env = {"BEIR_DIR": str(root / "beir"), "MULTIDOMAIN_DIR": str(root / "multidomain"),
           "DPR_DIR": str(root / "dpr"), "MSMARCO_DOCT5QUERY": str(root / "doct5query.tsv")}
    folders = {(var, name) for var, name in _ENV_FOLDER.findall(text)} | {("BEIR_DIR", "msmarco")}
    for var, name in sorted(folders):
        _beir_folder(Path(env[var]) / name, data)
    _dpr_files(root / "dpr", set(_DPR_FILE.findall(text)), data)
    pairs = [f"{d}\t{data.queries[q]}" for q, docs in data.train.items() for d in docs]
    pairs += [f"{d}\t{title}" for d, (title, _) in data.docs.items()]
    _write_lines(root / "doct5query.tsv", pairs)
    env["SMOKE_BACKBONE"] = str(tiny_backbone(root / "tiny-bert"))
    return env


# ------------------------------------------------------------------------------------- overrides
def put(argv: list[str], flag: str, value: str, add: bool = True) -> None:
    """Set ``flag``'s value in place (every occurrence), or append it when absent and ``add``."""
    found = False
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            argv[i + 1] = value
            found = True
    if not found and add:
        argv += [flag, value]


def put_setting(argv: list[str], key: str, value: str) -> None:
    """Set the recipe field ``key`` (``--set key=value``) in place, or append it when the step
    sets none: train refuses one field set twice to two values."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--set" and argv[i + 1].partition("=")[0].strip() == key:
            argv[i + 1] = f"{key}={value}"
            return
    argv += ["--set", f"{key}={value}"]


def smoke_argv(argv: list[str], backbone: str) -> list[str]:
    """The smoke-scale form of one ``python -m pyserini_moe.X ...`` command (module first)."""
    argv = [_msmarco_name(a) for a in argv]
    module = argv[0]
    if module == "pyserini_moe.train":
        own = next((a.partition("=")[2] for a in argv if a.startswith("model.backbone=")), None)
        if own is None or not os.path.isabs(own):  # a previous step's output stays the backbone;
            put_setting(argv, "model.backbone", backbone)  # a hub name (coCondenser): tiny's
        for key, value in (("training.batch_size", BATCH), ("training.grad_accumulation", 1),
                           ("data.query_max_length", 16), ("data.passage_max_length", 32)):
            put_setting(argv, key, str(value))
        put(argv, "--max-steps", str(TRAIN_STEPS))
        put(argv, "--device", "cpu")
    elif module == "pyserini_moe.pretrain":
        for flag, value in (("--backbone", backbone), ("--max-steps", str(TRAIN_STEPS)),
                            ("--batch-size", str(BATCH)), ("--grad-accumulation", "1"),
                            ("--max-length", "32"), ("--context-max-length", "32")):
            put(argv, flag, value)
    elif module == "pyserini_moe.index":
        for flag, value in (("--max-length", "32"), ("--batch-size", "32"), ("--threads", "1")):
            put(argv, flag, value, add=flag != "--max-length" or "--encoder" in argv)
    elif module == "pyserini_moe.search":
        put(argv, "--batch-size", "32", add=False)
        put(argv, "--threads", "1", add=False)
        put(argv, "--query-max-length", "16", add=False)
    return argv


def _msmarco_name(arg: str) -> str:
    split = MSMARCO_NAMES.get(arg)
    return f"{os.environ['BEIR_DIR']}/msmarco:{split}" if split else arg


# ------------------------------------------------------------------------------------- running
def run_in_process(command: str, work: Path, backbone: str) -> str | None:
    """Run one step at smoke scale in this process; None on success, else the error's last line."""
    argv = shlex.split(expand(command, work, results=work / "results", quote=True,
                              kept=work / "per-query"))  # not docs, not the repository's
    if len(argv) < 3 or argv[1] != "-m" or not argv[2].startswith("pyserini_moe"):
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)  # e.g. ln
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return None if proc.returncode == 0 else (lines[-1] if lines else f"exit "
                                                                           f"{proc.returncode}")
    argv = smoke_argv(argv[2:], backbone)
    captured = io.StringIO()
    saved = sys.argv
    sys.argv = [argv[0], *argv[1:]]
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured), \
                warnings.catch_warnings():
            # A command's __main__ may already be imported (a test, an earlier step): running its
            # code afresh is the point, so runpy's warning about it says nothing here.
            warnings.filterwarnings("ignore", message=".*found in sys.modules after import of",
                                    category=RuntimeWarning)
            runpy.run_module(argv[0], run_name="__main__", alter_sys=False)
        return None
    except SystemExit as stop:
        if stop.code in (0, None):
            return None
        lines = [line for line in captured.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {stop.code}"
    except Exception as e:  # noqa: BLE001 - a programming error: keep where it happened
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return f"{type(e).__name__}: {e} ({frame.filename}:{frame.lineno})"
    finally:
        sys.argv = saved


def smoke_regression(reg: Regression, work: Path, backbone: str,
                     progress: bool = True) -> tuple[list[str], list[StepFailure], float]:
    """Run every step of ``reg`` at smoke scale and evaluate every condition's run. Returns the
    conditions evaluated, the failures (a failed shared step stops the file) and the seconds."""
    started = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    failures: list[StepFailure] = []

    def run(steps: list[str], condition: str | None) -> bool:
        for i, step in enumerate(steps, start=1):
            t0 = time.perf_counter()
            error = run_in_process(step, work, backbone)
            if progress:
                print(f"  [{reg.name}] {condition or 'shared'} {i}/{len(steps)} "
                      f"{time.perf_counter() - t0:.1f}s {shlex.split(step)[2]}", flush=True)
            if error:
                failures.append(StepFailure(reg.path.name, condition, i, step, error))
                return False
        return True

    evaluated = []
    if run(reg.steps, None):
        for c in reg.conditions:
            if not run(c.steps, c.name):
                continue
            judged = dataclasses.replace(c, qrels=c.qrels and _msmarco_name(c.qrels))
            try:
                judged.evaluate(work)
                evaluated.append(c.name)
            except (OSError, ValueError, RuntimeError, KeyError) as e:
                failures.append(StepFailure(reg.path.name, c.name, len(c.steps) + 1,
                                            "evaluate", f"{type(e).__name__}: {e}"))
    return evaluated, failures, time.perf_counter() - started


def smoke(regressions: list[Regression], work_root: Path, progress: bool = True) -> int:
    """Build the stand-ins, smoke-run every file; print each file's outcome; 1 if any failed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    env = build_standins(work_root / "standins", regressions)
    os.environ.update(env)
    failed = False
    for reg in regressions:
        evaluated, failures, seconds = smoke_regression(
            reg, work_root / reg.name, env["SMOKE_BACKBONE"], progress)
        print(f"== {reg.path.name}: {len(evaluated)} of {len(reg.conditions)} conditions "
              f"evaluated in {seconds:.0f} s", flush=True)
        for failure in failures:
            print(f"FAILED {failure}", flush=True)
        failed |= bool(failures)
    return 1 if failed else 0


__all__ = ["build_standins", "smoke", "smoke_argv", "smoke_regression",
           "tiny_backbone"]
