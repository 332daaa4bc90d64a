"""Seed trainings on a lent GPU machine, runs brought back and scored here (issue 35).

The device machine has torch, transformers and a GPU but no Java, Pyserini, Faiss or ranx, and
its working tree travels in 64 MiB (files back: 8, 16 MiB each). So this tool, in four steps:

1. ``prepare`` (here): a carry folder (default ``.gpu/``, git-ignored) with the packaged MiniLM
   in float16 (cast back to float32 on the device), the collections, the BM25 training run the
   recipes' hard negatives come from (``data.negatives.source=run``: the same BM25 top 50 that
   ``source: bm25`` mines here), the job plan and a mark (``.gpu_seed_runs``) that it is the
   tool's own: only a folder holding that mark is ever deleted and rebuilt. Every input is
   checked first and the carry is built beside it and renamed into place, so a failed call
   leaves the earlier carry whole.
2. ``run`` (device): trains every (condition, seed) job of the plan with
   ``python -m pyserini_moe.train``, several at once on the one GPU, and searches each
   checkpoint by exact inner product over the whole corpus (``torch.topk``: what Pyserini's flat
   Faiss index computes) -- SciFact test and the held-out dev queries (searched in the recipe's
   own ``data.collection``) for every checkpoint, the zero-shot collections for ``last`` only.
   Runs are stored as corpus positions (int16/int32) and float32 scores in one ``.npz`` per
   job, packed into tars of a few jobs as each job ends, so a call stopped at its limit still
   returns every finished job. It exits 1 when any job failed (``log.tsv``: each stage's exit
   code and error).
3. ``unpack`` (here): the tars -> TREC runs (``work/gpu/runs/<job>.<checkpoint>.<topics>.trec``)
   that ``pyserini_moe.eval`` and ``fuse`` read; positions map back to the corpus's own ids.
   Each job's training log, summary and dev qrels come out beside them (``<job>.<file>``).
   Every member is checked before a file is written; a file already there is replaced only
   with ``--overwrite`` (it may be the user's own). ``curve`` (here) then tables and plots a
   ``snapshots=yes`` job's metric and validation loss against the step.
4. ``check`` (here, before spending device time): ``evaluate`` on the CPU for one model against
   the Pyserini / Faiss route of the regressions (same rankings, scores within 1e-4).

Plan lines (``--plan``): ``NAME SEED RECIPE [--set key=value ...] [| SETTING=VALUE ...]``;
NAME letters, digits, ``.``, ``_``, ``-`` (it names the job's folder and files); RECIPE a path
from the repository root (only the repository travels), its ``--set`` applied by ``prepare`` as
``train`` will (``model.backbone``, ``training.seed`` (SEED), ``output_dir`` and the BM25
negatives' ``source`` / ``run`` are ``run``'s own: see RUN_SETS); SEED in 0..2**32-1; each NAME
SEED once; quote a value holding spaces or ``|``; comments on their own lines
(``#`` first). After ``|``, each key once: ``kinds=dense,impact,hybrid`` (the runs to write:
see KINDS; default dense), ``topics=SPEC,...`` (specs of TOPICS, ``dev``, or COLLECTION:SPLIT
of a carried collection; default: run's --topics), ``doc_length=N`` / ``query_length=N``
(default 256 / 512, the regressions' --max-length / --query-max-length), ``snapshots=yes``
(keep the training's snapshots and search each as ``best``: test nDCG@10 against the step),
``negatives_from=NAME mine=KIND:DEPTH`` (a round-2 training: its hard negatives are the top
DEPTH of the KIND run, dense, impact or hybrid, of the earlier line NAME's model of the same seed
on the training queries, mined on the device by ``mine`` once that model has trained) and
any other KEY=VALUE as an extra encoding of every checkpoint (SB-MoE's ``inference=all``). Plans of the
protocol files are in ``lab/gpu_plans/``. CAME's three experts are ``impact`` (lexical),
``local`` (multi-vector) and ``dense`` (global); ``came`` is their fusion.

    python lab/gpu_seed_runs.py prepare --plan lab/gpu_plans/sbmoe-protocol.txt
    # on the device machine, carrying .gpu (57 MiB with the local collections):
    python3 lab/gpu_seed_runs.py run --out $OUT --workers 8 --threads 2 --budget 400
    # (CAME's 15 jobs all at once, --workers 15 --threads 1: 289 s on one H200, 2026-11-27)
    python lab/gpu_seed_runs.py unpack /work/.device/<N>/runs-*.tar   # then pyserini_moe.eval
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# topics spec -> (collection, hits, remove the query's own id, keep scores)
TOPICS = {
    "scifact:test": ("scifact", 100, False, True),
    # the recipe's held-out queries (dev_topics.tsv), searched in the recipe's data.collection
    "dev": (None, 100, False, True),
    # scores kept: the ArguAna rows fuse the hybrid run with BM25 by normalised score
    "arguana:test": ("arguana", 100, True, True),
    "cranfield:test": ("cranfield", 1000, False, False),
    "cisi:test": ("cisi", 1000, False, False),
    "vaswani:test": ("vaswani", 1000, False, False),
}


# ArguAna's queries are whole arguments (194 words on average): they are searched at 512
# tokens, the most a BERT-style backbone takes, whatever the plan's query_length (a 64-token
# cut keeps about a third of a query; the ArguAna regression rows search at 512 too).
LONG_QUERY_TOPICS = {"arguana:test": 512}
# Plan settings after "|" that say how to search (not encoder options): document and query
# tokens (the protocol's index --max-length / search --query-max-length), the run kinds and
# the topics (comma-separated specs of TOPICS; default: run's --topics).
EVALUATION = ("doc_length", "query_length", "kinds", "topics")
# ``snapshots=yes``: the training keeps its snapshots (training.keep_snapshots) and every one is
# searched as ``best`` is (SciFact test and dev, not the zero-shot collections): issue 35's plot of
# test nDCG@10 against the step, for one seed per condition (a diagnosis; no rule looks at it).
SNAPSHOTS = "snapshots"
# ``negatives_from=NAME mine=KIND:DEPTH``: a round-2 training (TASER appendix B, CoT-MoTE table
# 5) whose hard negatives are the top DEPTH of the KIND run of the plan's job NAME of the same
# seed (an earlier line: the pool starts jobs in plan order, so the source is running or done
# when this job waits on it) on the training queries, searched with the source's document and
# query lengths at its last checkpoint, as the regressions mine them here (search --hits DEPTH;
# the hybrid over the union of both top-DEPTH lists, --candidates DEPTH).
NEGATIVES_FROM, MINE = "negatives_from", "mine"
MINE_KINDS = ("dense", "impact", "hybrid")
# dense: inner product; impact: quantised term weights as Lucene scores them (sum of query x
# document integers, ties in index order); hybrid: the two summed exactly over the union of both
# top-1000 lists (search --retriever fused --fusion exact), impact scores dequantised; local:
# MaxSim of the token vectors over every passage (the multi-vector index's exact re-scoring of its
# stored float16 vectors, without its candidate stage); came: CAME's eq. 12 (search --retriever
# fused --fusion came_sum) over the impact, local and dense top-1000 lists.
KINDS = ("dense", "impact", "hybrid", "local", "came")
# The encoded fields each kind needs (Encoded's dense / sparse / multi).
FIELDS = {"dense": ("dense",), "impact": ("sparse",), "hybrid": ("dense", "sparse"),
          "local": ("multi",), "came": ("dense", "sparse", "multi")}
QUANTIZATION, QUERY_MAX_TERMS, FUSED_CANDIDATES = 100, 1024, 1000
# evaluate's --doc-length / --query-length when a plan line gives none
DOC_LENGTH, QUERY_LENGTH = 256, 512


def topics_settings(spec: str, dev: str | None = None) -> tuple[str, int, bool, bool]:
    """(collection, hits, remove the query's own id, keep scores) of a topics spec; any other
    ``COLLECTION:SPLIT`` is searched like SciFact test (100 hits with scores). ``dev``: the
    collection of the recipe's held-out queries (not SciFact's for every recipe)."""
    collection, *rest = TOPICS.get(spec) or (spec.rsplit(":", 1)[0], 100, False, True)
    return (collection or dev, *rest)


def run_key(label: str, spec: str) -> str:
    """``last.scifact-test``: the checkpoint and the topics, fit for a file name."""
    return f"{label}.{spec if spec == 'dev' else Path(spec).name.replace(':', '-')}"


LAST_ONLY = ("arguana:test", "cranfield:test", "cisi:test", "vaswani:test")
# The BM25 run in the carry; train.data.NEGATIVES_RUN is the name training writes it under (the
# device's driver cannot import the package: it runs as a script from lab/).
NEGATIVES = "negatives.trec"
# A carry folder this tool built holds this file with this text: prepare replaces only such a
# folder (a plan.txt alone proves nothing: a user's folder of notes may have one).
CARRY_MARK, CARRY_SIGNATURE = ".gpu_seed_runs", "carry folder of lab/gpu_seed_runs.py prepare\n"
# A training's own files a job brings back beside its runs (``<job>.<file>``; unpack writes
# them out): its log (validation loss by step), summary, and the held-out queries' qrels (dev).
JOB_FILES = ("train_log.jsonl", "train_summary.json", "dev_qrels.txt")
# What a call brings back: 8 files of at most 16 MiB, 64 MiB together; log.tsv is one of them.
TARS, TAR_BYTES, ALL_BYTES = 7, 15 * 2**20, 62 * 2**20
PLAN_LINE = "expected NAME SEED RECIPE [--set k=v ...] [| OPTION=VALUE ...]"
# The recipe fields run gives train itself, each with what it sets it to: the restored MiniLM
# (--set), the plan's SEED (--seed) and the job's folder under --scratch (--output-dir); and,
# for a recipe that mines BM25 negatives, the carried BM25 run. A plan line's --set of one (or
# of a section holding one, ``training=...``) is refused: train would refuse a --set given
# twice, and a --set beats --seed / --output-dir (two jobs would train one seed; the model would
# be written where run does not look). --overwrite and --quiet set no recipe field; run gives
# no --device, --epochs or --max-steps (the recipe's, or the line's --set, hold).
RUN_SETS = {"model.backbone": "the carried MiniLM",
            "training.seed": "the line's SEED, given as train's --seed",
            "output_dir": "the job's folder under --scratch, given as train's --output-dir"}
NEGATIVE_SETS = {"data.negatives.source": "the carried BM25 run",
                 "data.negatives.run": "the carried BM25 run"}


def fail(message: str) -> None:
    """One error line, exit 1: a tool's user errors carry no traceback."""
    raise SystemExit(f"error: {message}")


def plain_name(name: str) -> bool:
    """A file name that stays in its folder (no ``/``, no ``..``): names read from a plan or a
    tar become paths here."""
    return bool(name) and "/" not in name and "\\" not in name and ".." not in name


# ----------------------------------------------------------------------------- prepare (here)

def check_carry(carry: Path, inputs: list[Path]) -> None:
    """``prepare`` deletes and rebuilds ``carry``: only a folder holding its mark, never one that
    holds an input."""
    if carry.is_symlink() or (carry.exists() and not carry.is_dir()):
        fail(f"--carry {carry} is a file or a link: name a folder")
    if carry.is_dir() and any(carry.iterdir()) and not is_carry(carry):
        fail(f"--carry {carry} is a folder this tool did not build (no {CARRY_MARK}): it "
             "would be deleted; name a new folder (a carry of an older version: delete it "
             "yourself)")
    for path in inputs:
        if carry.resolve() in path.resolve().parents:
            fail(f"{path} is inside --carry {carry}, which prepare deletes first; move it out")


def is_carry(folder: Path) -> bool:
    mark = folder / CARRY_MARK
    return mark.is_file() and mark.read_text(errors="replace") == CARRY_SIGNATURE


def check_inputs(collections: list[str], negatives: str | None) -> Path:
    """The data root, once every input prepare reads is known to be there: a missing one is one
    error line before anything is built (not a traceback and half a carry)."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.paths import shared_data_root

    try:
        data = shared_data_root()
    except UserError as e:
        fail(str(e))
    if data is None:
        fail("no shared data folder (shared/data beside the checkout): set PYSERINI_MOE_DATA "
             "to the folder that holds the collections")
    there = sorted(p.name for p in data.iterdir() if p.is_dir())
    for name in collections:
        if not plain_name(name) or not (data / name).is_dir():
            fail(f"--collections {name}: no such collection in {data} (there: "
                 f"{', '.join(there) or 'none'})")
        if collections.count(name) > 1:
            fail(f"--collections {name} is given twice: give it once")
    if negatives is not None:
        check_negatives(Path(negatives))
    if negatives is None and not (data / "scifact").is_dir():
        fail(f"mining the BM25 negatives needs scifact in {data}: give --negatives")
    return data


def check_negatives(path: Path) -> None:
    """--negatives is copied as it is and read by every training on the device: a folder, an
    empty file or a qrels file would fail there, once a job, after the device time is spent."""
    if path.is_dir():
        fail(f"--negatives {path} is a folder, not a file: give the BM25 run of the training "
             "queries (TREC format)")
    if not path.is_file():
        fail(f"--negatives {path} not found")
    with open(path, errors="replace") as f:
        first = next((line for line in iter(lambda: f.readline(1 << 16), "") if line.strip()),
                     None)
    if first is None:
        fail(f"--negatives {path} is empty: give the BM25 run of the training queries")
    columns = len(first.split())
    if columns != 6:
        like = " (it looks like a qrels file)" if columns in (3, 4) else ""
        fail(f"--negatives {path}: its first line has {columns} columns{like}; a TREC run has "
             "6 (query Q0 document rank score tag)")


def prepare(args: argparse.Namespace) -> None:
    carry = Path(args.carry)
    inputs = [Path(args.plan)] + ([Path(args.negatives)] if args.negatives else [])
    check_carry(carry, inputs)
    data = check_inputs(list(args.collections), args.negatives)
    # a bad line fails here, not on the device (which carries args.collections only)
    jobs = parse_plan(Path(args.plan), args.collections)
    build = carry.resolve().with_name(f".{carry.resolve().name}.tmp-{os.getpid()}")
    old = build.with_name(build.name + ".old")
    try:
        build_carry(build, args, data)
        if carry.exists():
            carry.rename(old)
        build.rename(carry)
    finally:
        for leftover in (build, old):
            if leftover.exists():
                shutil.rmtree(leftover)
    size = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    print(f"{carry}: {size / 2**20:.1f} MiB, {len(jobs)} jobs")


def build_carry(carry: Path, args: argparse.Namespace, data: Path) -> None:
    """The carry's files, into the new folder ``carry`` (prepare renames it into place)."""
    import torch
    from safetensors.torch import load_file, save_file

    from pyserini_moe.modeling import resolve_backbone

    carry.mkdir(parents=True)
    minilm = carry / "minilm"
    shutil.copytree(resolve_backbone("all-minilm-l6-v2"), minilm,
                    ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
    source = Path(resolve_backbone("all-minilm-l6-v2")) / "model.safetensors"
    weights = load_file(str(source))
    save_file({k: v.to(torch.float16) for k, v in weights.items()},
              str(minilm / "model.fp16.safetensors"))
    for name in args.collections:
        shutil.copytree(data / name, carry / "data" / name)
    if args.negatives:
        shutil.copy(args.negatives, carry / NEGATIVES)
    else:  # the BM25 run SciFact's protocol recipes mine (depth 50), as training writes it
        from pyserini_moe.train import NEGATIVES_RUN, load_config, load_training_data

        recipe = load_config(ROOT / "encoders" / "taser-detr-protocol-minilm.yaml").data
        load_training_data(recipe, carry, progress=False)
        (carry / NEGATIVES_RUN).replace(carry / NEGATIVES)
    shutil.copy(args.plan, carry / "plan.txt")
    (carry / CARRY_MARK).write_text(CARRY_SIGNATURE)


# ----------------------------------------------------------------------------- run (device)

def parse_plan(path: Path, collections: Iterable[str] = (), check_sets: bool = True) -> list[dict]:
    """The plan's jobs; a malformed line is one error naming it (before any device time).
    ``collections``: those the carry holds (prepare's --collections; on the device, its data/):
    a ``topics=`` COLLECTION:SPLIT of any other would fail only after the training.
    ``check_sets``: apply each line's --set to its recipe as ``train`` will (prepare, here); the
    device skips it (run logs a job whose recipe fails as failed, see ``run``)."""
    jobs, lines, models = [], {}, {}
    for number, line in plan_lines(path):
        where = f"{path}:{number}"
        train, encodings = split_line(where, line)
        name, seed, recipe, sets = parse_head(where, train)
        if recipe != "zero-shot":
            check_recipe(where, recipe)
            # before the recipe is loaded (and on the device, which loads none): a whole
            # ``training=`` section is refused for the seed it sets, not for a field it lacks
            check_taken(where, sets, RUN_SETS)
        if check_sets:
            check_recipe_sets(where, recipe, sets)
        pairs = parse_settings(where, encodings)
        settings = {key: value for key, value in pairs if key in EVALUATION}
        snapshots = dict(pairs).get(SNAPSHOTS)
        if snapshots not in (None, "yes"):
            fail(f"{where}: {SNAPSHOTS}={snapshots}: snapshots=yes searches every snapshot; "
                 "leave it out otherwise")
        if snapshots and recipe == "zero-shot":
            fail(f"{where}: {SNAPSHOTS}=yes: a zero-shot job trains nothing to keep snapshots of")
        if snapshots and any(word.startswith("training.keep_snapshots=") for word in sets):
            fail(f"{where}: {SNAPSHOTS}=yes sets training.keep_snapshots itself: leave out its "
                 "--set")
        for key, value in settings.items():
            check_setting(where, key, value, set(collections))
        mining = parse_mining(where, dict(pairs), seed, recipe, sets, jobs)
        if mining and check_sets and not recipe_config(recipe, sets).data.num_negatives:
            fail(f"{where}: {NEGATIVES_FROM}={dict(pairs)[NEGATIVES_FROM]}: the recipe trains "
                 "on in-batch negatives only (num_negatives 0): nothing would read the mined run")
        job = f"{name}-s{seed}"  # the model folder and the npz are named after it
        if job in lines:
            fail(f"{path}:{lines[job]} and {number}: both are {name} seed {seed}: give each "
                 "NAME SEED once")
        lines[job] = number
        # the seeds of a NAME are pooled as one condition: one model, trained and encoded alike
        options = [f"{k}={v}" for k, v in pairs
                   if k not in (*EVALUATION, SNAPSHOTS, NEGATIVES_FROM, MINE)]
        # compared as what they train: one recipe however spelt, the --set and options in any
        # order, the negatives mined alike (from the same NAME's job of each seed)
        model = (os.path.normpath(recipe), sorted(sets), sorted(options),
                 mining and (mining["source"].rsplit("-s", 1)[0], mining["kind"],
                             mining["depth"]))
        first = models.setdefault(name, (number, model))
        if first[1] != model:
            fail(f"{path}:{first[0]} and {number}: {name} is trained or encoded otherwise "
                 "(recipe, --set or options differ), yet its seeds make one condition: give "
                 "each model its own NAME")
        jobs.append({"name": job, "seed": seed, "recipe": recipe, "sets": sets,
                     "options": options,
                     "snapshots": snapshots == "yes", "mining": mining,
                     "doc_length": int(settings.get("doc_length", DOC_LENGTH)),
                     "query_length": int(settings.get("query_length", QUERY_LENGTH)),
                     "topics": settings["topics"].split(",") if "topics" in settings else None,
                     "evaluation": [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()
                                    if k != "topics"]})
    if not jobs:
        fail(f"{path}: no jobs")
    return jobs


def parse_mining(where: str, settings: dict[str, str], seed: int, recipe: str, sets: list[str],
                 earlier: list[dict]) -> dict | None:
    """A round-2 line's ``negatives_from=NAME mine=KIND:DEPTH`` (see NEGATIVES_FROM): the job
    to mine with (an earlier line's, same seed), what to search and how deep, and the source's
    lengths to search with; None for a line without them."""
    source, mine = settings.get(NEGATIVES_FROM), settings.get(MINE)
    if source is None and mine is None:
        return None
    if source is None or mine is None:
        fail(f"{where}: {NEGATIVES_FROM}=NAME and {MINE}=KIND:DEPTH go together: the job whose "
             "run gives the negatives, and which run how deep")
    if recipe == "zero-shot":
        fail(f"{where}: {NEGATIVES_FROM}={source}: a zero-shot job trains nothing to give "
             "mined negatives to")
    kind, _, depth = mine.partition(":")
    if kind not in MINE_KINDS or not is_count(depth):
        fail(f"{where}: {MINE}={mine}: KIND:DEPTH, KIND one of {','.join(MINE_KINDS)} (e.g. "
             "hybrid:200)")
    job = next((j for j in earlier if j["name"] == f"{source}-s{seed}"), None)
    if job is None:
        fail(f"{where}: {NEGATIVES_FROM}={source}: no earlier line trains {source} seed {seed} "
             "(the job to mine with comes first in the plan)")
    if job["recipe"] == "zero-shot":
        fail(f"{where}: {NEGATIVES_FROM}={source}: a zero-shot job has no training to mine with")
    check_taken(where, sets, dict.fromkeys(NEGATIVE_SETS, f"the run mined with {source}"))
    return {"source": job["name"], "kind": kind, "depth": int(depth),
            "doc_length": job["doc_length"], "query_length": job["query_length"]}


def plan_lines(path: Path) -> list[tuple[int, str]]:
    """(number, line) of the plan's job lines: blank lines and comments (``#`` as the first
    non-blank, indented or not) left out. A BOM (a plan saved by a Windows editor) is dropped:
    it would begin the first job's name, and every file named after it, invisibly."""
    if not path.is_file():
        fail(f"plan {path} not found")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        fail(f"plan {path} is not UTF-8 text ({e})")
    return [(number, line) for number, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.lstrip().startswith("#")]


def split_line(where: str, line: str) -> tuple[list[str], list[str]]:
    """A line's words before and after its ``|``, read whole by shlex so that a ``|`` inside
    quotes (``--set 'training.note=a|b'``) stays in its value instead of cutting the line."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|")
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError as e:
        fail(f"{where}: {PLAN_LINE} ({e})")
    if any(word.startswith("#") for word in words):
        fail(f"{where}: a comment goes on its own line (# first), not after a job")
    bars = [i for i, word in enumerate(words) if set(word) == {"|"}]
    if len(bars) > 1 or any(words[i] != "|" for i in bars):
        fail(f"{where}: one | a line, between the training and the search settings (quote a "
             "value that holds a |)")
    cut = bars[0] if bars else len(words)
    return words[:cut], words[cut + 1:]


def parse_head(where: str, words: list[str]) -> tuple[str, int, str, list[str]]:
    """NAME SEED RECIPE and the ``--set KEY=VALUE`` pairs. NAME names the job's model folder,
    npz and run files on both machines: a plain name, or ``../x`` writes outside --scratch."""
    if len(words) < 3:
        fail(f"{where}: {PLAN_LINE} (NAME, SEED and RECIPE are needed)")
    name, seed, recipe, *sets = words
    if not is_job_name(name):
        fail(f"{where}: NAME {name!r}: letters, digits, '.', '_' and '-' only (no '/', no "
             "'..'): it names the job's folder and files")
    if not (seed.isascii() and seed.isdigit()):
        fail(f"{where}: {PLAN_LINE} (SEED {seed!r} is not a whole number)")
    problem = seed_problem(int(seed))
    if problem:
        fail(f"{where}: SEED {seed} {problem} (train's --seed refuses it)")
    if (len(sets) % 2 or any(s != "--set" for s in sets[::2])
            or any(not s.partition("=")[0].strip() or "=" not in s for s in sets[1::2])):
        fail(f"{where}: overrides are --set KEY=VALUE, encodings OPTION=VALUE")
    return name, int(seed), recipe, sets


def seed_problem(seed: int) -> str | None:
    """What train's --seed says of ``seed`` (``validate.seed_range``: numpy and torch take
    [0, 2**32)); None where the package is not importable (a driver run as a bare script: train
    checks it there)."""
    try:
        from pyserini_moe.validate import seed_range
    except ImportError:
        return None
    return seed_range(seed)


def is_job_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", name)) and ".." not in name


def parse_settings(where: str, words: list[str]) -> list[tuple[str, str]]:
    """The ``KEY=VALUE`` words after ``|``, each key once (argparse would keep the last one,
    topics the first) and never empty (``=x`` became ``--option==x``, refused on the device)."""
    pairs = []
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            fail(f"{where}: {word!r}: the settings after | are OPTION=VALUE, with a name "
                 "before '='")
        if key in [k for k, _ in pairs]:
            fail(f"{where}: {key}= is given twice: give it once")
        pairs.append((key, value))
    return pairs


def check_recipe_sets(where: str, recipe: str, sets: list[str]) -> None:
    """The line's --set applied to its recipe here, as ``train`` applies them on the device: an
    unknown field, a field given twice or a bad value fails here, not in every seed's training.
    The carried BM25 run's fields, which ``run`` sets itself for a recipe that mines BM25
    negatives, are refused: train would refuse them there as given twice (RUN_SETS, set for
    every recipe, are refused before, by ``parse_plan``)."""
    if recipe == "zero-shot":
        if sets:
            fail(f"{where}: zero-shot trains nothing: its --set would be ignored")
        return
    from pyserini_moe.train import ConfigError

    try:
        config = recipe_config(recipe, sets)
    except ConfigError as e:
        fail(f"{where}: {e}")
    if mines_bm25(config):
        check_taken(where, sets, NEGATIVE_SETS)


def check_taken(where: str, sets: list[str], taken: dict[str, str]) -> None:
    """A --set of a field run sets itself (``taken``: field -> what run sets it to), or of a
    section holding one, is one error naming the line."""
    for setting in sets[1::2]:
        key = setting.partition("=")[0].strip()
        clash = next((t for t in taken if t == key or t.startswith(f"{key}.")), None)
        if clash:
            fail(f"{where}: --set {setting}: run sets {clash} itself ({taken[clash]}): leave "
                 "it out")


def recipe_config(recipe: str, sets: list[str]):
    """The recipe with the job's ``--set`` applied (a ConfigError where train would refuse);
    an output folder given as train's --output-dir gives it."""
    from pyserini_moe.train import load_config

    return load_config(ROOT / recipe, output_dir="scratch").with_settings(sets[1::2])


def mines_bm25(config) -> bool:
    """Whether the recipe draws hard negatives from BM25 (mined here, the carried run there)."""
    return bool(config.data.num_negatives) and config.data.negatives.source == "bm25"


def check_recipe(where: str, recipe: str) -> None:
    """A recipe path from the repository root: the device gets the repository, nothing else."""
    if Path(recipe).is_absolute() or ROOT not in (ROOT / recipe).resolve().parents:
        fail(f"{where}: recipe {recipe}: give a path inside the repository, from its root (only "
             "the repository travels to the device)")
    if not (ROOT / recipe).is_file():
        fail(f"{where}: recipe {recipe} not found (paths are from the repository root)")


def check_setting(where: str, key: str, value: str, collections: set[str]) -> None:
    """One search setting after ``|`` (see EVALUATION)."""
    if key == "kinds" and not set(value.split(",")) <= set(KINDS):
        fail(f"{where}: kinds={value}: choose from {','.join(KINDS)}")
    if key == "topics":
        for spec in value.split(","):
            if value.split(",").count(spec) > 1:  # evaluate refuses it, after the training
                fail(f"{where}: topics={value}: {spec} is given twice: give each spec once")
            if ":" not in spec and spec != "dev":
                fail(f"{where}: topics={value}: comma-separated COLLECTION:SPLIT or dev")
            if spec not in TOPICS and spec.rsplit(":", 1)[0] not in collections:
                fail(f"{where}: topics={value}: {spec.rsplit(':', 1)[0]} is not a collection "
                     f"the carry holds ({', '.join(sorted(collections)) or 'none'}); known "
                     f"specs: {', '.join(TOPICS)}")
    if key in ("doc_length", "query_length") and not is_count(value):
        fail(f"{where}: {key}={value}: a number of tokens, at least 1")


def is_count(value: str) -> bool:
    """ASCII digits, at least 1: ``str.isdigit`` is true of '²', which ``int`` refuses."""
    return value.isascii() and value.isdigit() and int(value) >= 1


def restore_backbone(carry: Path, target: Path) -> Path:
    """The float16 MiniLM cast back to float32, in a folder transformers loads."""
    import torch
    from safetensors.torch import load_file, save_file

    if not (target / "model.safetensors").is_file():
        shutil.copytree(carry / "minilm", target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("model.fp16.safetensors"))
        weights = load_file(str(carry / "minilm" / "model.fp16.safetensors"))
        save_file({k: v.to(torch.float32) for k, v in weights.items()},
                  str(target / "model.safetensors"))
    return target


class Packer:
    """Adds each finished job's files to tar ``runs-<k>.tar``, filled in the order jobs finish
    up to TAR_BYTES, rewritten whole and renamed into place, so what comes back is never half a
    tar. A job that would pass TARS tars or ALL_BYTES is left in the scratch folder, said on
    stdout (a CAME job's runs are ~5 MB: 15 jobs of every topics would not come back)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.members: dict[int, list[Path]] = {}
        self.sizes: dict[int, int] = {}

    def add(self, index: int, files: list[Path]) -> bool:
        """Packs one job's ``files``; False where they would not come back."""
        with self.lock:
            size = sum(f.stat().st_size for f in files)
            group = max(self.members, default=0)
            if self.sizes.get(group, 0) and self.sizes[group] + size > TAR_BYTES:
                group += 1
            if group >= TARS or sum(self.sizes.values()) + size > ALL_BYTES:
                print(f"job {index}: {size / 2**20:.1f} MiB of runs do not fit in what a call "
                      f"brings back; left in {files[0].parent}", flush=True)
                return False
            self.sizes[group] = self.sizes.get(group, 0) + size
            self.members.setdefault(group, []).extend(files)
            tmp = self.out / f".runs-{group}.tar.tmp"
            with tarfile.open(tmp, "w") as tar:
                for f in self.members[group]:
                    tar.add(f, arcname=f.name)
            os.replace(tmp, self.out / f"runs-{group}.tar")
            return True


def negatives_sets(job: dict, carry: Path) -> list[str]:
    """The carried BM25 run in place of mining (no Java on the device) for a recipe that draws
    hard negatives from BM25; nothing for an in-batch-only recipe (num_negatives 0), which
    refuses any negatives section (the SB-MoE recipes)."""
    if not mines_bm25(recipe_config(job["recipe"], job["sets"])):
        return []
    return ["--set", "data.negatives.source=run", "--set", f"data.negatives.run={carry / NEGATIVES}"]


def run(args: argparse.Namespace) -> None:
    """Every job of the plan; exits 1 when any failed (a call whose jobs all failed must not
    read as a success: only log.tsv holds each stage's exit code)."""
    for flag in ("workers", "threads"):
        if getattr(args, flag) < 1:
            fail(f"--{flag} {getattr(args, flag)}: at least 1")
    check_topics(args.topics)  # every job's evaluate would refuse it, after its training
    carry, out, scratch = Path(args.carry).resolve(), Path(args.out), Path(args.scratch)
    data = carry / "data"
    jobs = parse_plan(carry / "plan.txt", [p.name for p in data.iterdir() if p.is_dir()]
                      if data.is_dir() else [], check_sets=False)
    scratch.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYSERINI_MOE_DATA=str(data), PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    backbone = restore_backbone(carry, scratch / "minilm")
    packer = Packer(out)
    log = open(out / "log.tsv", "a", buffering=1)
    deadline = time.monotonic() + args.budget
    start = time.monotonic()
    # set once a job's training is over (or will not happen): a round-2 job waits on its source's
    trained = {job["name"]: threading.Event() for job in jobs}
    ready: set[str] = set()  # the jobs whose training succeeded in this call

    def stage(cmd: list[str], name: str, what: str) -> bool:
        t = time.monotonic()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        log.write(f"{name}\t{what}\t{time.monotonic() - t:.1f}\t{done.returncode}\t"
                  f"{time.monotonic() - start:.0f}\n")
        if done.returncode:
            tail = (done.stderr or done.stdout)[-1500:]
            log.write("".join(f"# {line}\n" for line in tail.splitlines()))
            print(f"{name} {what} failed:\n{tail}", flush=True)
        return done.returncode == 0

    def one(index: int, job: dict) -> bool | None:
        """A job whose setup raises (its recipe refused with its --set, say) is one failed job
        in log.tsv and the count: the exception would end the pool's results, and with them
        the summary and the exit code."""
        try:
            return job_stages(index, job)
        except Exception as e:  # noqa: BLE001 - any error of one job, never the others'
            log.write(f"{job['name']}\tsetup\t0.0\t1\t{time.monotonic() - start:.0f}\n"
                      f"# {type(e).__name__}: {e}\n")
            print(f"{job['name']} setup failed: {type(e).__name__}: {e}", flush=True)
            return False
        finally:
            trained[job["name"]].set()

    def mined_negatives(job: dict) -> list[str] | None:
        """The --set of a round-2 job's training: its negatives mined with its source's last
        checkpoint once that has trained (None: no model to mine with, or the search failed)."""
        mining, name = job["mining"], job["name"]
        trained[mining["source"]].wait()
        model = scratch / mining["source"] / "last"
        if mining["source"] not in ready:  # a folder of an earlier call is not this training
            log.write(f"{name}\tmine\t0.0\t1\t{time.monotonic() - start:.0f}\n"
                      f"# {mining['source']} has no trained model to mine with\n")
            print(f"{name} mine failed: {mining['source']} did not train", flush=True)
            return None
        data = recipe_config(job["recipe"], job["sets"]).data
        run_file = scratch / f"{name}.negatives.trec"
        cmd = [sys.executable, __file__, "mine", "--checkpoint", str(model),
               "--topics", f"{data.collection}:{data.split}", "--kind", mining["kind"],
               "--depth", str(mining["depth"]), "--doc-length", str(mining["doc_length"]),
               "--query-length", str(mining["query_length"]), "--output", str(run_file)]
        if not stage(cmd, name, "mine"):
            return None
        return ["--set", "data.negatives.source=run", "--set", f"data.negatives.run={run_file}"]

    def job_stages(index: int, job: dict) -> bool | None:
        """True: searched; False: a stage failed; None: not started (budget, nothing to
        evaluate)."""
        if time.monotonic() > deadline:
            return None
        name, model_dir = job["name"], scratch / job["name"]
        if job["recipe"] == "zero-shot":
            checkpoints = [("zeroshot", backbone)]
        elif args.evaluate_only and not (model_dir / "last").is_dir():
            return None
        elif args.evaluate_only:
            checkpoints = trained_checkpoints(model_dir, job)
        else:
            keep = ["--set", "training.keep_snapshots=true"] if job["snapshots"] else []
            negatives = mined_negatives(job) if job["mining"] else negatives_sets(job, carry)
            if negatives is None:
                return False
            cmd = [sys.executable, "-m", "pyserini_moe.train", "--config",
                   str(ROOT / job["recipe"]), "--seed", str(job["seed"]), "--output-dir",
                   str(model_dir), "--overwrite", "--quiet",
                   "--set", f"model.backbone={backbone}", *negatives, *job["sets"], *keep]
            if stage(cmd, name, "train"):
                ready.add(name)
            trained[name].set()  # its round-2 jobs may mine now, while it is searched
            if name not in ready:
                return False
            checkpoints = trained_checkpoints(model_dir, job)
        npz = scratch / f"{name}.npz"  # only the tars go to out: a call returns 8 files
        cmd = [sys.executable, __file__, "evaluate", "--output", str(npz),
               "--dev-topics", str(model_dir / "dev_topics.tsv"),
               *[f"--checkpoint={c}={p}" for c, p in checkpoints],
               *[f"--option={o}" for o in job["options"]], *job["evaluation"],
               "--topics", *(job["topics"] or args.topics)]
        if not stage(cmd, name, "evaluate"):
            return False
        kept = [npz]
        for log_name in JOB_FILES:
            if (model_dir / log_name).is_file():
                kept.append(scratch / f"{name}.{log_name}")
                shutil.copy(model_dir / log_name, kept[-1])
        packer.add(index, kept)
        return True

    with ThreadPoolExecutor(args.workers) as pool:
        results = [f.result() for f in [pool.submit(one, i, job) for i, job in enumerate(jobs)]]
    log.close()
    print(f"all done in {time.monotonic() - start:.0f} s: {results.count(True)} jobs searched, "
          f"{results.count(False)} failed, {results.count(None)} not started", flush=True)
    if False in results:
        fail(f"{results.count(False)} of {len(jobs)} jobs failed (see {out / 'log.tsv'})")


def trained_checkpoints(model_dir: Path, job: dict) -> list[tuple[str, Path]]:
    """``last`` and ``best``, then (``snapshots=yes``) each ``snapshots/step-N`` by step."""
    checkpoints = [("last", model_dir / "last"), ("best", model_dir / "best")]
    if job.get("snapshots"):
        steps = sorted(int(p.name[len("step-"):]) for p in (model_dir / "snapshots").glob("step-*")
                       if p.name[len("step-"):].isdigit() and p.is_dir())
        checkpoints += [(f"step-{n}", model_dir / "snapshots" / f"step-{n}") for n in steps]
    return checkpoints


# ------------------------------------------------------------------------ evaluate (either)

def read_corpus(collection: str) -> tuple[list[str], list[str]]:
    """(ids, texts) of ``collection``: what ``evaluate`` encodes and ``unpack`` maps positions
    back through, read alike on both machines (their digests are compared)."""
    from pyserini_moe.data import open_corpus
    from pyserini_moe.errors import UserError

    try:
        docs = list(open_corpus(collection).corpus())
    except (OSError, UserError) as e:  # not here, a failed download, a bad file
        fail(f"collection {collection}: {e}")
    return [d.id for d in docs], [d.contents for d in docs]


def ids_digest(ids: list[str]) -> str:
    return hashlib.sha1("\n".join(ids).encode()).hexdigest()[:16]


def encode_all(model, texts: list[str], side, max_length: int, batch: int,
               field: str = "dense"):
    """One representation (``dense`` or ``sparse``) of ``texts``, in their order, encoded longest
    first so a batch pads little (padding is masked out: the order changes float sums only in
    the last bits)."""
    return encode_fields(model, texts, side, max_length, batch, (field,))[field]


def encode_fields(model, texts: list[str], side, max_length: int, batch: int,
                  fields: tuple[str, ...]) -> dict:
    """:func:`encode_all` of several representations from one encoding pass; ``multi`` comes
    padded to ``max_length`` tokens with its ``mask`` beside it."""
    import torch
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    only = fields[0] if len(fields) == 1 and len(model.representations) > 1 else None
    kept = (*fields, "mask") if "multi" in fields else fields
    parts: dict[str, list] = {f: [] for f in kept}
    for i in range(0, len(texts), batch):
        out = model.encode([texts[j] for j in order[i:i + batch]], side, max_length, only=only)
        for f in kept:
            value = getattr(out, f).float()
            if f in ("multi", "mask"):  # batches pad to their own longest text
                pad = [0, 0] * (value.dim() - 2) + [0, max_length - value.shape[1]]
                value = torch.nn.functional.pad(value, pad)
            parts[f].append(value)
    result = {}
    for f, chunks in parts.items():
        vectors = torch.cat(chunks)
        result[f] = torch.empty_like(vectors)
        result[f][torch.tensor(order, device=vectors.device)] = vectors
    return result


def quantized(weights, max_terms: int | None = None):
    """Term weights as the impact index stores them: round(w x 100) in float32 as
    ``encode.impact.quantize`` does, zeros dropped, at most ``max_terms`` a row (the heaviest;
    equal weights by vocabulary order), as float64 integers."""
    import torch
    q = torch.round(weights.float() * QUANTIZATION).clamp(min=0).double()
    if max_terms is not None and int((q > 0).sum(dim=1).max()) > max_terms:
        vocab = q.shape[1]
        key = q * vocab + (vocab - 1 - torch.arange(vocab, device=q.device, dtype=q.dtype))
        keep = torch.zeros_like(q, dtype=torch.bool)
        keep.scatter_(1, key.topk(max_terms, dim=1).indices, True)
        q = q * keep
    return q


def search(q, d, qids: list[str], doc_ids: list[str], hits: int, remove_query: bool):
    """Exact inner-product top ``hits`` (+1 when the query's own id is dropped, as ``search
    --remove-query``); returns positions [Q, hits] and scores."""
    return top_hits(q @ d.T, qids, doc_ids, hits, remove_query)


def top_hits(scores, qids: list[str], doc_ids: list[str], hits: int, remove_query: bool,
             index_order: bool = False):
    """The top ``hits`` of a [Q, D] score matrix; ``index_order``: equal scores in corpus order
    (Lucene's, for integer impact scores; the key is exact in float64 below 2**53)."""
    import torch
    k = min(hits + int(remove_query), scores.shape[1])
    if index_order:
        positions = _lucene_order(scores).topk(k, dim=1).indices
        scores = scores.gather(1, positions)
    else:
        scores, positions = torch.topk(scores, k, dim=1)
    scores, positions = scores.cpu().numpy(), positions.cpu().numpy()
    if remove_query:
        where = {doc: i for i, doc in enumerate(doc_ids)}
        keep_s, keep_p = [], []
        for row, qid in enumerate(qids):
            own = where.get(qid, -1)
            mask = positions[row] != own
            keep_p.append(positions[row][mask][:hits])
            keep_s.append(scores[row][mask][:hits])
        positions, scores = np.stack(keep_p), np.stack(keep_s)
    return positions[:, :hits], scores[:, :hits]


def kind_scores(kind: str, q: dict, d: dict, candidates: int = FUSED_CANDIDATES):
    """[Q, D] scores of one run kind from the encoded queries and passages (see KINDS).

    Lucene's impact run is Pyserini's ``LuceneImpactSearcher``'s: it leaves out of every query
    the terms whose idf log(N / df) is not above its ``min_idf`` of 0, i.e. the terms that occur
    in every passage. The fused run re-scores the union of the dense and the Lucene top 1,000
    with exact dot products of the whole quantised vectors (``doc_vectors/``), those terms
    included. ``candidates``: each list's depth for the hybrid (search's ``--candidates``)."""
    import torch
    if kind == "local":
        return maxsim(q, d)
    dense = q["dense"] @ d["dense"].T if kind in ("dense", "hybrid") else None
    if kind == "dense":
        return dense
    queries, passages = quantized(q["sparse"], QUERY_MAX_TERMS), quantized(d["sparse"])
    everywhere = (passages > 0).sum(dim=0) == passages.shape[0]
    lucene = queries.masked_fill(everywhere, 0) @ passages.T
    if kind == "impact":
        return lucene
    k = min(candidates, dense.shape[1])
    union = torch.zeros_like(dense, dtype=torch.bool)
    union.scatter_(1, dense.topk(k, dim=1).indices, True)
    union.scatter_(1, _lucene_order(lucene).topk(k, dim=1).indices, True)
    exact = dense.double() + (queries @ passages.T) / QUANTIZATION ** 2
    return exact.masked_fill(~union, float("-inf"))


def maxsim(q: dict, d: dict, chunk: int = 1024):
    """[Q, D] MaxSim: for each query token the best dot product with any passage token, summed
    over the query's tokens; passages rounded to float16 as the multi-vector index stores them."""
    import torch
    docs, doc_mask = d["multi"].half().float(), d["mask"].bool()
    scores = torch.empty(q["multi"].shape[0], docs.shape[0], device=docs.device)
    for i, (tokens, mask) in enumerate(zip(q["multi"], q["mask"].bool())):
        tokens = tokens[mask]
        for start in range(0, docs.shape[0], chunk):
            sims = torch.einsum("nld,qd->nlq", docs[start:start + chunk], tokens)
            sims = sims.masked_fill(~doc_mask[start:start + chunk, :, None], float("-inf"))
            scores[i, start:start + chunk] = sims.max(dim=1).values.sum(dim=1)
    return scores


def came_run(scores_of, qids: list[str], doc_ids: list[str], hits: int, remove_query: bool):
    """CAME's fused run as ``search --retriever fused --fusion came_sum`` writes it: each
    expert's top 1,000 in model units (the impact index's integers divided by the squared
    quantisation), summed by the package's own ``came_sum``; (positions, scores) as top_hits.
    ``scores_of(kind)``: that expert's [Q, D] scores (see ``kind_scores``), computed once for
    the expert's own run and this one."""
    from pyserini_moe.runs import ranked
    from pyserini_moe.search import came_sum

    runs = []
    for kind, scale in (("impact", QUANTIZATION ** -2), ("local", 1.0), ("dense", 1.0)):
        positions, scores = top_hits(scores_of(kind), qids, doc_ids, FUSED_CANDIDATES,
                                     remove_query, index_order=kind == "impact")
        runs.append({qid: {doc_ids[p]: float(x) * scale for p, x in zip(positions[r], scores[r])}
                     for r, qid in enumerate(qids)})
    fused = came_sum(runs, k=hits)
    where = {doc: i for i, doc in enumerate(doc_ids)}
    order = [ranked(fused[qid])[:hits] for qid in qids]
    return (np.array([[where[doc] for doc, _ in row] for row in order]),
            np.array([[score for _, score in row] for row in order]))


def _lucene_order(scores):
    """Integer scores made unique by corpus order (equal scores: the earlier passage first)."""
    import torch
    n = scores.shape[1]
    return scores.double() * n + (n - 1 - torch.arange(n, device=scores.device,
                                                       dtype=torch.float64))


def evaluate(args: argparse.Namespace) -> None:
    import torch

    from pyserini_moe.data import load_topics
    from pyserini_moe.modeling import Side

    checkpoints, options = check_evaluate(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    kinds = args.kinds.split(",")
    fields = tuple(dict.fromkeys(f for kind in kinds for f in FIELDS[kind]))
    has_dev = dev_topics_given(args)
    dev = dev_collection(args.dev_topics) if has_dev else None
    if not any(searched(args.topics, name, option, has_dev)
               for name, _ in checkpoints for option in [None, *options]):
        fail(f"--topics {' '.join(args.topics)}: nothing to search for --checkpoint "
             f"{' '.join(n for n, _ in checkpoints)} (the zero-shot collections are searched "
             "for last or zeroshot only, dev with a --dev-topics file)")
    for _, spec in checkpoints:  # a refused option is one line before any encoding
        for option in options:
            load_checked(spec, "cpu", option)
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"topics": {}, "digests": {}}
    corpora: dict[str, tuple[list[str], list[str]]] = {}
    for name, spec in checkpoints:
        for option in [None, *options]:
            model = load_checked(spec, device, option)
            label = f"{name}+{option[0]}-{option[1]}" if option else name
            check_fields(model, spec, fields, args.kinds)
            model.eval()
            vectors: dict[str, dict] = {}
            for topics in searched(args.topics, name, option, has_dev):
                collection, hits, remove_query, keep_scores = topics_settings(topics, dev)
                if collection not in corpora:
                    corpora[collection] = read_corpus(collection)
                    meta["digests"][collection] = ids_digest(corpora[collection][0])
                doc_ids, texts = corpora[collection]
                if collection not in vectors:
                    vectors[collection] = encode_fields(model, texts, Side.PASSAGE,
                                                        args.doc_length, args.batch, fields)
                queries = load_topics(args.dev_topics if topics == "dev" else topics)
                qids = list(queries)
                q = encode_fields(model, [queries[i] for i in qids], Side.QUERY,
                                  LONG_QUERY_TOPICS.get(topics, args.query_length), args.batch,
                                  fields)
                for kind, (positions, scores) in kind_runs(kinds, q, vectors[collection], qids,
                                                           doc_ids, hits, remove_query):
                    key = run_key(label if kind == "dense" else f"{label}+{kind}", topics)
                    dtype = np.int16 if len(doc_ids) < 2**15 else np.int32
                    arrays[key + ".pos"] = positions.astype(dtype)
                    if keep_scores:
                        arrays[key + ".score"] = scores.astype(np.float32)
                    meta["topics"][key] = {"qids": qids, "collection": collection}
            del model
            if device == "cuda":
                torch.cuda.empty_cache()
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    tmp = Path(str(args.output) + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, args.output)
    runs, names = len(meta["topics"]), ", ".join(n for n, _ in checkpoints)
    also = f", each also with --option {' '.join('='.join(o) for o in options)}" if options else ""
    print(f"{args.output}: {runs} run{'s' * (runs != 1)} written, of {len(checkpoints)} "
          f"checkpoint{'s' * (len(checkpoints) != 1)} ({names}{also})", flush=True)


def check_evaluate(args: argparse.Namespace) -> tuple[list[tuple[str, str]],
                                                      list[tuple[str, str]]]:
    """(checkpoints, options) as (NAME, FOLDER) and (KEY, VALUE), every flag checked before a
    model is loaded: a missing --output folder was found only when the npz was written, after
    all the encoding and search."""
    check_output_and_counts(args, ("batch", "doc_length", "query_length"), "the npz file")
    if not set(args.kinds.split(",")) <= set(KINDS):
        fail(f"--kinds {args.kinds}: choose from {','.join(KINDS)}")
    check_topics(args.topics)
    checkpoints = [parse_checkpoint(c) for c in args.checkpoint]
    names = [name for name, _ in checkpoints]
    for name in names:
        if names.count(name) > 1:  # the second's runs would replace the first's
            fail(f"--checkpoint {name}= is given twice: give each NAME once")
    return checkpoints, parse_options(args.option)


def check_output_and_counts(args: argparse.Namespace, counts: tuple[str, ...], what: str) -> None:
    """--output names ``what`` to write in an existing folder, and each of ``counts`` is at
    least 1: said before a model is loaded, not after the encoding and search."""
    output = Path(args.output)
    if output.is_dir():
        fail(f"--output {output} is a folder: name {what} to write")
    if not output.parent.is_dir():
        fail(f"--output {output}: its folder {output.parent} does not exist")
    for flag in counts:
        if getattr(args, flag) < 1:
            fail(f"--{flag.replace('_', '-')} {getattr(args, flag)}: at least 1")


def check_topics(topics: list[str]) -> None:
    """A --topics spec given twice would be searched once, its runs written once: refused, as a
    --checkpoint NAME given twice is."""
    for spec in topics:
        if topics.count(spec) > 1:
            fail(f"--topics {spec} is given twice: give each spec once")


def parse_checkpoint(checkpoint: str) -> tuple[str, str]:
    """NAME=FOLDER of a saved model (its metadata file) or a backbone (its config.json). An
    empty FOLDER is refused: ``Path("")`` is the current folder, which exists."""
    from pyserini_moe.modeling import is_saved_model

    name, _, folder = checkpoint.partition("=")
    if not is_job_name(name) or not folder:
        fail(f"--checkpoint {checkpoint}: expected NAME=FOLDER of a saved model or backbone "
             "(NAME: letters, digits, '.', '_', '-')")
    if not Path(folder).is_dir():
        fail(f"--checkpoint {checkpoint}: {folder} is not a folder")
    if not is_saved_model(folder) and not (Path(folder) / "config.json").is_file():
        fail(f"--checkpoint {checkpoint}: {folder} is neither a saved model nor a backbone "
             "(no model metadata, no config.json)")
    return name, folder


def parse_options(options: list[str]) -> list[tuple[str, str]]:
    """``--option KEY=VALUE`` pairs; one given twice would write its runs twice under one name."""
    pairs = []
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            fail(f"--option {option}: expected KEY=VALUE, an encode-time option (e.g. "
                 "inference=all)")
        if (key, value) in pairs:
            fail(f"--option {option} is given twice: give it once")
        pairs.append((key, value))
    return pairs


def load_checked(spec: str, device: str, option: tuple[str, str] | None = None):
    """The model of ``spec`` with ``option`` set; a folder it cannot load or an option the
    model refuses is one error line, not a traceback."""
    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import load_encoder

    try:
        model = load_encoder(spec, device=device)
        if option:
            model.configure(**{option[0]: option[1]})
    except (UserError, OSError) as e:
        fail(f"--checkpoint {spec}{' --option ' + '='.join(option) if option else ''}: {e}")
    return model


def check_fields(model, spec: str, fields: tuple[str, ...], kinds: str) -> None:
    """The representations the runs of ``kinds`` need are ones ``model`` produces."""
    missing = [f for f in fields if f not in model.representations]
    if missing:
        fail(f"--kinds {kinds} needs {', '.join(missing)}, which the model {spec} does not "
             f"produce (its representations: {', '.join(model.representations)})")


def dev_topics_given(args: argparse.Namespace) -> bool:
    """Whether ``dev`` is searched: asked for, and its file there. Said on stderr where it is
    asked for without one (run passes every job's path; a zero-shot job has none)."""
    if "dev" not in args.topics:
        return False
    if not Path(args.dev_topics).is_file():
        print(f"note: --topics dev is not searched: no dev topics file "
              f"({args.dev_topics or 'no --dev-topics given'})", file=sys.stderr)
        return False
    return True


def searched(topics: list[str], name: str, option: tuple[str, str] | None,
             has_dev: bool) -> list[str]:
    """The topics searched for one checkpoint and option: the zero-shot collections for the
    last checkpoint only, without extra encodings; dev only with its file."""
    return [t for t in topics if (t not in LAST_ONLY or (name in ("last", "zeroshot")
                                                         and not option))
            and (t != "dev" or has_dev)]


def kind_runs(kinds: list[str], q: dict, d: dict, qids: list[str], doc_ids: list[str],
              hits: int, remove_query: bool):
    """(kind, (positions, scores)) of each run kind; each kind's [Q, D] scores computed once,
    for its own run and for CAME's fused one."""
    computed: dict = {}

    def scores_of(kind: str):
        if kind not in computed:
            computed[kind] = kind_scores(kind, q, d)
        return computed[kind]

    for kind in kinds:
        if kind == "came":
            yield kind, came_run(scores_of, qids, doc_ids, hits, remove_query)
        else:
            yield kind, top_hits(scores_of(kind), qids, doc_ids, hits, remove_query,
                                 index_order=kind == "impact")


def dev_collection(dev_topics: str) -> str:
    """The collection the recipe's held-out queries come from: ``data.collection`` of the
    ``recipe.yaml`` the trainer wrote beside ``dev_topics.tsv`` (its --set overrides applied).
    Searched in any other corpus (SciFact's, say) they would give runs of nonsense."""
    from pyserini_moe.train import load_config

    recipe = Path(dev_topics).parent / "recipe.yaml"
    try:
        return load_config(recipe).data.collection
    except (OSError, ValueError) as e:  # ConfigError is a ValueError
        fail(f"--dev-topics {dev_topics}: dev is searched in the collection of the training's "
             f"recipe.yaml beside it: {e}")


def mine(args: argparse.Namespace) -> None:
    """One model's ``--kind`` run of the ``--topics`` queries, ``--depth`` hits each, as a TREC
    file (real scores): the negatives pool of a round-2 training, mined as the regressions mine
    it here (``search --hits DEPTH``; the hybrid over the union of both top-DEPTH lists,
    ``--candidates DEPTH``; impact with Lucene's dropped terms and ties)."""
    import torch

    from pyserini_moe.data import load_topics
    from pyserini_moe.errors import UserError
    from pyserini_moe.modeling import Side

    check_output_and_counts(args, ("depth", "batch", "doc_length", "query_length"), "the run")
    output = Path(args.output)
    _, folder = parse_checkpoint(f"mined={args.checkpoint}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = load_checked(folder, device)
    check_fields(model, folder, FIELDS[args.kind], args.kind)
    model.eval()
    try:
        queries = load_topics(args.topics)
    except (OSError, UserError) as e:
        fail(f"--topics {args.topics}: {e}")
    doc_ids, texts = read_corpus(args.topics.rsplit(":", 1)[0])
    qids = list(queries)
    d = encode_fields(model, texts, Side.PASSAGE, args.doc_length, args.batch, FIELDS[args.kind])
    q = encode_fields(model, [queries[i] for i in qids], Side.QUERY, args.query_length,
                      args.batch, FIELDS[args.kind])
    positions, scores = top_hits(kind_scores(args.kind, q, d, candidates=args.depth), qids,
                                 doc_ids, args.depth, False, index_order=args.kind == "impact")
    tmp = output.with_name(output.name + ".tmp")
    write_run(tmp, qids, positions, scores, doc_ids, f"mined-{args.kind}")
    os.replace(tmp, output)
    print(f"{output}: {len(qids)} queries x {positions.shape[1]} hits ({args.kind})", flush=True)


# ----------------------------------------------------------------------------- unpack (here)

def unpack(args: argparse.Namespace) -> None:
    """The tars' runs as TREC files. Every member is read and checked before any file is
    written, and a run file already in --output is replaced only with --overwrite (it may be the
    user's own): a refused call writes nothing."""
    out = Path(args.output)
    check_output_folder(out)
    runs: dict[Path, tuple] = {}  # file -> (job, qids, positions, scores, collection, digest)
    files: dict[Path, bytes] = {}  # a job's JOB_FILES, as they came
    for tar_path in args.tars:
        if not Path(tar_path).is_file() or not tarfile.is_tarfile(tar_path):
            fail(f"{tar_path} is not a tar file (run's runs-<k>.tar)")
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                if member.name.endswith(JOB_FILES) and member.isfile() \
                        and plain_name(member.name):
                    files[out / member.name] = tar.extractfile(member).read()
                if not member.name.endswith(".npz"):
                    continue
                arrays, meta = read_job(tar_path, tar, member)
                job = member.name[:-len(".npz")]
                for key, info in meta["topics"].items():
                    path = out / f"{job}.{key}.trec"
                    if path in runs:
                        fail(f"{tar_path}: {path.name} comes twice: unpack each job once")
                    runs[path] = (job, info["qids"], arrays[key + ".pos"],
                                  arrays.get(key + ".score"), info["collection"],
                                  meta["digests"][info["collection"]])
    if not runs:
        fail(f"no runs in {', '.join(args.tars)}: not the tars of a run call")
    folders = [path for path in [*runs, *files] if path.exists() and not path.is_file()]
    if folders:  # with --overwrite it failed midway, the runs before it written
        fail(f"{folders[0]} is a folder, not a run file: move it (nothing was written)")
    there = [path for path in [*runs, *files] if path.exists()]
    if there and not args.overwrite:
        fail(f"{there[0]} exists ({len(there)} of the {len(runs) + len(files)} files do): "
             "--overwrite replaces them")
    ids: dict[str, list[str]] = {}
    for path, (_, qids, positions, _, collection, digest) in runs.items():
        if collection not in ids:
            ids[collection] = read_corpus(collection)[0]
        if ids_digest(ids[collection]) != digest:
            fail(f"{collection}: the corpus here differs from the device's")
        if (positions.ndim != 2 or len(positions) != len(qids)
                or ((positions < 0) | (positions >= len(ids[collection]))).any()):
            fail(f"{path.name}: its positions do not fit {collection}'s queries and corpus")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"--output {out}: {e}")
    for path, (job, qids, positions, scores, collection, _) in runs.items():
        write_run(path, qids, positions, scores, ids[collection], job)
    for path, data in files.items():
        path.write_bytes(data)
    also = f" and {len(files)} training files ({', '.join(JOB_FILES)})" if files else ""
    print(f"{len(runs)} runs{also} in {out}")


def check_output_folder(out: Path) -> None:
    """--output, or a folder above it, being a file (or a broken link) is one line before any
    tar is read: mkdir raised NotADirectoryError."""
    for folder in (out, *out.parents):
        if folder.is_symlink() and not folder.exists():
            fail(f"--output {out}: {folder} is a broken link")
        if folder.exists() and not folder.is_dir():
            fail(f"--output {out}: {folder} is a file, not a folder")


def read_job(tar_path: str, tar: tarfile.TarFile, member: tarfile.TarInfo) -> tuple[dict, dict]:
    """One job's arrays and meta, checked whole: a foreign, truncated or crafted member (a name
    that climbs out of --output) is one error line, not a traceback or a file elsewhere."""
    if not member.isfile() or not plain_name(member.name):
        fail(f"{tar_path}: member {member.name!r} is not a plain file name: not a run's tar")
    try:
        with np.load(io.BytesIO(tar.extractfile(member).read())) as data:
            arrays = {name: data[name] for name in data.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode())
        for key, info in meta["topics"].items():
            if not plain_name(key):
                raise ValueError(f"run name {key!r} is not a plain file name")
            # each run's positions, queries and corpus digest are there (a KeyError if not)
            arrays[key + ".pos"], info["qids"], meta["digests"][info["collection"]]
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError,
            zipfile.BadZipFile) as e:
        fail(f"{tar_path}: {member.name} is not a job's runs ({type(e).__name__}: {e})")
    return arrays, meta


def write_run(path: Path, qids: list[str], positions: np.ndarray, scores: np.ndarray | None,
              doc_ids: list[str], tag: str) -> None:
    lines = []
    for row, qid in enumerate(qids):
        for rank, pos in enumerate(positions[row], start=1):
            score = float(scores[row][rank - 1]) if scores is not None else len(positions[row]) - rank + 1
            lines.append(f"{qid} Q0 {doc_ids[int(pos)]} {rank} {score:.6f} {tag}\n")
    path.write_text("".join(lines))


# ----------------------------------------------------------------------------- curve (here)

def curve(args: argparse.Namespace) -> None:
    """A ``snapshots=yes`` job's test (and dev) metric at every snapshot, with its validation
    loss, from the files ``unpack`` wrote: a Markdown table and (``--plot``) a PNG of the metric
    against the step. Issue 35's diagnosis of checkpoint selection: no rule looks at test."""
    from pyserini_moe.data import load_qrels
    from pyserini_moe.eval import evaluate, format_table
    from pyserini_moe.lab.checkpoints import DEV, Snapshot, log_validation_losses, plot
    from pyserini_moe.runs import read_trec_run

    runs, job = Path(args.runs), args.job
    suffix = "" if args.kind == "dense" else f"+{args.kind}"
    topics = run_key("", args.test)[1:]
    pattern = re.compile(rf"{re.escape(job)}\.step-([0-9]+){re.escape(suffix)}\."
                         rf"{re.escape(topics)}\.trec")
    steps = {int(m[1]): path for path in runs.glob(f"{glob.escape(job)}.step-*")
             if (m := pattern.fullmatch(path.name))}
    if not steps:
        fail(f"{runs}: no {job}.step-N{suffix}.{topics}.trec runs: unpack the tars of a run "
             "whose plan gave this job snapshots=yes")
    log = runs / f"{job}.train_log.jsonl"
    losses = log_validation_losses(log) if log.is_file() else {}
    dev_qrels = runs / f"{job}.dev_qrels.txt"
    test_qrels = load_qrels(args.test)
    snapshots = []
    for step in sorted(steps):
        metrics = {args.test: evaluate(read_trec_run(steps[step]), test_qrels, [args.metric])}
        dev_run = runs / f"{job}.step-{step}{suffix}.dev.trec"
        if dev_qrels.is_file() and dev_run.is_file():
            metrics[DEV] = evaluate(read_trec_run(dev_run), load_qrels(str(dev_qrels)),
                                    [args.metric])
        snapshots.append(Snapshot(step, losses.get(step), metrics))
    rows = [[str(s.step), f"{s.val_loss:.4f}" if s.val_loss is not None else "-",
             f"{s.metrics[DEV][args.metric]:.4f}" if DEV in s.metrics else "-",
             f"{s.metrics[args.test][args.metric]:.4f}"] for s in snapshots]
    table = format_table(["step", "validation loss", f"dev {args.metric}",
                          f"{args.test} {args.metric} (diagnosis)"], rows, "markdown")
    title = args.title or f"{job}{suffix}: {args.metric} against the training step"
    text = f"### {title}\n\n{table}\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    if args.plot:
        plot(snapshots, args.test, args.metric, args.metric, title, args.plot)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="build the carry folder here")
    p.add_argument("--carry", default=".gpu")
    p.add_argument("--plan", required=True)
    p.add_argument("--negatives", default=None,
                   help="BM25 run of the training queries (default: mined here as the "
                        "protocol recipes mine it, BM25 top 50 of SciFact train)")
    p.add_argument("--collections", nargs="+",
                   default=["scifact", "arguana", "cranfield", "cisi", "vaswani"])
    p = sub.add_parser("run", help="train and search every job (device)")
    p.add_argument("--carry", default=".gpu")
    p.add_argument("--out", required=True)
    p.add_argument("--scratch", default="/tmp/gpu-seeds")
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--threads", type=int, default=2, help="OMP threads a job")
    p.add_argument("--budget", type=float, default=480, help="start no job after this many s")
    p.add_argument("--topics", nargs="+", default=list(TOPICS))
    p.add_argument("--evaluate-only", action="store_true",
                   help="search the models a stopped run left in --scratch; train nothing")
    p = sub.add_parser("evaluate", help="search one model's checkpoints (device or CPU)")
    p.add_argument("--checkpoint", action="append", required=True, help="NAME=FOLDER")
    p.add_argument("--option", action="append", default=[], help="extra encoding KEY=VALUE")
    p.add_argument("--dev-topics", default="")
    p.add_argument("--topics", nargs="+", default=list(TOPICS))
    p.add_argument("--output", required=True)
    p.add_argument("--device", default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--doc-length", type=int, default=DOC_LENGTH, help="passage tokens (index's)")
    p.add_argument("--query-length", type=int, default=QUERY_LENGTH,
                   help="query tokens (search's)")
    p.add_argument("--kinds", default="dense", help=f"runs to write: {','.join(KINDS)}")
    p = sub.add_parser("mine", help="a round-2 job's negatives: one model's run on the training "
                                    "queries as a TREC file (device or CPU)")
    p.add_argument("--checkpoint", required=True, help="the trained model's folder")
    p.add_argument("--topics", required=True, help="the training queries, e.g. scifact:train")
    p.add_argument("--kind", default="dense", choices=MINE_KINDS)
    p.add_argument("--depth", type=int, default=100, help="hits a query (and the hybrid's "
                                                           "candidates a list)")
    p.add_argument("--output", required=True)
    p.add_argument("--device", default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--doc-length", type=int, default=DOC_LENGTH, help="passage tokens")
    p.add_argument("--query-length", type=int, default=QUERY_LENGTH, help="query tokens")
    p = sub.add_parser("unpack", help="tars -> TREC runs (here)")
    p.add_argument("tars", nargs="+")
    p.add_argument("--output", default="work/gpu/runs")
    p.add_argument("--overwrite", action="store_true",
                   help="replace run files already in --output")
    p = sub.add_parser("curve", help="a snapshots=yes job's metric against the step (here)")
    p.add_argument("--runs", default="work/gpu/runs", help="unpack's --output")
    p.add_argument("--job", required=True, help="NAME-sSEED, e.g. mote-s42")
    p.add_argument("--kind", default="dense", choices=KINDS)
    p.add_argument("--test", default="scifact:test", help="test topics and qrels")
    p.add_argument("--metric", default="ndcg@10")
    p.add_argument("--title", default=None)
    p.add_argument("--output", default=None, help="also write the Markdown table here")
    p.add_argument("--plot", default=None, help="PNG of the metrics against the step")
    args = parser.parse_args()
    {"prepare": prepare, "run": run, "evaluate": evaluate, "mine": mine, "unpack": unpack,
     "curve": curve}[args.command](args)


if __name__ == "__main__":
    main()
