"""Claims tables are generated, not typed: the committed page is what the command makes from the
kept per-query values, and every claim names conditions whose values are kept for every seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyserini_moe.lab import claims
from pyserini_moe.lab.regress import KEPT_DIR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("file", sorted(claims.FAMILIES))
def test_the_committed_claims_page_is_the_generated_one(file) -> None:
    page = ROOT / "docs" / "results" / f"{file}.claims.md"
    assert page.read_text() == claims.table(file), (
        f"regenerate: python -m pyserini_moe.lab.claims {file} --output {page.relative_to(ROOT)}")


# Families whose every claim has both sides kept; the others list some claims as pending.
COMPLETE = ("cotmote-protocol",)


@pytest.mark.parametrize("file", COMPLETE)
def test_every_claim_has_both_sides_kept_for_every_seed(file) -> None:
    for claim in claims.FAMILIES[file]:
        for condition in (claim.a, claim.b):
            for seed in claims.SEEDS:
                assert (KEPT_DIR / file / f"{condition}.s{seed}.tsv").is_file(), (claim, seed)


def test_a_family_with_pending_claims_adjusts_by_bonferroni_over_all_of_them() -> None:
    """While some claims wait for their values, Holm's adjusted p is not known; m x p bounds it
    from above whatever the pending p turn out to be, and the family's size counts them."""
    import numpy as np

    from pyserini_moe.eval.seeds import SeedComparison

    test = SeedComparison(0.01, 0.002, 0.018, 0.01, 8.0, 0.004, 0.0, 3, 3, 300, "matched")
    rows = [claims.Row(claims.TASER[1], np.zeros((3, 2)), np.zeros((3, 2)), test),
            *[claims.Row(c, None, None, None) for c in claims.TASER[2:5]]]
    adjusted, method = claims.adjust(rows)
    assert method == "Bonferroni" and adjusted == {0: pytest.approx(0.04)}
    assert claims.verdict(rows[1], None).startswith("pending")
    adjusted, method = claims.adjust(rows[:1])
    assert method == "Holm" and adjusted == {0: pytest.approx(0.01)}


def test_verdicts_read_the_adjusted_p() -> None:
    """A raw p of 0.016 in a family of 13 is not held; the same effect alone would be."""
    import numpy as np

    from pyserini_moe.eval.seeds import SeedComparison, holm

    assert holm([0.016] + [0.5] * 12)[0] > 0.05
    assert holm([0.016])[0] <= 0.05
    test = SeedComparison(0.01, 0.002, 0.018, 0.016, 8.0, 0.004, 0.0, 3, 3, 300, "matched")
    row = claims.Row(claims.COTMOTE[0], np.zeros((3, 2)), np.zeros((3, 2)), test)
    assert claims.verdict(row, 0.155) == "not shown"
    assert claims.verdict(row, 0.03) == "**held**"


@pytest.mark.parametrize("family", sorted(claims.FAMILIES))
def test_every_claim_names_conditions_of_its_regression_file(family) -> None:
    """A pending claim waits for values of a condition that exists (a misspelt name would wait
    for ever)."""
    from pyserini_moe.lab.regress import load_regression

    for claim in claims.FAMILIES[family]:
        file = ROOT / "regressions" / f"{claim.file or family}.yaml"
        names = {c.name for c in load_regression(file).conditions}
        assert {claim.a, claim.b} <= names, (family, claim)
