"""The trainer's data side, phase by phase: what ``train`` does before its first step.

Runs the calls the trainer makes in its order (:func:`load_training_data`, then the first
epoch's batch count, its batches and the validation batches) and prints one JSON object: each
phase's seconds and the process's resident memory after it, plus the counts projections need
(passages, training pairs, negative candidates held). No model is built: the memory is the data's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.runs import read_trec_run
from pyserini_moe.train.config import DataConfig, load_config
from pyserini_moe.train.data import TrainingData, _candidates, _pack, load_training_data


def resident_memory() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def example_seconds(data: TrainingData, batch_size: int,
                    limit: int = 2_000) -> dict[str, float | None]:
    """Seconds to build one example of the first epoch, for queries with and without
    hard-negative candidates (a sample's queries have them, the others get random passages):
    what projects the epoch's batches to every query having its candidates."""
    packed = _pack(data._epoch_pairs(data.train_pairs, 0), data._rng(0), batch_size)  # noqa: SLF001
    chosen: dict[bool, list[tuple[str, str, list[tuple[str, str]]]]] = {True: [], False: []}
    for batch in packed:
        for qid, positive in batch:
            has = bool(data.candidates.get(qid))
            if len(chosen[has]) < limit:
                chosen[has].append((qid, positive, batch))
    seconds: dict[str, float | None] = {}
    for has, examples in chosen.items():
        rng = random.Random(0)
        started = time.perf_counter()
        for qid, positive, batch in examples:
            data._example(qid, positive, batch, rng)  # noqa: SLF001 (the step measured)
        key = "with_candidates" if has else "without_candidates"
        seconds[key] = (time.perf_counter() - started) / len(examples) if examples else None
    return seconds


def _negatives_again(data: TrainingData, config: DataConfig,
                     mark: Callable[[str, float], None]) -> None:
    """The negatives' share of the read, measured apart: the run read again, then its
    candidates built again, each held while the next is measured (memory deltas are theirs)."""
    started = time.perf_counter()
    run = read_trec_run(config.negatives.run)
    mark("negatives run read again", started)
    started = time.perf_counter()
    candidates = _candidates(run, data.positives, data.passages, config,
                             Path(config.negatives.run))
    mark("candidates built again", started)
    del run, candidates


def probe(config_path: Path, settings: list[str], workdir: Path) -> dict[str, Any]:
    """Phases, seconds and memory of the trainer's data side for one recipe."""
    config = load_config(config_path).with_settings(settings)
    batch = config.training.batch_size
    phases: list[dict[str, Any]] = [{"phase": "start", "seconds": 0.0,
                                     "memory": resident_memory()}]

    def mark(phase: str, started: float) -> None:
        phases.append({"phase": phase, "seconds": round(time.perf_counter() - started, 2),
                       "memory": resident_memory()})

    started = time.perf_counter()
    data = load_training_data(config.data, workdir, progress=False)
    mark("read and candidates", started)
    if config.data.negatives.source == "run" and config.data.num_negatives:
        _negatives_again(data, config.data, mark)
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
            "queries_with_candidates": sum(bool(c) for c in data.candidates.values()),
            "phases": phases}


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
