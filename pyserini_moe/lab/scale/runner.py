"""Run the scale check's stages (those not measured yet, or those named) and write their table.

Each stage's figures are written under the scratch root (which stages this machine's data has
been through) and, with ``--results``, into a folder kept with the table: the table is built from
both, so a new machine's sitting adds its rows to the ones measured elsewhere. A stage with no
figures in either keeps the row the table file had."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pyserini_moe.io import atomic_path
from pyserini_moe.lab.scale.stages import STAGES, Context, Stage

GIB = 1024 ** 3


def result_path(ctx: Context, stage: Stage) -> Path:
    return ctx.root / "results" / f"{stage.name}.json"


def run_stages(ctx: Context, names: list[str] | None = None, redo: bool = False,
               kept: Path | None = None) -> list[str]:
    """Run the named stages (default: every stage not measured yet on this root), in the table's
    order; a stage whose inputs are not measured yet on this root is refused. Each stage's
    figures are also written into ``kept`` when given. Returns the stages run."""
    wanted = [s for s in STAGES if (names is None or s.name in names)]
    done = []
    for stage in wanted:
        target = result_path(ctx, stage)
        if target.is_file() and not redo and _fraction(target) == ctx.fraction:
            continue
        missing = [n for n in stage.needs if not (ctx.root / "results" / f"{n}.json").is_file()]
        if missing:
            raise SystemExit(f"stage {stage.name} needs {', '.join(missing)} first")
        print(f"== {stage.name}: {stage.what} ({stage.scope})", file=sys.stderr, flush=True)
        figures = {"stage": stage.name, "fraction": ctx.fraction, "threads": ctx.threads,
                   "cores": os.cpu_count(), **stage.run(ctx)}
        for folder in (target.parent, kept):
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                with atomic_path(folder / target.name) as tmp:
                    tmp.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
        print(f"   {_row(stage, figures)}", file=sys.stderr, flush=True)
        done.append(stage.name)
    return done


def _fraction(result: Path) -> float:
    return json.loads(result.read_text(encoding="utf-8"))["fraction"]


def _gb(value: int) -> str:
    return f"{value / GIB:.2f} GiB" if value < 10 * GIB else f"{value / GIB:.1f} GiB"


def _time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _row(stage: Stage, f: dict[str, Any]) -> str:
    return (f"| {stage.name} | {stage.scope} | {_time(f['seconds'])} | {_gb(f['peak_memory'])} | "
            f"{_gb(f['peak_disk'])} | {_time(f['projected_seconds'])} | "
            f"{_gb(f['projected_memory'])} | {_gb(f['projected_disk'])} |")


def _with_data_side(name: str, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A training stage's figures with the full run's negatives: what its data side's stage
    (examples-<model>) projected beyond what it measured, added to the training's projection
    (the training ran on the same sample of negatives)."""
    figures = results[name]
    data = results.get(name.replace("train-", "examples-", 1)) if name.startswith("train-") else None
    if data is None:
        return figures
    return {**figures,
            "projected_seconds": figures["seconds"] + data["projected_seconds"] - data["seconds"],
            "projected_memory": figures["peak_memory"] + data["projected_memory"]
            - data["peak_memory"]}


def _size(fraction: float) -> str:
    return "full size" if fraction == 1 else f"{fraction:g} of MS MARCO's size"


def measured(ctx: Context, kept: Path | None = None) -> dict[str, dict[str, Any]]:
    """Each stage's figures: from ``kept`` and from this root (this root's where both hold one)."""
    results = {}
    for folder in (kept, ctx.root / "results"):
        for stage in STAGES:
            path = folder / f"{stage.name}.json" if folder is not None else None
            if path is not None and path.is_file():
                results[stage.name] = json.loads(path.read_text(encoding="utf-8"))
    return results


def _earlier_rows(text: str) -> tuple[list[str], dict[str, str]]:
    """A table file's head lines and its rows by stage."""
    head = [line for line in text.splitlines() if line.startswith("Measured at ")]
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| stage |")}
    return head, rows


def table(ctx: Context, kept: Path | None = None, earlier: str = "") -> str:
    """The measured stages as a markdown table (the others are listed as not run); a stage with
    no figures keeps its row from ``earlier`` (the table file as it was)."""
    results = measured(ctx, kept)
    settings = sorted({(r["fraction"], r["threads"], str(r.get("cores", "?")))
                       for r in results.values()})
    head = [f"Measured at {_size(f)}, {t} Lucene threads, {c} cores; full run: projected to MS "
            "MARCO (the dpr- rows: DPR's Wikipedia) on the same machine." for f, t, c in settings]
    earlier_head, earlier_rows = _earlier_rows(earlier)
    carried = {s.name: earlier_rows[s.name] for s in STAGES
               if s.name not in results and s.name in earlier_rows}
    if carried:
        head += [line for line in earlier_head if line not in head]
    lines = [*head, "", "| stage | scope | time | peak memory | peak disk | full run: time | memory | "
             "disk |", "|---|---|---|---|---|---|---|---|"]
    lines += [_row(s, _with_data_side(s.name, results)) if s.name in results else carried[s.name]
              for s in STAGES if s.name in results or s.name in carried]
    missing = [s.name for s in STAGES if s.name not in results and s.name not in carried]
    if missing:
        lines += ["", f"Not measured yet: {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe.lab.scale",
        description="The training side of the paper files at MS MARCO's size on a synthetic "
                    "collection: each stage measured (time, peak memory of its process tree, "
                    "peak scratch disk) and projected to the full run. Stages already measured "
                    "are skipped, so a check can be spread over sittings (--stage).")
    parser.add_argument("--root", type=Path, default=Path("work/scale-check"),
                        help="scratch folder: the synthetic data, indexes, logs, results "
                             "(default: work/scale-check)")
    parser.add_argument("--stage", action="append", choices=[s.name for s in STAGES],
                        help="run this stage (repeatable; default: every stage not measured)")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="scale the collection (default 1: full size); projections divide "
                             "by it")
    parser.add_argument("--threads", type=int, default=2, help="threads of the Lucene stages")
    parser.add_argument("--redo", action="store_true", help="measure named stages again")
    parser.add_argument("--table-only", action="store_true",
                        help="run nothing: write the table of the figures measured so far")
    parser.add_argument("--table", type=Path,
                        help="also write the table to this file (a stage with no figures keeps "
                             "the row this file had)")
    parser.add_argument("--results", type=Path,
                        help="a folder kept with the table: each stage measured here writes its "
                             "figures there too, and the table joins them to this root's")
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1:
        parser.error("--fraction must be in (0, 1]")
    ctx = Context(args.root.resolve(), args.fraction, args.threads)
    try:
        if not args.table_only:
            run_stages(ctx, args.stage, args.redo, args.results)
    finally:
        earlier = args.table.read_text(encoding="utf-8") if args.table and args.table.is_file() \
            else ""
        text = table(ctx, args.results, earlier)
        print(text)
        if args.table:
            with atomic_path(args.table) as tmp:
                tmp.write_text(text, encoding="utf-8")
    return 0
