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

from pyserini_moe.data import load_qrels
from pyserini_moe.eval import (
    EQUIVALENCE_MARGIN,
    SeedComparison,
    compare_matched,
    equivalence_verdict,
    format_table,
    holm,
    no_worse_verdict,
    read_per_query,
)
from pyserini_moe.io import atomic_path
from pyserini_moe.lab.regress import KEPT_DIR

METRIC = "ndcg@10"
SEEDS = (42, 43, 44)


@dataclasses.dataclass(frozen=True)
class Claim:
    """``a`` beats ``b`` (``kind`` "better"), ``a`` is no worse than ``b`` ("no_worse": a paper's
    "A >= B", tested as non-inferiority), or the two are level ("level": equivalence), on the
    kept per-query values of two conditions of one regression file."""

    text: str
    a: str
    b: str
    qrels: str = "scifact:test"
    kind: str = "better"
    file: str | None = None  # the regression file of both sides, when not the family's own


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

# The TASER paper's claims (docs/taser.md) at its protocol, on the CPU-trained rows (one device a
# verdict). A claim whose sides are not all kept yet is listed as pending: the family's size, and
# so the adjustment, counts it all the same.
_DETR = "taser-detr-last-cpu.scifact.test"
TASER = [
    Claim("Det-R >= DPR, a two-encoder model with 1.8x its parameters (section 5)", _DETR,
          "dpr-last-cpu.scifact.test", kind="no_worse"),
    Claim("Det-R > Siamese, one shared encoder (section 5)", _DETR,
          "siamese-last-cpu.scifact.test"),
    Claim("Det-R >= Seq-R, learned sequence routing (table A1)", _DETR,
          "taser-seqr-last-cpu.scifact.test", kind="no_worse"),
    Claim("Det-R >= Tok-R, learned token routing (table A1)", _DETR,
          "taser-tokr-last-cpu.scifact.test", kind="no_worse"),
    Claim("Det-R > capacity control, its parameters without routing (not the paper's)", _DETR,
          "capacity-control-last-cpu.scifact.test"),
    Claim("round-2 negatives help (appendix B)", "taser-detr-round2-seeds.scifact.test", _DETR),
    Claim("Det-R + BM25 > Det-R (appendix D)", "taser-detr-last-cpu+bm25-hybrid.scifact.test",
          _DETR),
    *[Claim(f"Det-R > Siamese zero-shot, {label} (section 5)",
            f"taser-detr-last-cpu-zeroshot.{name}.test", f"siamese-last-cpu-zeroshot.{name}.test",
            f"{name}:test")
      for name, label in (("arguana", "ArguAna"), ("cranfield", "Cranfield"), ("cisi", "CISI"),
                          ("vaswani", "Vaswani"))],
]
# The CAME paper's claims (docs/came.md): tables 2 and 3 at its protocol (trained on a lent GPU,
# no per-query values kept: pending until re-trained with them), table 4's fusions at the quick
# recipe (came-scifact.yaml, three CPU seeds, one training read by each fusion).
_SUM, _QUICK = "came-sum-last.scifact.test", "came-scifact"
_QUICK_SUM = "came-exact-last-seeds.scifact.test"  # the exact came_sum over the three indexes
CAME = [
    *[Claim(f"the fused model beats its {expert} expert (table 3)", _SUM,
            f"came-{expert}-expert-last.scifact.test") for expert in ("local", "lexical", "global")],
    Claim("competitive learning beats the standardized stage alone (table 2)", _SUM,
          "came-standardized-sum-last.scifact.test"),
    *[Claim(f"{name} does not beat the plain sum (table 4)", _QUICK_SUM,
            f"came-{fusion}-last-seeds.scifact.test", kind="no_worse", file=_QUICK)
      for name, fusion in (("NormSum", "norm_sum"), ("a learned linear layer", "linear"))],
    *[Claim(f"the plain sum beats {name} (table 4)", _QUICK_SUM,
            f"came-{fusion}-last-seeds.scifact.test", file=_QUICK)
      for name, fusion in (("NormMax", "norm_max"), ("MaxRR", "max_rr"),
                           ("reciprocal-rank SumRR", "sum_rr"))],
]
# The SB-MoE paper's claims (docs/sbmoe.md) at its protocol, for our residual mixture and the
# published block, TOP-1 unless said: trained on a lent GPU without per-query values (but the
# published random gate's CPU seeds): pending until re-trained with them.
_FT = "fine-tuned-last"
SBMOE = [
    *[Claim(f"SB-MoE beats the fine-tuned backbone, {mix} (table I)",
            f"sbmoe-top1-{mix}-last.scifact.test", f"{_FT}.scifact.test")
      for mix in ("residual", "published")],
    *[Claim(f"SB-MoE ALL >= TOP-1, {mix} (section VI)", f"sbmoe-all-{mix}-last.scifact.test",
            f"sbmoe-top1-{mix}-last.scifact.test", kind="no_worse")
      for mix in ("residual", "published")],
    *[Claim(f"the learned gate beats a random gate, {mix} (RQ2)",
            f"sbmoe-top1-{mix}-last.scifact.test", f"random-gate-{mix}-last.scifact.test")
      for mix in ("residual", "published")],
    *[Claim(f"{n} experts beat the fine-tuned backbone (figure 2)",
            f"sbmoe-{n}-experts-residual-last.scifact.test", f"{_FT}.scifact.test")
      for n in (3, 9, 12)],
    *[Claim(f"SB-MoE generalises better zero-shot, {mix}, {label} (table II)",
            f"sbmoe-top1-{mix}-last-zeroshot.{name}.test", f"{_FT}-zeroshot.{name}.test",
            f"{name}:test")
      for mix in ("residual", "published")
      for name, label in (("arguana", "ArguAna"), ("cranfield", "Cranfield"), ("cisi", "CISI"),
                          ("vaswani", "Vaswani"))],
    Claim("the routed experts beat their parameters without routing (not the paper's)",
          "sbmoe-top1-residual-last.scifact.test", "capacity-control-last.scifact.test"),
]
FAMILIES = {"cotmote-protocol": COTMOTE, "taser-protocol": TASER, "came-protocol": CAME,
            "sbmoe-protocol": SBMOE}


@dataclasses.dataclass(frozen=True)
class Row:
    claim: Claim
    a: np.ndarray | None  # seeds x queries; None while a side's values are not all kept
    b: np.ndarray | None
    test: SeedComparison | None

    @property
    def pending(self) -> bool:
        return self.test is None


def is_kept(file: str, condition: str, kept_dir: Path = KEPT_DIR) -> bool:
    """Whether every seed's per-query values of ``condition`` are kept."""
    return all((kept_dir / file / f"{condition}.s{seed}.tsv").is_file() for seed in SEEDS)


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
        where = claim.file or file
        if not (is_kept(where, claim.a, kept) and is_kept(where, claim.b, kept)):
            rows.append(Row(claim, None, None, None))
            continue
        a = scores(where, claim.a, qrels_of[claim.qrels], kept)
        b = scores(where, claim.b, qrels_of[claim.qrels], kept)
        rows.append(Row(claim, a, b, compare_matched(a, b)))
    return rows


def verdict(row: Row, adjusted: float | None, alpha: float = 0.05) -> str:
    """``better``: held / reversed on the adjusted p, else not shown (its MDE says what the data
    could have found); ``no_worse``: non-inferiority within the margin, its one-sided bounds at
    the family's Bonferroni level ``alpha``; ``level``: equivalence within the margin."""
    if row.test is None:
        return "pending: not every seed's values kept"
    if row.claim.kind == "level":
        return equivalence_verdict(row.test)
    if row.claim.kind == "no_worse":
        said = no_worse_verdict(row.test, alpha=alpha)
        return f"**{said}**" if not said.startswith("not shown") else said
    if adjusted is not None and adjusted <= 0.05:
        return "**held**" if row.test.effect > 0 else "**reversed**"
    return "not shown"


def adjust(rows: list[Row]) -> tuple[dict[int, float], str]:
    """The family's adjusted p of each measured row, and how: Holm's over the family's tested
    claims (``better`` and ``no_worse``), or, while some are pending, Bonferroni's m x p (an
    upper bound on the Holm p each would get, whatever the pending ones turn out to be)."""
    family = [i for i, r in enumerate(rows) if r.claim.kind != "level"]
    measured = [i for i in family if not rows[i].pending]
    if len(measured) == len(family):
        return dict(zip(family, holm([rows[i].test.p_value for i in family]))), "Holm"
    return {i: min(1.0, len(family) * rows[i].test.p_value) for i in measured}, "Bonferroni"


def table(file: str, kept: Path = KEPT_DIR) -> str:
    rows = measure(file, kept)
    adjusted, method = adjust(rows)
    family = sum(1 for r in rows if r.claim.kind != "level")
    pending = sum(1 for r in rows if r.pending)
    cells = []
    for i, row in enumerate(rows):
        if row.pending:
            cells.append([row.claim.text, *["-"] * 6, verdict(row, None)])
            continue
        t = row.test
        mean_sd = [f"{m.mean():.4f} ± {np.std(m.mean(axis=1), ddof=1):.4f}"
                   for m in (row.a, row.b)]
        cells.append([row.claim.text, *mean_sd,
                      f"{t.effect:+.4f} [{t.ci_low:+.4f}, {t.ci_high:+.4f}]", _p(t.p_value),
                      _p(adjusted[i]) if i in adjusted else "-", f"{t.mde():.4f}",
                      verdict(row, adjusted.get(i), 0.05 / family)])
    headers = ["claim", "A (mean ± sd over seeds)", "B", "A - B [95% interval]", "p",
               f"{method} p", "MDE (80%)", "verdict"]
    how = (f"Holm's adjustment runs over this family's {family} claims" if method == "Holm" else
           f"{pending} of the family's {family} claims are pending (their values not yet kept "
           f"for every seed), so the adjusted p is Bonferroni's {family} x p, an upper bound on "
           "the Holm p each will get")
    return (f"# {file}: claims, generated\n\n"
            f"<!-- generated by: python -m pyserini_moe.lab.claims {file} --output "
            f"docs/results/{file}.claims.md -->\n\n"
            f"{METRIC} over the kept per-query values of seeds {', '.join(map(str, SEEDS))} on "
            "both sides (regressions/per-query/). Each test pairs seed s of A with seed s of B "
            "(the same data order and negatives, or one training read two ways): "
            f"pyserini_moe.eval.seeds.compare_matched. {how}, and the verdict reads the "
            "adjusted p; MDE is the difference found 8 times in 10 at each test's noise. A claim "
            f"that A is no worse than B (A >= B) is tested for non-inferiority within "
            f"{EQUIVALENCE_MARGIN}, its one-sided bounds at 0.05 / {family}; a claim of no "
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
