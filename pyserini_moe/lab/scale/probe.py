"""The trainer's data side, phase by phase: what ``train`` does before its first step.

Runs the calls the trainer makes in its order (:func:`load_training_data`, then the first
epoch's batch count, its batches and the validation batches) and prints one JSON object: each
phase's seconds, the process's resident memory after it and its peak during it, plus the counts
projections need (passages, training pairs, negative candidates held). No model is built: the
memory is the data's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.train import (
    CandidateBuilder,
    DataConfig,
    TrainingData,
    load_config,
    load_training_data,
    pack_batches,
)


def memory() -> tuple[int, int]:
    """This process's resident memory now and its peak since the last :func:`reset_peak`, in
    bytes."""
    values = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line[:5]] = int(line.split()[1]) * 1024
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


def reset_peak() -> None:
    """Start the peak (VmHWM) afresh, so that a phase's peak is its own (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass  # the peak then runs from the start: a phase's peak errs high, never low


def example_seconds(data: TrainingData, batch_size: int,
                    limit: int = 2_000) -> dict[str, float | None]:
    """Seconds to build one example of the first epoch, for queries with and without
    hard-negative candidates (a sample's queries have them, the others get random passages):
    what projects the epoch's batches to every query having its candidates."""
    packed = pack_batches(data._epoch_pairs(data.train_pairs, 0), data._rng(0), batch_size)  # noqa: SLF001
    chosen: dict[bool, list[tuple[str, str, Any]]] = {True: [], False: []}
    for batch in packed:
        excluded = data.excluded(batch)
        for qid, positive in batch:
            has = len(data.candidates.get(qid, ())) > 0
            if len(chosen[has]) < limit:
                chosen[has].append((qid, positive, excluded))
    seconds: dict[str, float | None] = {}
    for has, examples in chosen.items():
        rng = random.Random(0)
        started = time.perf_counter()
        for qid, positive, excluded in examples:
            data._example(qid, positive, excluded, rng)  # noqa: SLF001 (the step measured)
        key = "with_candidates" if has else "without_candidates"
        seconds[key] = (time.perf_counter() - started) / len(examples) if examples else None
    return seconds


def _negatives_again(data: TrainingData, config: DataConfig,
                     mark: Callable[[str, float], None]) -> dict[str, int]:
    """The negatives' share of the read, measured apart: the run read into candidates again,
    held while measured (the memory delta is theirs)."""
    builder = CandidateBuilder(data.doc_ids, data.positives, config)  # its id -> number map is
    mark("candidate builder made", time.perf_counter())  # the corpus's, not the negatives'
    started = time.perf_counter()
    builder.read(Path(config.negatives.run))
    mark("negatives read again", started)
    del builder
    # the read's own allocations, exactly (in a process of gigabytes, resident memory hides a
    # few tens of MB in freed pages): traced on a third read, slower, so not timed
    builder = CandidateBuilder(data.doc_ids, data.positives, config)
    tracemalloc.start()
    builder.read(Path(config.negatives.run))
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"negatives_peak_bytes": peak, "negatives_held_bytes": held}


def probe(config_path: Path, settings: list[str], workdir: Path) -> dict[str, Any]:
    """Phases, seconds and memory of the trainer's data side for one recipe."""
    config = load_config(config_path).with_settings(settings)
    batch = config.training.batch_size
    phases: list[dict[str, Any]] = [{"phase": "start", "seconds": 0.0, "memory": memory()[0],
                                     "peak": memory()[1]}]
    reset_peak()

    def mark(phase: str, started: float) -> None:
        now, peak = memory()
        phases.append({"phase": phase, "seconds": round(time.perf_counter() - started, 2),
                       "memory": now, "peak": peak})
        reset_peak()

    traced: dict[str, int] = {}
    started = time.perf_counter()
    data = load_training_data(config.data, workdir, progress=False)
    mark("read and candidates", started)
    if config.data.negatives.source == "run" and config.data.num_negatives:
        traced = _negatives_again(data, config.data, mark)
    started = time.perf_counter()
    data.num_batches(0, batch)
    mark("epoch 0 batch count", started)
    started = time.perf_counter()
    batches = data.epoch_batches(0, batch)
    mark("epoch 0 batches", started)
    started = time.perf_counter()
    data.validation_batches(batch)
    mark("validation batches", started)
    return {"recipe": config_path.name, "passages": len(data.passages),
            "queries": len(data.positives), "example_seconds": example_seconds(data, batch),
            "train_pairs": len(data.train_pairs), "batches": len(batches),
            "candidates": sum(len(c) for c in data.candidates.values()),
            "queries_with_candidates": sum(len(c) > 0 for c in data.candidates.values()),
            "phases": phases, **traced}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyserini_moe.lab.scale.probe",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path, help="a training recipe")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="recipe overrides, as train's --set")
    parser.add_argument("--workdir", required=True, type=Path,
                        help="where the trainer would write (negatives.trec)")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(probe(args.config, args.settings, args.workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
