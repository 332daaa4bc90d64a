"""The training-side stages of the paper files, each run once on the synthetic MS MARCO and
measured (:mod:`.measure`), at full size where the stage is about data and on a stated sample
where it is about compute; a sample's figures are projected to the full run.

Each stage writes ``<root>/results/<stage>.json`` when it succeeds; a later sitting skips the
stages already measured (``--redo`` runs them again), so the stages can be spread over sittings
in any order their inputs allow (:attr:`Stage.needs`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.data import BeirCollection
from pyserini_moe.io import atomic_path
from pyserini_moe.lab.regress import REPO_ROOT, expand, load_regression
from pyserini_moe.lab.scale.measure import Measurement, run_measured
from pyserini_moe.lab.scale.synth import (
    DPR,
    MSMARCO,
    PSEUDO_QUERIES_PER_PASSAGE,
    Shape,
    write_pseudo_queries,
)
from pyserini_moe.lab.smoke import put, put_setting, smoke_argv, tiny_backbone
from pyserini_moe.search import SEARCH_PART
from pyserini_moe.train import bm25_index_dir, load_config

# Training queries searched to project a mining search to all of them: one part of the search
# command, which holds one part's run at a time, so the sample's peak memory is the full run's.
MINING_SAMPLE = SEARCH_PART
# Corpus slices (passages) the fused round-2 mining is measured on: a line through both is
# projected to the whole corpus.
FUSED_SLICES = (5_000, 20_000)
TRAIN_STEPS = 2
# Corpus slices the compressed multi-vector build is measured on, up to 1M passages.
MULTIVECTOR_SLICES = (250_000, 1_000_000)
# Terms an impact passage keeps in the scale check. The tiny model's lexical head, two steps
# from random, weighs nearly every term of its vocabulary in every passage (5,000 passages took
# over 14 min to index); a trained sparse head keeps a few hundred a passage, the size its
# postings and the projection stand for.
IMPACT_TERMS = 256
SHARDS = 2  # shards of each round-1 index in the sharded-encoding stage
# psgs_w100.tsv rows the DPR data stages are measured on: a line through both is projected to
# DPR's 21M passages (the retriever files are written at full size; their passages all lie in the
# smaller slice, so both slices hold every judged passage).
DPR_SLICES = (1_000_000, 5_000_000)
# The paper files' first MS MARCO training of each model, as (file, the step's recipe); the
# taser file trains on DPR's Wikipedia (the dpr- stages).
TRAININGS = {"came": ("came-paper.yaml", "came-bert-base.yaml"),
             "cotmote": ("cotmote-paper.yaml", "cotmote-bert-base.yaml"),
             "sbmoe": ("sbmoe-paper.yaml", "sbmoe-bert-base.yaml")}


@dataclasses.dataclass
class Context:
    """Where a scale check runs and at what size."""

    root: Path  # scratch: the collection, indexes, runs, logs, results
    fraction: float = 1.0
    threads: int = 2

    @property
    def shape(self) -> Shape:
        return MSMARCO.scaled(self.fraction)

    @property
    def collection(self) -> Path:
        return self.root / "msmarco"

    @property
    def sample_topics(self) -> Path:
        """The mining sample's queries, named by their count (a sample of another size is
        another file)."""
        return self.root / "runs" / f"mining-sample-{MINING_SAMPLE}.tsv"

    @property
    def sample_run(self) -> Path:
        return self.root / "runs" / "bm25-sample.trec"

    @property
    def bm25_index(self) -> Path:
        """Where the trainer looks for its cached BM25 index of the collection: in the stages'
        cache (their $PYSERINI_MOE_CACHE), not this process's."""
        name = bm25_index_dir(BeirCollection.load(self.collection)).name
        return self.root / "cache" / "bm25-indexes" / name

    def env(self) -> dict[str, str]:
        """The stages' environment: the synthetic data as $BEIR_DIR, caches and temporary files
        under the root (so their disk is measured), one thread per library."""
        return {**os.environ, "BEIR_DIR": str(self.root), "TMPDIR": str(self.root / "tmp"),
                "PYSERINI_MOE_CACHE": str(self.root / "cache"), "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false"}

    def run(self, name: str, argv: list[str], watch: list[Path]) -> Measurement:
        """Run one command of a stage, its output in ``logs/<name>.log``; a failure raises."""
        for folder in ("tmp", "logs", "runs"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{name}.log"
        measured = run_measured(argv, watch=[*watch, self.root / "tmp"], env=self.env(), log=log)
        if measured.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"stage {name} failed (exit {measured.returncode}): "
                               f"{tail[0] if tail else ''} (log: {log})")
        return measured


@dataclasses.dataclass(frozen=True)
class Stage:
    """One measured stage: its name, what it runs, at what scope, and the stages it reads."""

    name: str
    what: str
    scope: str
    run: Callable[[Context], dict[str, Any]]
    needs: tuple[str, ...] = ()


def _figures(m: Measurement, scale: float = 1.0, memory_from: Measurement | None = None,
             memory_scale: float = 1.0) -> dict[str, Any]:
    """A measurement and its projection to the full run: time and disk times ``scale`` (a
    sample's share of the work), memory as measured, or, with ``memory_from`` (the same stage
    without the sampled part), its base plus the sampled part times ``memory_scale``."""
    memory = m.peak_memory
    if memory_from is not None:
        memory = memory_from.peak_memory + max(0, m.peak_memory - memory_from.peak_memory) \
            * memory_scale
    return {"seconds": round(m.seconds, 1), "cpu_seconds": round(m.cpu_seconds, 1),
            "peak_memory": m.peak_memory,
            "peak_disk": m.peak_disk, "projected_seconds": round(m.seconds * scale, 1),
            "projected_memory": int(memory), "projected_disk": int(m.peak_disk * scale)}


Points = list[tuple[int, Measurement]]


def _line(points: Points, full: int, value: Callable[[Measurement], float]) -> float:
    """``value`` at ``full`` on the line through two measured points (size, measurement)."""
    (n1, m1), (n2, m2) = points
    return value(m1) + (value(m2) - value(m1)) / (n2 - n1) * (full - n1)


def _line_figures(points: Points, full: int, unit: str) -> dict[str, Any]:
    """The larger point's figures, each projected to ``full`` by the line through both points,
    and the points themselves (their size under ``unit``)."""
    m = points[-1][1]
    return {"seconds": round(m.seconds, 1), "cpu_seconds": round(m.cpu_seconds, 1),
            "peak_memory": m.peak_memory,
            "peak_disk": m.peak_disk,
            "projected_seconds": round(_line(points, full, lambda x: x.seconds), 1),
            "projected_memory": int(_line(points, full, lambda x: x.peak_memory)),
            "projected_disk": int(_line(points, full, lambda x: x.peak_disk)),
            "points": [{unit: n, "seconds": round(x.seconds, 1), "peak_memory": x.peak_memory,
                        "peak_disk": x.peak_disk} for n, x in points]}


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


# ------------------------------------------------------------------------------------- stages
def generate(ctx: Context) -> dict[str, Any]:
    m = ctx.run("generate", _python("pyserini_moe.lab.scale.synth", "--root", str(ctx.root),
                                    "--fraction", str(ctx.fraction), "--quiet"),
                [ctx.collection])
    return _figures(m, 1 / ctx.fraction)


def bm25_index(ctx: Context) -> dict[str, Any]:
    """bm25-paper.yaml's MS MARCO index, built where the trainer's mining looks for it."""
    m = ctx.run("bm25-index", _python("pyserini_moe.index", "--retriever", "bm25", "--corpus",
                                      str(ctx.collection), "--index", str(ctx.bm25_index),
                                      "--threads", str(ctx.threads), "--overwrite", "--quiet"),
                [ctx.root / "cache"])
    return _figures(m, 1 / ctx.fraction)


def _sample_topics(ctx: Context) -> tuple[Path, int]:
    """:data:`MINING_SAMPLE` training queries, evenly spread, as a topics file (written once);
    and how many training queries there are."""
    collection = BeirCollection.load(ctx.collection)
    train = sorted(collection.qrels("train"), key=int)
    if not ctx.sample_topics.is_file():
        step = max(1, len(train) // MINING_SAMPLE)
        sample = train[::step][:MINING_SAMPLE]
        queries = collection.queries()
        ctx.sample_topics.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(ctx.sample_topics) as tmp:
            tmp.write_text("".join(f"{q}\t{queries[q]}\n" for q in sample), encoding="utf-8")
    return ctx.sample_topics, len(train)


def bm25_mining(ctx: Context) -> dict[str, Any]:
    """CAME's round-1 negatives: BM25's top 1000 of a sample of training queries; time and run
    size projected to every training query."""
    topics, train = _sample_topics(ctx)
    m = ctx.run("bm25-mining", _python(
        "pyserini_moe.search", "--retriever", "bm25", "--index", str(ctx.bm25_index),
        "--topics", str(topics), "--hits", "1000", "--threads", str(ctx.threads),
        "--output", str(ctx.sample_run), "--quiet"), [ctx.root / "runs"])
    sampled = sum(1 for _ in topics.open(encoding="utf-8"))
    return {**_figures(m, train / sampled), "queries": sampled, "all_queries": train}


def _corpus_slice(ctx: Context, passages: int) -> Path:
    """The first ``passages`` of the synthetic corpus as a collection of its own (written once;
    the queries file beside it, as a BEIR folder has)."""
    folder = ctx.root / "work" / f"slice-{passages}"
    if not (folder / "corpus.jsonl").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ctx.collection / "queries.jsonl", folder / "queries.jsonl")
        with open(ctx.collection / "corpus.jsonl", encoding="utf-8") as src, \
                atomic_path(folder / "corpus.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as out:
            out.writelines(itertools.islice(src, passages))
    return folder


def _slice_outputs(folder: Path) -> Path:
    """Where a corpus slice's indexes and run go: beside it (an index inside the collection it
    reads is refused)."""
    return folder.with_name(f"{folder.name}-indexes")


def _fused_mining_steps(ctx: Context, folder: Path, topics: Path) -> list[tuple[str, list[str]]]:
    """came-paper.yaml's round-1 index steps and the fused search of its round-2 negatives, as
    the file runs them, on the corpus slice in ``folder``: the model is the train-came stage's
    (the tiny BERT with CAME's heads), the topics the mining sample, the threads this machine's."""
    reg = load_regression(REPO_ROOT / "regressions" / TRAININGS["came"][0])
    indexes, outputs = str(ctx.root / "work" / "indexes"), _slice_outputs(folder)
    steps = []
    for step in reg.steps:
        if "/indexes/came-r1." not in step:
            continue
        argv = [a.replace(str(ctx.collection), str(folder)).replace(indexes, str(outputs))
                for a in _expanded(ctx, shlex.split(step))]
        put(argv, "--threads", str(ctx.threads), add=False)
        if "impact" in argv:
            put(argv, "--doc-max-terms", str(IMPACT_TERMS))
        if "pyserini_moe.search" in argv:
            put(argv, "--topics", str(topics))
            put(argv, "--output", str(outputs / "union.trec"))
            steps.append(("search", argv))
        else:
            steps.append((argv[argv.index("--retriever") + 1], argv))
    return steps


def fused_mining(ctx: Context) -> dict[str, Any]:
    """CAME's round-2 mining (came-paper.yaml): the three expert indexes of round 1's model
    (impact, IVF-PQ multi-vector, dense) and their fused search (came_sum, the union of each
    expert's top 200) for one part of training queries, on two corpus slices. Each command's
    time, memory and disk are projected to the whole corpus by a line through the two slices;
    the search's time then times the parts of every training query."""
    topics, train = _sample_topics(ctx)
    sampled = sum(1 for _ in topics.open(encoding="utf-8"))
    points: dict[str, Points] = {}
    for passages in FUSED_SLICES:
        folder = _corpus_slice(ctx, passages)
        for name, argv in _fused_mining_steps(ctx, folder, topics):
            m = ctx.run(f"fused-mining-{name}-{passages}", argv, [_slice_outputs(folder)])
            points.setdefault(name, []).append((passages, m))
    commands = {name: _line_figures(ms, ctx.shape.passages, "passages")
                for name, ms in points.items()}
    search = commands["search"]
    search["projected_seconds"] = round(search["projected_seconds"] * math.ceil(train / sampled), 1)
    return {**_commands_figures(points, commands), "queries": sampled, "all_queries": train,
            "commands": commands}


def _commands_figures(points: dict[str, Points], commands: dict[str, dict[str, Any]]
                      ) -> dict[str, Any]:
    """A stage of several commands run one after the other: their times added, the largest
    memory and disk, as measured on the larger slice and as projected."""
    largest = [ms[-1][1] for ms in points.values()]
    return {"seconds": round(sum(m.seconds for m in largest), 1),
            "cpu_seconds": round(sum(m.cpu_seconds for m in largest), 1),
            "peak_memory": max(m.peak_memory for m in largest),
            "peak_disk": max(m.peak_disk for m in largest),
            "projected_seconds": round(sum(c["projected_seconds"] for c in commands.values()), 1),
            "projected_memory": max(c["projected_memory"] for c in commands.values()),
            "projected_disk": max(c["projected_disk"] for c in commands.values())}


def multivector_build(ctx: Context) -> dict[str, Any]:
    """came-paper.yaml's round-1 multi-vector index (IVF-PQ, its streaming build with bounded
    scratch) on corpus slices up to 1M passages, train-came's model; a line through the two
    projected to the whole corpus."""
    topics, _ = _sample_topics(ctx)
    points = []
    for passages in MULTIVECTOR_SLICES:
        folder = _corpus_slice(ctx, passages)
        argv = next(a for kind, a in _fused_mining_steps(ctx, folder, topics)
                    if kind == "multivector")
        points.append((passages, ctx.run(f"multivector-build-{passages}", argv,
                                         [_slice_outputs(folder)])))
    return _line_figures(points, ctx.shape.passages, "passages")


def sharded_encoding(ctx: Context) -> dict[str, Any]:
    """came-paper.yaml's three round-1 index commands run as :data:`SHARDS` shards
    (``--shard-id``/``--shard-num``, one process each, as GPUs would run them) and merged
    (``merge``), on the fused-mining slices: each kind's slowest shard and its merge projected
    to the whole corpus by a line through the two slices (the shards side by side, so a kind's
    time is one shard's plus the merge's)."""
    topics, _ = _sample_topics(ctx)
    points: dict[str, Points] = {}
    for passages in FUSED_SLICES:
        folder = _corpus_slice(ctx, passages)
        out = folder.with_name(f"{folder.name}-shards")
        shutil.rmtree(out, ignore_errors=True)
        for kind, argv in _fused_mining_steps(ctx, folder, topics):
            if kind == "search":
                continue
            shards = []
            for i in range(SHARDS):
                shard = [*argv, "--shard-id", str(i), "--shard-num", str(SHARDS)]
                put(shard, "--index", str(out / f"{kind}-shard{i}"))
                shards.append(ctx.run(f"sharded-{kind}-{i}-{passages}", shard, [out]))
            slowest = Measurement(max(m.seconds for m in shards),  # side by side: the
                                  max(m.peak_memory for m in shards),  # largest of each
                                  max(m.peak_disk for m in shards), 0,
                                  sum(m.cpu_seconds for m in shards))
            points.setdefault(f"{kind}-shard", []).append((passages, slowest))
            merge = _python("pyserini_moe.merge", "--shards",
                            *[str(out / f"{kind}-shard{i}") for i in range(SHARDS)],
                            "--index", str(out / kind), "--threads", str(ctx.threads), "--quiet")
            points.setdefault(f"{kind}-merge", []).append(
                (passages, ctx.run(f"sharded-{kind}-merge-{passages}", merge, [out])))
    commands = {name: _line_figures(ms, ctx.shape.passages, "passages")
                for name, ms in points.items()}
    return {**_commands_figures(points, commands), "shards": SHARDS, "commands": commands}


# ------------------------------------------------------------------------------- DPR's Wikipedia
def _dpr_slices(ctx: Context) -> tuple[int, ...]:
    return tuple(max(1, round(n * ctx.fraction)) for n in DPR_SLICES)


def _dpr_source(ctx: Context) -> Path:
    return ctx.root / "dpr-source"


def _dpr_psgs(ctx: Context, passages: int) -> Path:
    """The first ``passages`` rows of the synthetic psgs_w100.tsv (the whole file for the larger
    slice; a copy of its head, written once, for the smaller)."""
    source = _dpr_source(ctx) / "psgs_w100.tsv"
    if passages == _dpr_slices(ctx)[-1]:
        return source
    target = ctx.root / "work" / f"psgs_w100-{passages}.tsv"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source, encoding="utf-8") as src, atomic_path(target) as tmp, \
                open(tmp, "w", encoding="utf-8") as out:
            out.writelines(itertools.islice(src, passages + 1))  # and the header
    return target


def _dpr_steps(ctx: Context, passages: int, command: str) -> list[list[str]]:
    """taser-paper.yaml's steps running ``command`` (a module and its first word, as the file
    spells it), on the slice of ``passages``: DPR's files from the synthetic source, the
    collection folder ``{work}/dpr`` one per slice."""
    reg = load_regression(REPO_ROOT / "regressions" / "taser-paper.yaml")
    steps = [s for s in reg.steps if f"-m {command} " in s]
    slice_steps = []
    for step in steps:
        step = step.replace("$DPR_DIR/psgs_w100.tsv", str(_dpr_psgs(ctx, passages)))
        step = step.replace("$DPR_DIR", str(_dpr_source(ctx)))
        step = step.replace("{work}/dpr", "{work}/dpr-" + str(passages))
        slice_steps.append(_expanded(ctx, shlex.split(step)))
    return slice_steps


def _dpr_collection(ctx: Context, passages: int) -> Path:
    return ctx.root / "work" / f"dpr-{passages}"


def dpr_generate(ctx: Context) -> dict[str, Any]:
    """Synthetic psgs_w100.tsv (the larger slice's rows) and DPR's five training and two dev
    retriever files at full size (the questions of taser-paper.yaml's ``dpr train``)."""
    slices = _dpr_slices(ctx)
    m = ctx.run("dpr-generate", _python("pyserini_moe.lab.scale.synth", "--root", str(ctx.root),
                                        "--fraction", str(ctx.fraction), "--quiet", "--dpr",
                                        str(slices[-1]), str(slices[0])), [_dpr_source(ctx)])
    return _figures(m)


def _dpr_points(ctx: Context, name: str, argv: Callable[[int], list[str]]) -> dict[str, Any]:
    """One command per slice, measured; the line through both projected to 21M passages."""
    points = []
    for passages in _dpr_slices(ctx):
        folder = _dpr_collection(ctx, passages)
        points.append((passages, ctx.run(f"{name}-{passages}", argv(passages), [folder])))
    return _line_figures(points, round(DPR.passages * ctx.fraction), "passages")


def dpr_wiki(ctx: Context) -> dict[str, Any]:
    """``dpr wiki``: psgs_w100.tsv to the gzipped BEIR corpus, streamed (ids checked unique in
    a set)."""
    for passages in _dpr_slices(ctx):
        shutil.rmtree(_dpr_collection(ctx, passages), ignore_errors=True)  # its output is new
    return _dpr_points(ctx, "dpr-wiki",
                       lambda n: _dpr_steps(ctx, n, "pyserini_moe.dpr wiki")[0])


def dpr_train(ctx: Context) -> dict[str, Any]:
    """``dpr train``: the five training and two dev files (full size) streamed into queries,
    qrels, topics and DPR's BM25 negatives as a run, beside each slice's corpus."""
    return _dpr_points(ctx, "dpr-train",
                       lambda n: [*_dpr_steps(ctx, n, "pyserini_moe.dpr train")[0], "--overwrite"])


def dpr_examples(ctx: Context) -> dict[str, Any]:
    """The trainer's data side for taser-paper.yaml's round 1 (:mod:`.probe`): the corpus held,
    DPR's BM25 negatives as candidates (every training question's, full size), batches."""
    def argv(passages: int) -> list[str]:
        step = _dpr_steps(ctx, passages, "pyserini_moe.train")[0]
        settings = [a for i, a in enumerate(step) if step[i - 1] == "--set"]
        workdir = ctx.root / "work" / f"probe-taser-{passages}"
        return _python("pyserini_moe.lab.scale.probe",
                       "--config", step[step.index("--config") + 1],
                       *[x for s in settings for x in ("--set", s)], "--workdir", str(workdir))
    figures = _dpr_points(ctx, "dpr-examples-taser", argv)
    log = ctx.root / "logs" / f"dpr-examples-taser-{_dpr_slices(ctx)[-1]}.log"
    return {**figures, "probe": json.loads(log.read_text(encoding="utf-8").strip().splitlines()[-1])}


def _paper_train_step(name: str) -> list[str]:
    """The paper file's first training of ``name``'s recipe on MS MARCO, as a command line."""
    file, recipe = TRAININGS[name]
    reg = load_regression(REPO_ROOT / "regressions" / file)
    steps = reg.steps + [s for c in reg.conditions for s in c.steps]
    step = next(s for s in steps if "-m pyserini_moe.train " in s and f"/{recipe} " in s
                and "$BEIR_DIR/msmarco" in s and "model.args.gate" not in s)
    return shlex.split(step)


def _negative_settings(ctx: Context, name: str) -> list[str]:
    """Negatives from the mining sample's run (the rest of the queries: random fill-ins)."""
    if not _has_negatives(name):
        return []
    return ["--set", "data.negatives.source=run", "--set", f"data.negatives.run={ctx.sample_run}"]


def _expanded(ctx: Context, step: list[str]) -> list[str]:
    return [expand(a.replace("$BEIR_DIR", str(ctx.root)), ctx.root / "work") for a in step]


def examples(name: str) -> Callable[[Context], dict[str, Any]]:
    """The trainer's data side for ``name``'s recipe at full size (:mod:`.probe`)."""
    def stage(ctx: Context) -> dict[str, Any]:
        step = _expanded(ctx, _paper_train_step(name))
        config = step[step.index("--config") + 1]
        settings = [a for i, a in enumerate(step) if i and step[i - 1] == "--set"
                    and not a.startswith("model.")]
        extra = _negative_settings(ctx, name)
        argv = _python("pyserini_moe.lab.scale.probe", "--config", config,
                       *[x for s in settings for x in ("--set", s)], *extra,
                       "--workdir", str(ctx.root / "work" / f"probe-{name}"))
        m = ctx.run(f"examples-{name}", argv, [ctx.root / "work" / f"probe-{name}"])
        log = (ctx.root / "logs" / f"examples-{name}.log").read_text(encoding="utf-8")
        probe = json.loads(log.strip().splitlines()[-1])
        return {**_figures(m), **_with_every_candidate(m, probe), "probe": probe}
    return stage


def _with_every_candidate(m: Measurement, probe: dict[str, Any]) -> dict[str, Any]:
    """The probe's figures projected to every training query having its candidates, as after
    mining all of them: the memory the read of the negatives allocates at its peak (traced by
    the probe) and their read time, times the queries' share; the first epoch's examples at the
    cost of one with candidates. The probe reads the negatives again to measure them apart: the
    time counts them once."""
    if not probe["candidates"]:
        return {}
    phases = {p["phase"]: p for p in probe["phases"]}
    negatives_seconds = phases["negatives read again"]["seconds"]
    scale = probe["queries"] / probe["queries_with_candidates"]
    each = probe["example_seconds"]
    examples = max(0.0, (each["with_candidates"] or 0) - (each["without_candidates"] or 0)) \
        * probe["train_pairs"]
    # the read's allocations less what holds every training query whatever the sample (the
    # query -> candidates map): the rest grows with the queries searched, the sample's share
    fixed = probe["negatives_held_bytes"] - CANDIDATE_BYTES * probe["candidates"] \
        - ARRAY_BYTES * probe["queries_with_candidates"]
    sampled = max(0, probe["negatives_peak_bytes"] - fixed)
    return {"projected_seconds": round(m.seconds + negatives_seconds * (scale - 2) + examples, 1),
            "projected_memory": int(m.peak_memory + sampled * (scale - 1)),
            "projected_candidates": int(probe["candidates"] * scale)}


def training(name: str) -> Callable[[Context], dict[str, Any]]:
    """The paper file's training command for ``name`` with the tiny BERT, a few steps, the
    sample's negatives: start-up at full size and the data it holds."""
    def stage(ctx: Context) -> dict[str, Any]:
        backbone = tiny_backbone(ctx.root / "tiny-bert")
        step = _expanded(ctx, _paper_train_step(name))
        argv = smoke_argv(step[2:], str(backbone)) + _negative_settings(ctx, name)
        put_setting(argv, "model.backbone", str(backbone))  # not a pre-training's output
        recipe = load_config(argv[argv.index("--config") + 1])  # the recipe's batches, not the
        put_setting(argv, "training.batch_size", str(recipe.training.batch_size))  # smoke's 4
        output = Path(argv[argv.index("--output-dir") + 1])
        m = ctx.run(f"train-{name}", [sys.executable, "-m", *argv], [output])
        return _figures(m)
    return stage


CANDIDATE_BYTES = 4  # a held candidate: an int32 document number
ARRAY_BYTES = 112  # a query's numpy array of them, empty
PRETRAIN_SHARES = (0.1, 0.2)  # of the passages given pseudo-queries: two points of a line


def pretraining(ctx: Context) -> dict[str, Any]:
    """cotmote-paper.yaml's pre-training step (docT5query pairs, five a passage) with the tiny
    BERT and a few steps, run with the pseudo-queries of two shares of the passages; memory and
    time are linear in the pairs past the corpus read, so the line through the two points is
    projected to every passage's five."""
    reg = load_regression(REPO_ROOT / "regressions" / TRAININGS["cotmote"][0])
    step = _expanded(ctx, shlex.split(next(s for s in reg.steps
                                           if "-m pyserini_moe.pretrain " in s)))
    backbone = str(tiny_backbone(ctx.root / "tiny-bert"))
    points = []
    for share in PRETRAIN_SHARES:
        passages = round(share * ctx.shape.passages)
        pairs = write_pseudo_queries(ctx.root / "runs" / f"doct5query-{share:g}.tsv", passages)
        argv = [a.replace("$MSMARCO_DOCT5QUERY", str(pairs)) for a in step[2:]]
        argv = smoke_argv(argv, backbone)
        output = ctx.root / "work" / f"pretrain-{share:g}"
        put(argv, "--output-dir", str(output))
        points.append((passages * PSEUDO_QUERIES_PER_PASSAGE,
                       ctx.run(f"pretrain-{share:g}", [sys.executable, "-m", *argv], [output])))
    return _line_figures(points, ctx.shape.passages * PSEUDO_QUERIES_PER_PASSAGE, "pairs")


def _has_negatives(name: str) -> bool:
    return load_config(REPO_ROOT / "encoders" / TRAININGS[name][1]).data.num_negatives > 0


def _data_scope(name: str) -> str:
    return ("full size; negatives of the mining sample, projected to all" if _has_negatives(name)
            else "full size (in-batch negatives only)")


def _data_needs(name: str) -> tuple[str, ...]:
    return ("bm25-mining",) if _has_negatives(name) else ("generate",)


def _counts(values: tuple[int, ...]) -> str:
    return " and ".join(f"{n:,}" for n in values)


STAGES = [
    Stage("generate", "synthetic MS MARCO written (BEIR layout)", "full size", generate),
    Stage("bm25-index", "BM25 index of the corpus (bm25-paper.yaml's step)", "full size",
          bm25_index, ("generate",)),
    Stage("bm25-mining", "BM25 top 1000 of training queries (CAME's round-1 negatives)",
          f"{MINING_SAMPLE:,} queries, projected to all", bm25_mining, ("bm25-index",)),
    *(Stage(f"examples-{name}", f"{name}: the trainer's data side (read, candidates, batches)",
            _data_scope(name), examples(name), _data_needs(name)) for name in TRAININGS),
    Stage("pretrain-cotmote", "cotmote: CoT-MAE pre-training on docT5query pairs, tiny BERT, "
          f"{TRAIN_STEPS} steps", f"pairs of {' and '.join(f'{x:.0%}' for x in PRETRAIN_SHARES)}"
          " of the passages, a line through both projected to all", pretraining, ("generate",)),
    *(Stage(f"train-{name}", f"{name}: the paper file's train step, tiny BERT, "
            f"{TRAIN_STEPS} steps", _data_scope(name), training(name), _data_needs(name))
      for name in TRAININGS),
    Stage("fused-mining", "came: round 1's three expert indexes and their fused search "
          "(came_sum, each expert's top 200), train-came's model",
          f"slices of {_counts(FUSED_SLICES)} passages, {MINING_SAMPLE:,} queries; a line "
          "through both projected to all",
          fused_mining, ("train-came",)),
    Stage("multivector-build", "came: round 1's compressed multi-vector index (IVF-PQ), "
          "train-came's model", f"slices of {_counts(MULTIVECTOR_SLICES)} passages; a line "
          "through both projected to all", multivector_build, ("train-came",)),
    Stage("sharded-encoding", f"came: round 1's three index commands as {SHARDS} shards each, "
          "then merged, train-came's model", f"slices of {_counts(FUSED_SLICES)} passages; a "
          "line through both projected to all", sharded_encoding, ("train-came",)),
    Stage("dpr-generate", "taser: synthetic psgs_w100.tsv and DPR's retriever files",
          f"{DPR_SLICES[-1]:,} passages; the seven retriever files at full size", dpr_generate),
    *(Stage(f"dpr-{name}", what, f"slices of {_counts(DPR_SLICES)} passages, a line through "
            "both projected to 21.0M", run, (needs,))
      for name, what, run, needs in (
          ("wiki", "taser: dpr wiki, psgs_w100.tsv to the BEIR corpus", dpr_wiki, "dpr-generate"),
          ("train", "taser: dpr train, the retriever files to queries, qrels, negatives",
           dpr_train, "dpr-wiki"),
          ("examples-taser", "taser: the trainer's data side on DPR's collection (round 1, "
           "DPR's BM25 negatives)", dpr_examples, "dpr-train"))),
]
