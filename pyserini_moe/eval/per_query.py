"""Per-query metric files: what a run scores on each query, kept where a run is not.

A seeded verdict (:mod:`pyserini_moe.eval.seeds`) needs every seed's per-query scores, not only
its mean; runs and models live in a machine's work folder and are gone on the next machine, so
a condition measured there could only be compared again by training it again. The regression
runner therefore keeps each seed's per-query values beside the regression files (a few KB a
run, see ``pyserini_moe.lab.regress``), and ``eval --run NAME=PATTERN`` reads such a file in
place of its run. One format for both writers, ``eval --per-query`` and the runner::

    run<TAB>qid<TAB>ndcg@10<TAB>recall@100
    separate-dense-seeds.scifact.test<TAB>1<TAB>0.630930<TAB>1.000000
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, iter_lines, open_text_output

HEADER = ("run", "qid")
# Per-query values are written to 6 decimals: a mean over Q queries is then within 5e-7 of the
# run's, below the 4 decimals the regression files and tables report.
PerQuery = dict[str, dict[str, float]]  # metric -> qid -> value


def is_per_query_file(path: str | Path) -> bool:
    """A file (gzipped when named ``.gz``) whose first line is this format's header (``run``,
    ``qid``, then metrics); anything unreadable is left to the run reader to name."""
    try:
        _, first = next(iter_lines(Path(path)), (0, ""))
    except (OSError, UserError):
        return False
    columns = first.split("\t")
    return tuple(columns[:2]) == HEADER and len(columns) > 2


def write_per_query(path: str | Path, scores: Mapping[str, PerQuery],
                    metrics: Sequence[str]) -> None:
    """``{run name: {metric: {qid: value}}}`` as one file (atomically; ``.gz`` gzipped)."""
    with atomic_path(path) as tmp, open_text_output(tmp, Path(path)) as f:
        f.write("\t".join([*HEADER, *metrics]) + "\n")
        for name, values in scores.items():
            for qid in values[metrics[0]]:
                f.write("\t".join([name, qid, *(f"{values[m][qid]:.6f}" for m in metrics)])
                        + "\n")


def read_per_query(path: str | Path, qrels: Mapping[str, object],
                   metrics: Sequence[str]) -> PerQuery:
    """The one run of a per-query file, for ``metrics``, checked against ``qrels``: a file of
    another collection or split (other queries), of several runs, or without a metric asked
    for would give a mean of something else, and is refused naming what differs."""
    lines = list(iter_lines(Path(path)))
    columns = lines[0][1].split("\t")[len(HEADER):]
    missing = [m for m in metrics if m not in columns]
    if missing:
        raise UserError(f"{path}: per-query values of {', '.join(columns)}, not of "
                        f"{', '.join(missing)}: ask for those metrics, or evaluate the run itself")
    names: set[str] = set()
    values: PerQuery = {m: {} for m in metrics}
    for number, line in lines[1:]:
        fields = line.split("\t")
        if len(fields) != len(HEADER) + len(columns):
            raise UserError(f"{path}:{number}: expected {len(HEADER) + len(columns)} "
                            f"tab-separated fields, got {len(fields)}")
        names.add(fields[0])
        row = dict(zip(columns, fields[len(HEADER):]))
        for m in metrics:
            try:
                value = float(row[m])
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise UserError(f"{path}:{number}: {m} {row[m]!r} is not a number")
            values[m][fields[1]] = value
    if len(names) > 1:
        raise UserError(f"{path} holds the per-query values of {len(names)} runs "
                        f"({', '.join(sorted(names))}): give one run per file")
    queries = set(values[metrics[0]])
    if queries != set(qrels):
        raise UserError(f"{path}: its {len(queries)} queries are not the qrels' {len(qrels)} "
                        f"({len(queries - set(qrels))} not judged there, "
                        f"{len(set(qrels) - queries)} of the qrels missing): kept for other "
                        "qrels?")
    return {m: {q: values[m][q] for q in qrels} for m in metrics}  # the qrels' order, as a run's
