"""The settings tables of docs/<system>.md against the paper-scale files they name: a later edit
of a recipe or regression file cannot drift from the documented (and paper-checked) value
silently.

A table row names a ``file`` and a ``field``: a dotted YAML path into the file, or a command-line
flag (``--faiss-params``) meaning every occurrence of the flag in the file is followed by the
value. ``our value`` is compared with the file's after YAML parsing (numbers as numbers)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("came", "cotmote", "sbmoe", "taser")
HEADING = "## Paper-scale settings"
COLUMNS = ["setting", "paper (section)", "file", "field", "our value", "why they differ"]
TICKED = re.compile(r"^`([^`]+)`$")


def settings_rows(page: Path) -> list[dict[str, str]]:
    """The rows of the first table after the page's settings heading, as column -> cell."""
    text = page.read_text(encoding="utf-8")
    assert HEADING in text, f"{page} has no '{HEADING}' section"
    lines = text.split(HEADING, 1)[1].splitlines()
    table = [line for line in _first_block(lines) if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == COLUMNS, f"{page}: settings table columns {header} != {COLUMNS}"
    return [dict(zip(COLUMNS, _cells(line))) for line in table[2:]]


def _first_block(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def _cells(line: str) -> list[str]:
    # a cell may hold `a | b` inside backticks: split on pipes outside backticks only
    cells, current, ticked = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            ticked = not ticked
        if ch == "|" and not ticked:
            cells.append(current.strip())
            current = ""
        else:
            current += ch
    cells.append(current.strip())
    return cells


def same(expected: object, found: object) -> bool:
    """Equal as numbers when both read as numbers (YAML reads 1e-4 as a string), else as text."""
    try:
        a, b = float(str(expected)), float(str(found))
    except ValueError:
        return str(expected) == str(found)
    return math.isclose(a, b, rel_tol=1e-9)


def file_values(path: Path, field: str) -> list[object]:
    """What ``field`` holds in ``path``: a flag's values (every occurrence) or a dotted path's."""
    node: object = yaml.safe_load(path.read_text(encoding="utf-8"))
    if field.startswith("--"):  # in the file's strings (its commands), not in its comments
        pattern = re.compile(rf"(?<![\w-]){re.escape(field)}[ =](\S+)")
        return [v for text in _strings(node) for v in pattern.findall(text)]
    for key in field.split("."):
        assert isinstance(node, dict) and key in node, f"{path}: no field {field}"
        node = node[key]
    return [node]


def _strings(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        node = list(node.values())
    return [s for item in node for s in _strings(item)] if isinstance(node, list) else []


def checked_rows() -> list[tuple[str, dict[str, str]]]:
    """Rows that name a file, of every page that has the section (a page without it fails
    ``test_every_paper_page_has_a_settings_table_tied_to_files``, not the collection)."""
    pages = {s: ROOT / "docs" / f"{s}.md" for s in SYSTEMS}
    return [(system, row) for system, page in pages.items()
            if HEADING in page.read_text(encoding="utf-8")
            for row in settings_rows(page) if TICKED.match(row["file"])]


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_paper_page_has_a_settings_table_tied_to_files(system: str) -> None:
    rows = settings_rows(ROOT / "docs" / f"{system}.md")
    assert len(rows) >= 10
    tied = [r for r in rows if TICKED.match(r["file"])]
    assert len(tied) >= 8, f"docs/{system}.md: only {len(tied)} rows name a file and a field"
    for row in rows:
        assert row["paper (section)"] and row["our value"], row


@pytest.mark.parametrize("system,row", checked_rows(),
                         ids=lambda v: v if isinstance(v, str) else v["setting"][:40])
def test_documented_value_is_the_files_value(system: str, row: dict[str, str]) -> None:
    path = ROOT / TICKED.match(row["file"]).group(1)
    field = TICKED.match(row["field"])
    value = TICKED.match(row["our value"])
    assert path.is_file(), f"docs/{system}.md names a missing file {path}"
    assert field and value, f"docs/{system}.md: {row['setting']}: field and value need backticks"
    expected = yaml.safe_load(value.group(1))
    found = file_values(path, field.group(1))
    assert found, f"{path}: {field.group(1)} does not occur"
    for got in found:
        assert same(expected, got), (f"docs/{system}.md says {row['setting']} = {expected!r}, "
                                     f"{path.name} has {field.group(1)} = {got!r}")


def test_the_checker_catches_a_drifted_value(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("training:\n  learning_rate: 3.0e-5\n# --faiss-params x in a comment\nsteps:\n"
                      "  - 'x --faiss-params nprobe=32 --hits 10'\n"
                      "  - 'x --faiss-params nprobe=1 --hits 10'\n")
    assert file_values(recipe, "training.learning_rate") == [3.0e-5]
    assert same(yaml.safe_load("3e-5"), 3.0e-5) and not same(yaml.safe_load("5e-5"), 3.0e-5)
    assert file_values(recipe, "--faiss-params") == ["nprobe=32", "nprobe=1"]
    assert not all(same("nprobe=32", v) for v in file_values(recipe, "--faiss-params"))
    assert _cells("| a | `x | y` | b |") == ["a", "`x | y`", "b"]
