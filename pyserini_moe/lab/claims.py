"""Claims tables generated from the kept per-query values, not typed.

A paper's claims are declared once here (which two conditions, which direction); the table is
computed from ``regressions/per-query/<file>/<condition>.s<seed>.tsv``: each condition's mean ±
sd over its seeds, the matched-seed test (:func:`~pyserini_moe.eval.seeds.compare_matched`: the
seeds of both sides are the same trainings' seeds, or one training read two ways), the raw and
Holm-adjusted p over the paper's family of directional claims, the minimum detectable effect,
and a verdict decided on the adjusted p (or, for a claim of no difference, by equivalence within
0.01). ``python -m pyserini_moe.lab.claims cotmote-protocol`` prints it;
``--output docs/results/<file>.claims.md`` writes the page a test holds equal to the generated
one.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from pyserini_moe.data.topics import load_qrels
from pyserini_moe.eval.metrics import format_table
from pyserini_moe.eval.per_query import read_per_query
from pyserini_moe.eval.seeds import (
    EQUIVALENCE_MARGIN,
    SeedComparison,
    compare_matched,
    equivalence_verdict,
    holm,
)
from pyserini_moe.io import atomic_path
from pyserini_moe.lab.regress import KEPT_DIR

METRIC = "ndcg@10"
SEEDS = (42, 43, 44)


@dataclasses.dataclass(frozen=True)
class Claim:
    """``a`` beats ``b`` (``kind`` "better") or the two are level (``kind`` "level"), on the
    kept per-query values of two conditions of one regression file."""

    text: str
    a: str
    b: str
    qrels: str = "scifact:test"
    kind: str = "better"


# The CoT-MoTE paper's claims (docs/cotmote.md), at its protocol: every side has seeds 42-44 kept.
COTMOTE = [
    Claim("MoTE > Siamese, dense (table 3)", "mote-dense-seeds.scifact.test",
          "siamese-dense-seeds.scifact.test"),
    Claim("MoTE > Siamese, sparse (table 3)", "mote-sparse-seeds.scifact.test",
          "siamese-sparse-seeds.scifact.test"),
    Claim("MoTE > Siamese, hybrid (table 3)", "mote-hybrid-seeds.scifact.test",
          "siamese-hybrid-seeds.scifact.test"),
    Claim("hybrid > dense, MoTE (table 3)", "mote-hybrid-seeds.scifact.test",
          "mote-dense-seeds.scifact.test"),
    Claim("hybrid > sparse, MoTE (table 3)", "mote-hybrid-seeds.scifact.test",
          "mote-sparse-seeds.scifact.test"),
    Claim("Siamese > fully separated, hybrid (tables 1, 3)", "siamese-hybrid-seeds.scifact.test",
          "separate-hybrid-seeds.scifact.test"),
    Claim("Siamese > fully separated, dense (tables 1, 3)", "siamese-dense-seeds.scifact.test",
          "separate-dense-seeds.scifact.test"),
    Claim("MoTE > fully separated, hybrid (table 3)", "mote-hybrid-seeds.scifact.test",
          "separate-hybrid-seeds.scifact.test"),
    Claim("retriever-mined negatives help (round 2, table 5)",
          "mote-round2-hybrid-seeds.scifact.test", "mote-hybrid-seeds.scifact.test"),
    *[Claim(f"MoTE > Siamese zero-shot, hybrid, {label}",
            f"mote-hybrid-zeroshot-seeds.{name}.test",
            f"siamese-hybrid-zeroshot-seeds.{name}.test", f"{name}:test")
      for name, label in (("cranfield", "Cranfield"), ("cisi", "CISI"), ("vaswani", "Vaswani"))],
    Claim("MoTE > Siamese zero-shot, dense, ArguAna", "mote-dense-zeroshot-seeds.arguana.test",
          "siamese-dense-zeroshot-seeds.arguana.test", "arguana:test"),
]
FAMILIES = {"cotmote-protocol": COTMOTE}


@dataclasses.dataclass(frozen=True)
class Row:
    claim: Claim
    a: np.ndarray  # seeds x queries
    b: np.ndarray
    test: SeedComparison


def scores(file: str, condition: str, qrels: dict, kept: Path = KEPT_DIR) -> np.ndarray:
    """(seeds x queries) nDCG@10 of one condition from its kept per-query files."""
    rows = []
    for seed in SEEDS:
        values = read_per_query(kept / file / f"{condition}.s{seed}.tsv", qrels, [METRIC])[METRIC]
        rows.append([values[q] for q in sorted(values)])
    return np.array(rows)


def measure(file: str, kept: Path = KEPT_DIR) -> list[Row]:
    rows, qrels_of = [], {}
    for claim in FAMILIES[file]:
        if claim.qrels not in qrels_of:
            qrels_of[claim.qrels] = load_qrels(claim.qrels)
        a = scores(file, claim.a, qrels_of[claim.qrels], kept)
        b = scores(file, claim.b, qrels_of[claim.qrels], kept)
        rows.append(Row(claim, a, b, compare_matched(a, b)))
    return rows


def verdict(row: Row, adjusted: float | None) -> str:
    """``better``: held / reversed on the Holm-adjusted p, else not shown (its MDE says what the
    data could have found); ``level``: equivalence within the margin."""
    if row.claim.kind == "level":
        return equivalence_verdict(row.test)
    if adjusted is not None and adjusted <= 0.05:
        return "**held**" if row.test.effect > 0 else "**reversed**"
    return "not shown"


def table(file: str, kept: Path = KEPT_DIR) -> str:
    rows = measure(file, kept)
    directional = [i for i, r in enumerate(rows) if r.claim.kind == "better"]
    adjusted = dict(zip(directional, holm([rows[i].test.p_value for i in directional])))
    cells = []
    for i, row in enumerate(rows):
        t = row.test
        mean_sd = [f"{m.mean():.4f} ± {np.std(m.mean(axis=1), ddof=1):.4f}"
                   for m in (row.a, row.b)]
        cells.append([row.claim.text, *mean_sd,
                      f"{t.effect:+.4f} [{t.ci_low:+.4f}, {t.ci_high:+.4f}]", _p(t.p_value),
                      _p(adjusted[i]) if i in adjusted else "-", f"{t.mde():.4f}",
                      verdict(row, adjusted.get(i))])
    headers = ["claim", "A (mean ± sd over seeds)", "B", "A - B [95% interval]", "p",
               "Holm p", "MDE (80%)", "verdict"]
    return (f"# {file}: claims, generated\n\n"
            f"<!-- generated by: python -m pyserini_moe.lab.claims {file} --output "
            f"docs/results/{file}.claims.md -->\n\n"
            f"{METRIC} over the kept per-query values of seeds {', '.join(map(str, SEEDS))} on "
            "both sides (regressions/per-query/). Each test pairs seed s of A with seed s of B "
            "(the same data order and negatives, or one training read two ways): "
            "pyserini_moe.eval.seeds.compare_matched. Holm's adjustment runs over this family's "
            f"{len(directional)} directional claims, and the verdict reads the adjusted p; MDE "
            "is the difference found 8 times in 10 at each test's noise. A claim of no "
            f"difference would be tested for equivalence within {EQUIVALENCE_MARGIN}.\n\n"
            + format_table(headers, cells) + "\n")


def _p(value: float) -> str:
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyserini_moe.lab.claims",
                                     description="Generate a paper's claims table from the "
                                                 "kept per-query values.")
    parser.add_argument("file", choices=sorted(FAMILIES), help="the regression file's name")
    parser.add_argument("--output", help="write the page here (else print it)")
    args = parser.parse_args(argv)
    page = table(args.file)
    if args.output:
        with atomic_path(args.output) as tmp:
            tmp.write_text(page)
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
