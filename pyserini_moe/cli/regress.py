"""``python -m pyserini_moe.regress regressions/<file>.yaml ...``: run regression conditions.

Prints expected vs measured for every metric with OK/FAIL/SKIP/ERROR and exits 1 when any
condition fails. Paper-scale files whose data or GPU is absent are validated and listed as skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from pyserini_moe.cli import ArgumentParser, HelpFormatter, refuse_inside_outputs, seed
from pyserini_moe.data.beir import is_collection
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_one_file_twice
from pyserini_moe.lab.record import record
from pyserini_moe.lab.regress import (
    KEPT_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    Outcome,
    Regression,
    format_table,
    load_regression,
    run_regression,
    write_report,
)
from pyserini_moe.outputs import output_kind

DEFAULT_WORK = REPO_ROOT / "work" / "regressions"


def _refuse_unwritable(files: list[Path]) -> None:
    """``--record`` rewrites each file (a temporary beside it, renamed over it): a file or folder
    this process cannot write, or a link to one, is refused before anything runs."""
    for path in files:
        if path.is_symlink():  # a rename over it would replace the link, not the file
            raise UserError(f"--record rewrites {path}, a symbolic link: give the file it "
                            f"points to ({path.resolve()}), or leave --record out")
        read_only = bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)  # root too
        if read_only or not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            raise UserError(f"--record rewrites {path}, which cannot be written here (read-only "
                            "file or folder): make it writable, or leave --record out")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.regress",
        description="Run regression YAMLs: execute each condition's steps, evaluate its run, and "
                    "compare with the expected metric values within their tolerance.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("files", nargs="+", help="regression YAML files")
    parser.add_argument("--work-dir", default=None,
                        help="where indexes, runs and reports go, one subfolder per file "
                             f"(default: {DEFAULT_WORK.relative_to(REPO_ROOT)}); each seed's "
                             "per-query values are kept in "
                             f"{KEPT_DIR.relative_to(REPO_ROOT)}/<file>/ with the default, else "
                             "in <work-dir>/per-query/<file>/ (what the test over seeds reads "
                             "once the runs are gone: eval --run 'NAME=PATTERN')")
    parser.add_argument("--results-dir", default=None,
                        help="where results pages ({results} in a file's steps) are written "
                             f"(default: the repository's {RESULTS_DIR.relative_to(REPO_ROOT)} "
                             "with the default --work-dir, else <work-dir>/results: a run "
                             "elsewhere leaves the tracked pages alone)")
    parser.add_argument("--condition", action="append", default=None,
                        help="run only this condition (repeatable), and of the file's own "
                             "steps only those writing what it reads (a seeded row does not "
                             "re-train the models the other rows share)")
    parser.add_argument("--seed", type=seed, action="append", default=None,
                        help="run a multi-seed condition for this seed only (repeatable): two "
                             "queues share a condition's seeds; their rows say SEEDS (no verdict "
                             "on a partial mean) until --evaluate-only scores every seed")
    parser.add_argument("--scale", choices=("local", "paper", "all"), default="all",
                        help="run only files of this scale")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate the files, print the commands and the expected values "
                             "without running anything")
    parser.add_argument("--smoke", action="store_true",
                        help="run every step of paper-scale files for real on small stand-ins "
                             "(a slice of SciFact in each data format the files read, a tiny "
                             "random BERT, 2 training steps); expected values are not compared, "
                             "every condition must be evaluated (see pyserini_moe.lab.smoke)")
    parser.add_argument("--evaluate-only", action="store_true",
                        help="run no step: evaluate the runs already in the work folder (steps "
                             "run by hand or in parallel queues) against the expected values; a "
                             "seed whose run is not there is measured from its kept per-query "
                             "values where they are (seeds of other sittings and machines)")
    parser.add_argument("--record", action="store_true",
                        help="write the measured values into the files: a condition measured "
                             "in full (every seed) gets its value, or its seeds' values with "
                             "their mean and sd ('tolerance: spread' for a metric measured for "
                             "the first time); with --seed, those seeds' values replace theirs "
                             "and the others stay as recorded. Comments and the rest of the file "
                             "are kept; the 'source' lines (when, where, how) stay yours to "
                             "update. The exit status still says whether the values held "
                             "against the file as it was")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in args.files:
        if Path(name).is_dir():
            raise UserError(f"{name} is a folder: name its regression files ({name}/*.yaml)")
    # one file twice (however spelt) would run twice into one work folder, with or without --smoke
    refuse_one_file_twice(((f, f) for f in args.files), "regression file")
    regressions = [load_regression(f) for f in args.files]  # validate all before running any
    if args.smoke:
        return _smoke(args, regressions)
    if args.dry_run and args.evaluate_only:  # a dry run evaluates nothing either
        raise UserError("--dry-run prints the plan and evaluates nothing; --evaluate-only "
                        "evaluates runs already there: give one of them")
    if args.record and args.dry_run:  # nothing measured
        raise UserError("--record writes measured values: it cannot go with --dry-run (a dry "
                        "run measures nothing)")
    if args.scale != "all" and all(reg.scale != args.scale for reg in regressions):
        raise UserError(f"--scale {args.scale} leaves none of the files given (they are "
                        f"{', '.join(sorted({reg.scale for reg in regressions}))}-scale): drop "
                        "--scale or name a file of that scale")
    kept = [reg for reg in regressions if args.scale in ("all", reg.scale)]
    if args.record:  # known now, not after the whole evaluation
        _refuse_unwritable([reg.path for reg in kept])
    for reg in regressions:
        held = [c.name for c in reg.conditions if c.name in (args.condition or [])]
        if held and reg not in kept:
            raise UserError(f"--condition {', '.join(held)}: {reg.path} holds "
                            f"{'it' if len(held) == 1 else 'them'}, a {reg.scale}-scale file "
                            f"that --scale {args.scale} leaves out: drop --scale or the "
                            f"condition{'s' * (len(held) > 1)}")
    check_conditions(kept, args.condition, [str(reg.path) for reg in kept])
    check_selection(regressions, args.seed, args.condition, args.scale)
    work_dir = _work_dir(args.work_dir)
    if args.results_dir is not None:
        _check_folder("--results-dir", Path(args.results_dir))
    results = Path(args.results_dir).resolve() if args.results_dir else (
        work_dir / "results" if args.work_dir else RESULTS_DIR)
    # the seeds' per-query values: tracked beside the files with the default work folder (as the
    # results pages), else in the work folder, so a run elsewhere leaves the tracked ones alone
    per_query = work_dir / "per-query" if args.work_dir else KEPT_DIR
    failed = False
    for reg in kept:
        if args.condition and not any(c.name in args.condition for c in reg.conditions):
            # its shared steps (indexes) would be built for no condition
            print(f"note: {reg.path} holds none of --condition: skipped", file=sys.stderr)
            continue
        work = work_dir / reg.name
        print(f"== {reg.name} ({reg.scale}): {reg.description}", flush=True)
        rows, times = run_regression(reg, work, dry_run=args.dry_run, only=args.condition,
                                     evaluate_only=args.evaluate_only, only_seeds=args.seed,
                                     results=results, keep=per_query / reg.name)
        print(format_table(rows, times), flush=True)
        if args.dry_run:
            continue
        ran = any(r.status != "SKIP" for r in rows)
        if ran:
            print(f"report: {write_report(reg, rows, times, work)}")
        failed |= any(r.status in ("FAIL", "ERROR") for r in rows)
        if args.record and ran:
            _record(reg, rows)
            continue
        unset = sum(r.status == "UNSET" for r in rows)
        if unset:
            print(f"{unset} measured value(s) have no expected value in {reg.path} yet: "
                  "--evaluate-only --record writes them in")
    return 1 if failed else 0


def _record(reg: Regression, rows: list[Outcome]) -> None:
    """``--record``: the measured values into the file, and what was left out."""
    recorded, left = record(reg, rows)
    if recorded:
        print(f"recorded in {reg.path}: {', '.join(recorded)} (update their 'source' lines: "
              "when, where and how they were measured)")
    if left:
        print(f"not recorded (not measured, or some seeds only with no value recorded for the "
              f"others): {', '.join(left)}")


# Flags --smoke cannot honour: it runs every step for real on stand-ins (no dry run, nothing
# merely evaluated), runs a condition's steps once without {seed} queues, and writes its results
# pages into its own work folder.
NOT_WITH_SMOKE = (("dry_run", "--dry-run"), ("evaluate_only", "--evaluate-only"),
                  ("seed", "--seed"), ("results_dir", "--results-dir"), ("record", "--record"))


def _smoke(args: argparse.Namespace, regressions: list[Regression]) -> int:
    """``--smoke``: the paper-scale files (those of ``--condition`` only) at smoke scale. A flag
    it cannot honour is refused before any stand-in is built, not left unread while every step
    runs for real."""
    given = [flag for dest, flag in NOT_WITH_SMOKE if getattr(args, dest)]
    if given:
        raise UserError(f"--smoke runs every step for real on stand-ins: {', '.join(given)} "
                        "cannot go with it; run without --smoke for that")
    if args.scale == "local":
        raise UserError("--smoke runs paper-scale files: --scale local leaves none; drop --scale")
    paper = [r for r in regressions if r.scale == "paper"]
    if not paper:
        raise UserError("--smoke runs paper-scale files; none given")
    _refuse_skipped_conditions(regressions, args.condition)
    for reg in regressions:
        if reg.scale != "paper":
            print(f"note: --smoke skips {reg.path}, a {reg.scale}-scale file (it runs "
                  "paper-scale files only)", file=sys.stderr)
    check_conditions(paper, args.condition, [str(r.path) for r in paper])
    check_selection(paper, None)  # two files of one name: one smoke work folder for both
    if args.condition:
        paper = [dataclasses.replace(r, conditions=[c for c in r.conditions
                                                    if c.name in args.condition])
                 for r in paper]
        paper = [r for r in paper if r.conditions]
    from pyserini_moe.lab.smoke import smoke  # noqa: PLC0415 - torch only when smoking

    return smoke(paper, _work_dir(args.work_dir) / "smoke")


def _work_dir(given: str | None) -> Path:
    """``--work-dir``, absolute (steps run from the repository root, the runner from here),
    checked before any step writes into it."""
    if given is None:
        return DEFAULT_WORK
    folder = Path(given).resolve()
    _check_folder("--work-dir", folder)
    return folder


def _check_folder(flag: str, folder: Path) -> None:
    """A folder the runner writes many files into: not a file, nor inside one of the
    toolkit's outputs (an index, a model, a training run) or a collection, whose folder would
    then hold files it did not write."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file: name a folder (made if missing)")
    # the folder is made with its parents: one of them a file would stop it at the first write
    above = folder if folder.exists() else next(p for p in folder.parents if p.exists())
    if not above.is_dir():
        raise UserError(f"{flag} {folder}: {above} is a file, not a folder: name a folder "
                        "(made if missing)")
    kind = output_kind(folder) or ("a collection" if is_collection(folder) else None)
    if kind is not None:
        raise UserError(f"{flag} {folder} is {kind}: name a folder of its own (made if missing)")
    refuse_inside_outputs(flag, folder)


def _refuse_skipped_conditions(regressions: list[Regression],
                               conditions: list[str] | None) -> None:
    """A ``--condition`` found only in a file ``--smoke`` skips (not paper-scale) is named with
    that file, not as "no such condition" in the files smoked, which hides why."""
    for name in conditions or []:
        homes = [reg for reg in regressions if name in {c.name for c in reg.conditions}]
        if homes and all(reg.scale != "paper" for reg in homes):
            raise UserError(f"--condition {name} is in {homes[0].path}, a {homes[0].scale}-scale "
                            "file, which --smoke skips (it runs paper-scale files only): run it "
                            "without --smoke, or name a condition of a paper-scale file")


def check_conditions(regressions: list[Regression], conditions: list[str] | None,
                     files: list[str]) -> None:
    """A ``--condition`` that no file has would select nothing and run nothing: refused."""
    known = {c.name for reg in regressions for c in reg.conditions}
    unknown = [c for c in conditions or [] if c not in known]
    if unknown:
        raise UserError(f"--condition {', '.join(unknown)}: no such condition in "
                        f"{', '.join(files)} (known: {', '.join(sorted(known))})")


def check_selection(regressions: list[Regression], seeds: list[int] | None,
                    conditions: list[str] | None = None, scale: str = "all") -> None:
    """Refused before anything runs: two files of one name (one work folder and report for
    both) and a ``--seed`` that no selected condition (of ``--condition``, in files of
    ``--scale``) trains with: nothing would read it."""
    names = [reg.name for reg in regressions]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"several files are named {', '.join(twice)}: each file's name is its "
                        "work folder and report; run them one at a time or rename one")
    if seeds:
        selected = [c for reg in regressions if scale in ("all", reg.scale)
                    for c in reg.conditions if not conditions or c.name in conditions]
        known = {s for c in selected for s in c.seeds}
        unknown = sorted(set(seeds) - known)
        if unknown:
            raise UserError(f"--seed {', '.join(map(str, unknown))}: no condition selected "
                            f"({', '.join(c.name for c in selected) or 'none'}) trains with it "
                            f"(their seeds: {', '.join(map(str, sorted(known))) or 'none'})")
