"""What this repository measured with a recipe, for the model card of every model trained from
it: the regression rows whose steps train that recipe, with their recorded means."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.io import read_yaml


def measured_rows(recipe: Path) -> list[str]:
    """One Markdown line per regression row that trains ``recipe`` (a ``train --config
    .../encoders/<recipe>`` step) and records a value: the row, its file, its seeds and each
    metric's mean (± sd over the seeds). The rows are read from the ``regressions/`` folder
    beside the recipe's ``encoders/`` folder, as in a checkout of this repository; a recipe
    elsewhere has none. A file that does not read is skipped: a card is no place to fail."""
    recipe = recipe.resolve()
    folder = recipe.parent.parent / "regressions"
    if recipe.parent.name != "encoders" or not folder.is_dir():
        return []
    lines = []
    for file in sorted(folder.glob("*.yaml")):
        try:
            data = read_yaml(file, "regression file", ValueError)
        except (UserError, ValueError, OSError):
            continue
        conditions = data.get("conditions") if isinstance(data, dict) else None
        for row in conditions if isinstance(conditions, list) else []:
            line = _row_line(row, recipe.name, file.name)
            if line:
                lines.append(line)
    return lines


def _row_line(row: Any, recipe: str, file: str) -> str | None:
    """The card's line for one regression row, if it trains ``recipe`` and records a value."""
    if not isinstance(row, dict):
        return None
    steps = [s for s in row.get("steps") or [] if isinstance(s, str)]
    train = next((s for s in steps if "pyserini_moe.train " in s
                  and f"/encoders/{recipe} " in f"{s} "), None)
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    values = [f"{name} {v['expected']:.4f}" + (f" ± {v['sd']:.4f}" if _number(v.get("sd")) else "")
              for name, v in metrics.items() if isinstance(v, dict) and _number(v.get("expected"))]
    if train is None or not values:
        return None
    words = shlex.split(train)
    sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
    seeds = row.get("seeds")
    seeded = f"seeds {', '.join(map(str, seeds))}" if isinstance(seeds, list) else "one seed"
    with_sets = f"; with --set {', '.join(sets)}" if sets else ""
    return f"- `{row.get('name')}` ({file}, {seeded}{with_sets}): {', '.join(values)}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
