"""What every analysis shares: figures without pyplot, and reports printed and written atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.eval.outputs import Sign, png_sign, refuse_foreign_outputs, text_sign
from pyserini_moe.io import atomic_path

# The openings of the reports the analyses write (``--output``): taser routing, sbmoe experts and
# expert-count, cotmote divergence, came and came-competition; checkpoints' report is a heading of
# the user's --title followed by its fixed summary line.
REPORT_OPENINGS = ("Routing of ", "Experts won at inference", "SB-MoE against the number of experts",
                   "Query-passage divergences", "# CAME: experts and fusion on",
                   "# CAME's competition during training")
CHECKPOINTS_SUMMARY = "training seed(s); each rule's kept step"
# Written into every plot's PNG text chunks as its ``Source`` entry (save_png), the one sign of a
# plot of ours: Matplotlib's own ``Software`` entry is in every figure a user saves with it (the
# results pages' plots from before this entry were stamped with it once).
PLOT_KEY = "Source"
PLOT_MARK = "python -m pyserini_moe.analyze"
_OUTPUT_SIGNS: dict[str, Sign] = {
    "--output": text_sign(lambda lines: lines[0].startswith(REPORT_OPENINGS)
                          or (lines[0].startswith("### ") and len(lines) > 2
                              and CHECKPOINTS_SUMMARY in lines[2])),
    "--plot": png_sign(PLOT_KEY, PLOT_MARK),
}


def refuse_foreign_reports(output: str | None, plot: str | None) -> None:
    """An existing ``--output`` / ``--plot`` is replaced only when an earlier analysis wrote it
    (as ``eval`` does with its outputs): a user's notes or picture named by mistake is refused
    before the work, not replaced by a report without a word."""
    refuse_foreign_outputs({"--output": output, "--plot": plot}, _OUTPUT_SIGNS, "analyze")


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
        fig.savefig(tmp, format="png", dpi=150, metadata={PLOT_KEY: PLOT_MARK})




def refuse_run_without_judged_queries(name: str, path: str, run: Mapping[str, Any],
                                      qrels: Mapping[str, Any], qrels_name: str) -> None:
    """A run sharing no query with the qrels scores 0 on every metric, a row that reads as a
    measurement; it is the qrels of another split or collection, refused naming both."""
    if not set(run) & set(qrels):
        raise UserError(f"{name} run {path}: none of its {len(run)} queries is in the qrels "
                        f"{qrels_name} (wrong --qrels?)")




def refuse_unread_seed(seed: int, readers: Mapping[str, bool]) -> None:
    """``--seed`` (default 0) given where nothing is drawn at random: ``readers`` names each
    flag that would draw with it and whether it is given. A seed read by nothing changes no
    number; accepted, it reads as a seeded (sampled) analysis that was in fact exhaustive."""
    if seed != 0 and not any(readers.values()):
        raise UserError(f"--seed {seed}: nothing in this analysis is drawn at random (only "
                        f"{' or '.join(readers)} would); leave --seed out")


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
