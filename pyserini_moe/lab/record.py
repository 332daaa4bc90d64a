"""``regress --record``: write what a run measured back into its regression file.

A regression file is prose as much as data (comments, folded descriptions, a ``source`` line per
row saying where each number came from), so it is never re-dumped through a YAML writer: only the
``metrics`` entry of each recorded condition is rewritten, in the style it was written in (one
``metrics: {...}`` line, or one line per metric), and the new file must load before it replaces
the old one. A multi-seed row gets its seeds' values (4 decimals, the precision the files keep)
with their mean and standard deviation, and a metric of two or more seeds measured for the first
time trades its stand-in tolerance (``{expected: null, tolerance: 0.01}``) for ``spread``; every
other tolerance stays as written. A seed re-run on its own (``--seed``) replaces that seed's
value only, the others kept as recorded. The ``source`` line is left alone: when, where and how a
value was measured is for the person recording it to write.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.eval import SeedSummary
from pyserini_moe.io import atomic_path, read_yaml
from pyserini_moe.lab.regress import (
    Condition,
    Outcome,
    Regression,
    RegressionSpecError,
    load_regression,
)

# Rows whose value can be recorded: measured for every seed (ERROR, SKIP and PLAN: nothing
# measured; SEEDS, some seeds only: see _recordable).
RECORDABLE = frozenset({"OK", "FAIL", "UNSET"})


def record(reg: Regression, rows: Sequence[Outcome]) -> tuple[list[str], list[str]]:
    """Write the measured values of ``rows`` into ``reg.path``. Returns (recorded, left): the
    conditions rewritten, and those left as they were because a value is missing (a row not
    measured, or measured for some of its seeds while the others have no value in the file)."""
    by_name: dict[str, list[Outcome]] = {}
    for row in rows:
        by_name.setdefault(row.condition, []).append(row)
    conditions = {c.name: c for c in reg.conditions}
    recorded = [name for name, group in by_name.items()
                if _recordable(conditions[name], group)]
    left = [name for name in by_name if name not in recorded]
    if not recorded:
        return [], left
    raw = {c["name"]: c for c in read_yaml(reg.path, "regression file",
                                           RegressionSpecError)["conditions"]}
    lines = reg.path.read_text(encoding="utf-8").split("\n")
    for name in recorded:
        entries = _entries(raw[name], conditions[name], by_name[name])
        lines = _rewrite_metrics(lines, name, entries, reg.path)
    with atomic_path(reg.path) as tmp:
        tmp.write_text("\n".join(lines), encoding="utf-8")
        load_regression(tmp)  # what does not load never replaces the file
    return recorded, left


def _recordable(condition: Condition, rows: list[Outcome]) -> bool:
    """Every metric measured; or, a seed re-run on its own (``--seed``), measured for some seeds
    while the file holds every seed's value, the others then kept as they are recorded."""
    if any(r.measured is None for r in rows):
        return False
    recorded = {k.metric: k.seeds for k in condition.checks}
    return all(r.status in RECORDABLE or (r.status == "SEEDS" and recorded[r.metric])
               for r in rows)


def _entries(raw: dict, condition: Condition, rows: list[Outcome]) -> dict[str, str]:
    """Each metric's new value as YAML flow text, in the file's order of metrics."""
    measured = {r.metric: r for r in rows}
    recorded = {k.metric: k.seeds for k in condition.checks}
    return {metric: _entry(spec, measured[metric], condition.seeds, recorded[metric])
            for metric, spec in raw["metrics"].items()}


def _entry(spec: Any, row: Outcome, seeds: tuple[int, ...], recorded: tuple[float, ...]) -> str:
    """``0.1234`` or ``{expected: ..., [sd: ..., seeds: [...],] [tolerance: ...]}``: the form
    the metric was written in, with the measured value (``recorded``: its seeds' values in the
    file, kept for the seeds not measured now)."""
    given = spec if isinstance(spec, dict) else {"expected": spec}
    tolerance = given.get("tolerance")
    if not seeds:
        if not isinstance(spec, dict):
            return f"{row.measured:.4f}"
        parts = [f"expected: {row.measured:.4f}"]
    else:
        # the mean and sd of the values as written, so the file checks itself when loaded; a
        # seed not measured now (a --seed run) keeps its recorded value
        values = tuple(round(row.seeds[seed], 4) if seed in row.seeds else recorded[i]
                       for i, seed in enumerate(seeds))
        summary = SeedSummary(values)
        parts = [f"expected: {summary.mean:.4f}"]
        if len(values) > 1:
            parts.append(f"sd: {summary.sd:.4f}")
            if given.get("expected") is None:  # the stand-in tolerance of a row not yet measured
                tolerance = "spread"
        parts.append("seeds: [" + ", ".join(f"{v:.4f}" for v in values) + "]")
    if tolerance is not None:
        parts.append(f"tolerance: {tolerance}")
    return "{" + ", ".join(parts) + "}"


def _rewrite_metrics(lines: list[str], name: str, entries: dict[str, str],
                     path: Path) -> list[str]:
    """``lines`` with condition ``name``'s ``metrics`` entry replaced by ``entries``."""
    start, end = _condition_block(lines, name, path)
    dash = _indent(lines[start])
    key = re.compile(rf"^ {{{dash + 2}}}metrics:(.*)$")
    at = next((i for i in range(start, end) if key.match(lines[i])), None)
    if at is None:
        raise UserError(f"{path}: condition '{name}': no 'metrics:' line at its keys' indentation "
                        "to record into: write its values by hand")
    rest = key.match(lines[at])[1].strip()
    indent = " " * (dash + 2)
    if rest.startswith("{"):  # flow style, possibly wrapped over several lines
        stop, trailing = _flow_end(lines, at, path, name)
        if any(_comment(lines[i]) for i in range(at, stop)):
            raise UserError(f"{path}: condition '{name}': a comment inside its metrics would be "
                            "lost: move it above 'metrics:' or write the values by hand")
        text = ", ".join(f"{metric}: {value}" for metric, value in entries.items())
        return [*lines[:at], f"{indent}metrics: {{{text}}}{trailing}", *lines[stop + 1:]]
    if rest and not rest.startswith("#"):
        raise UserError(f"{path}: condition '{name}': its metrics are written in a form "
                        f"'--record' does not rewrite ({rest!r}): write its values by hand")
    stop, comments = at, {}
    metric_line = re.compile(rf"^ {{{dash + 4}}}([^\s:#][^:]*):")
    for i in range(at + 1, end):
        text = lines[i]
        if not text.strip():
            continue
        if _indent(text) <= dash + 2:
            break
        metric = metric_line.match(text)
        if text.lstrip().startswith("#") or (_comment(text) and not metric):
            raise UserError(f"{path}: condition '{name}': a comment inside its metrics would be "
                            "lost: move it above 'metrics:' or write the values by hand")
        if metric and _comment(text):  # a metric's own comment stays on its line
            comments[metric[1].strip()] = _comment(text)
        stop = i
    inner = " " * (dash + 4)
    block = [f"{inner}{metric}: {value}{comments.get(metric, '')}"
             for metric, value in entries.items()]
    return [*lines[:at + 1], *block, *lines[stop + 1:]]


def _condition_block(lines: list[str], name: str, path: Path) -> tuple[int, int]:
    """(first line, line after the last) of the list item ``- name: NAME``."""
    item = re.compile(rf"^(\s*)- name:\s*(['\"]?){re.escape(name)}\2\s*(#.*)?$")
    starts = [i for i, text in enumerate(lines) if item.match(text)]
    if len(starts) != 1:
        raise UserError(f"{path}: condition '{name}' is not written as one '- name: {name}' line "
                        "(a flow-style or quoted-key condition): write its values by hand")
    start = starts[0]
    dash = _indent(lines[start])
    for end in range(start + 1, len(lines)):
        text = lines[end]
        if text.strip() and not text.lstrip().startswith("#") and (
                _indent(text) < dash or (_indent(text) == dash and text.lstrip().startswith("- "))):
            return start, end
    return start, len(lines)


def _comment(text: str) -> str:
    """A line's trailing comment with the spaces before it (``"  # why"``), or ``""``."""
    match = re.search(r"\s+#.*$", text)
    return match[0] if match else ""


def _indent(text: str) -> int:
    """The number of spaces a line starts with: where YAML's block structure reads it."""
    return len(text) - len(text.lstrip())


def _flow_end(lines: list[str], at: int, path: Path, name: str) -> tuple[int, str]:
    """(line where the flow mapping opened at ``lines[at]`` closes, the text after it there)."""
    depth = 0
    for i in range(at, len(lines)):
        text = lines[i] if i > at else lines[i].split("metrics:", 1)[1]
        for j, char in enumerate(text):
            if char in "'\"":
                raise UserError(f"{path}: condition '{name}': quoted text inside its metrics: "
                                "write its values by hand")
            depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(char, 0)
            if depth == 0 and char == "}":
                return i, text[j + 1:]
    raise UserError(f"{path}: condition '{name}': its metrics mapping does not close")
