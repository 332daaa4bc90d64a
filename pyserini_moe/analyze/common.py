"""What every analysis shares: figures without pyplot, and reports printed and written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path


def figure(width: float = 6.4, height: float = 4.0, ncols: int = 1) -> tuple[Any, Any]:
    """A figure without pyplot (no GUI backend, no global state): safe in tests and on servers."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def emit(text: str, output: str | Path | None) -> None:
    """Print a report, and write it to ``output`` (atomically) when one is given."""

    print(text)
    if output:
        with atomic_path(output) as tmp:
            tmp.write_text(text)


def save_png(fig: Any, path: str | Path) -> None:
    """Write ``fig`` as a PNG, atomically."""

    with atomic_path(path) as tmp:  # the temporary name has no .png suffix: say the format
        fig.savefig(tmp, format="png", dpi=150)




def refuse_past_positions(model: Any, lengths: dict[str, int]) -> None:
    """``{flag: tokens}`` checked against the model's token positions before any text is
    routed or embedded: a length above them passes with short texts and fails, as a tensor-size
    traceback from the backbone, at the first text that long (as ``index`` and ``analyze
    checkpoints`` refuse it)."""
    from pyserini_moe.encode.common import position_limit  # noqa: PLC0415 - torch: not for --help

    limit = position_limit(model)
    for flag, value in lengths.items():
        if limit is not None and value > limit:
            raise UserError(f"{flag} {value} is above the {limit} token positions this model "
                            f"has: use {flag} {limit} or less")
