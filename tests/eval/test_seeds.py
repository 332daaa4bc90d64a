"""Seed-aware statistics on simulated data whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pyserini_moe.eval.seeds import (
    TOLERANCE_FLOOR,
    SeedSummary,
    compare_matched,
    compare_seeded,
    tolerance_from_spread,
    verdict,
)

QUERIES = 300  # SciFact test's size


def simulate(rng: np.random.Generator, effect: float, seed_sd: float, seeds: int = 3,
             query_sd: float = 0.3, interaction_sd: float = 0.1,
             noise_sd: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Two conditions' (seeds x queries) scores under the module's two-way model."""
    difficulty = rng.normal(0.6, query_sd, QUERIES)

    def condition(mu: float) -> np.ndarray:
        interaction = rng.normal(0, interaction_sd, QUERIES)
        seed_effect = rng.normal(0, seed_sd, (seeds, 1))
        noise = rng.normal(0, noise_sd, (seeds, QUERIES))
        return mu + difficulty + interaction + seed_effect + noise

    return condition(effect), condition(0.0)


def rejection_rate(effect: float, seed_sd: float, trials: int = 400,
                   seeds: int = 3) -> tuple[float, float]:
    """(ours, paired t-test on seed-averaged scores): how often each calls p <= 0.05."""
    rng = np.random.default_rng(7)
    ours = paired = 0
    for _ in range(trials):
        a, b = simulate(rng, effect, seed_sd, seeds)
        ours += compare_seeded(a, b).p_value <= 0.05
        paired += stats.ttest_rel(a.mean(0), b.mean(0)).pvalue <= 0.05
    return ours / trials, paired / trials


def test_seed_noise_fools_the_paired_test_but_not_this_one() -> None:
    # No true effect; training runs shift a whole run by sd 0.02 (the size re-training moved
    # SciFact nDCG@10 here). The paired t-test over queries alone rejects far above 5%.
    ours, paired = rejection_rate(effect=0.0, seed_sd=0.02)
    assert paired > 0.3
    assert ours <= 0.09


def test_without_seed_noise_it_is_the_paired_test() -> None:
    ours, paired = rejection_rate(effect=0.0, seed_sd=0.0, trials=300)
    assert ours <= 0.09 and paired <= 0.09
    rng = np.random.default_rng(3)
    a, b = simulate(rng, 0.01, 0.0)
    ours_p = compare_seeded(a, b).p_value
    assert ours_p == pytest.approx(stats.ttest_rel(a.mean(0), b.mean(0)).pvalue, rel=0.3)


def test_a_large_effect_is_found_across_seeds() -> None:
    ours, _ = rejection_rate(effect=0.08, seed_sd=0.01, trials=100)
    assert ours >= 0.9


def test_interval_covers_the_true_effect_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(300):
        a, b = simulate(rng, 0.03, 0.02, seeds=5)
        c = compare_seeded(a, b)
        covered += c.ci_low <= 0.03 <= c.ci_high
        assert c.effect == pytest.approx(a.mean() - b.mean())
    assert covered / 300 >= 0.9


def test_one_seed_sides_and_verdicts() -> None:
    rng = np.random.default_rng(5)
    a, b = simulate(rng, 0.1, 0.0, seeds=3)
    c = compare_seeded(a, b[:1])
    assert (c.n_a, c.n_b) == (3, 1)
    assert not c.seeds_estimated()  # a trained baseline of one seed
    assert c.seeds_estimated(trained=(True, False))  # BM25 as the baseline: nothing to estimate
    assert verdict(c) == "not shown (1 seed)"
    assert verdict(c, trained=(True, False)) == "held"
    assert verdict(c, claimed_sign=-1, trained=(True, False)) == "reversed"
    same = compare_seeded(a, a)
    assert same.p_value == 1.0 and verdict(same) == "not shown"
    with pytest.raises(ValueError, match="queries"):
        compare_seeded(a, b[:, :10])


def test_summary_and_tolerance_rule() -> None:
    s = SeedSummary((0.70, 0.72, 0.74))
    assert (s.n, s.mean, s.sd) == (3, pytest.approx(0.72), pytest.approx(0.02))
    assert SeedSummary((0.7,)).sd == 0.0
    # 3 seeds: 1.96 * 0.02 * sqrt(2/3) = 0.0320; never tighter than the spread itself
    assert tolerance_from_spread(0.02, 3) == pytest.approx(0.0321)
    assert tolerance_from_spread(0.02, 10) == pytest.approx(0.02)
    # seeds that agree (or nearly) keep the floor a fixed checkpoint moves between machines
    assert tolerance_from_spread(0.0, 3) == pytest.approx(TOLERANCE_FLOOR) == pytest.approx(0.005)
    assert tolerance_from_spread(0.0029, 3) == pytest.approx(0.005)
    assert tolerance_from_spread(0.0032, 3) == pytest.approx(0.0052)
    with pytest.raises(ValueError):
        tolerance_from_spread(0.02, 1)


# ----------------------------------------------------------------------------- matched seeds
# The noise of the kept per-query files (regressions/per-query/): nDCG@10 of one query moves
# with sd 0.13 (MoTE dense, 3 seeds) to 0.19 (hybrid) between trainings; at equal seeds two
# conditions' residuals correlate 0.77 (MoTE vs Siamese, matched) or 0.22 (hybrid vs dense of
# one training); the difference's condition-by-query sd is ~0.03 (MS_query - MS_res of the
# MoTE / Siamese pair), its seed-by-condition sd 0 to 0.002 (per-seed differences of 0.0123 /
# 0.0140 / 0.0130 for TASER DPR - Det-R): the grid goes to 0.015.
REAL_NOISE = {"matched seeds": (0.77, 0.133, 0.031), "one training": (0.22, 0.19, 0.1)}


def simulate_matched(rng: np.random.Generator, effect: float, seeds: int, seed_by_condition: float,
                     rho: float, residual: float, by_query: float,
                     queries: int = QUERIES) -> tuple[np.ndarray, np.ndarray]:
    """Two conditions trained with the same seeds: a query's difficulty, each seed's shift and
    a share ``rho`` of each (seed, query) residual are common to both sides; each side has its
    own condition-by-query and seed-by-condition terms."""
    difficulty = rng.normal(0.6, 0.3, queries)
    shared = (rng.normal(0, math.sqrt(rho) * residual, (seeds, queries))
              + rng.normal(0, 0.01, (seeds, 1)))

    def condition(mu: float) -> np.ndarray:
        return (mu + difficulty + rng.normal(0, by_query / math.sqrt(2), queries)
                + rng.normal(0, seed_by_condition / math.sqrt(2), (seeds, 1)) + shared
                + rng.normal(0, math.sqrt(1 - rho) * residual, (seeds, queries)))

    return condition(effect), condition(0.0)


def matched_rates(seeds: int, seed_by_condition: float, noise: str, trials: int,
                  effect: float = 0.0, seed: int = 17) -> tuple[float, float]:
    """(rejection rate at p <= 0.05, coverage of the true effect by the 95% interval)."""
    rng = np.random.default_rng(seed)
    rho, residual, by_query = REAL_NOISE[noise]
    rejected = covered = 0
    for _ in range(trials):
        a, b = simulate_matched(rng, effect, seeds, seed_by_condition, rho, residual, by_query)
        c = compare_matched(a, b)
        rejected += c.p_value <= 0.05
        covered += c.ci_low <= effect <= c.ci_high
    return rejected / trials, covered / trials


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("noise", sorted(REAL_NOISE))
@pytest.mark.parametrize("seed_by_condition", [0.0, 0.004, 0.015])
def test_matched_level_and_coverage_at_the_real_noise(seeds, noise, seed_by_condition) -> None:
    """2,000 replicates a cell: level near 5% and 95% coverage, whether the seed-by-condition
    term is absent (estimated at its zero boundary half the time) or large. Measured on the
    grid: level 2.7-6.7%, coverage 93.4-97.4%."""
    level, coverage = matched_rates(seeds, seed_by_condition, noise, trials=2000)
    assert 0.02 <= level <= 0.075, level
    assert 0.92 <= coverage <= 0.98, coverage


def test_matching_finds_what_independent_seeds_hide() -> None:
    """A difference stable across matched seeds (+0.01 each seed, the seeds themselves moving
    together): the matched test finds it far more often than the nested one, which takes each
    side's seed spread as noise of the difference."""
    rng = np.random.default_rng(23)
    rho, residual, by_query = REAL_NOISE["matched seeds"]
    found = {"matched": 0, "nested": 0}
    for _ in range(200):
        a, b = simulate_matched(rng, 0.01, 3, 0.0, rho, residual, by_query)
        shift = rng.normal(0, 0.008, (3, 1))  # a seed moves both architectures alike
        a, b = a + shift, b + shift
        found["matched"] += compare_matched(a, b).p_value <= 0.05
        found["nested"] += compare_seeded(a, b).p_value <= 0.05
    assert found["matched"] >= 2 * found["nested"]
    assert found["matched"] / 200 >= 0.5


def test_matched_comparison_contract() -> None:
    rng = np.random.default_rng(5)
    a, b = simulate_matched(rng, 0.05, 3, 0.0, 0.77, 0.133, 0.031)
    c = compare_matched(a, b)
    assert c.design == "matched" and (c.n_a, c.n_b, c.queries) == (3, 3, QUERIES)
    assert c.effect == pytest.approx(float((a - b).mean()))
    assert c.df < QUERIES - 1  # the seed component stays uncertain: no jump to Q - 1
    same = compare_matched(a, a)
    assert same.p_value == 1.0 and same.effect == 0.0
    with pytest.raises(ValueError, match="same seeds and queries"):
        compare_matched(a, b[:2])
    with pytest.raises(ValueError, match="at least 2 seeds"):
        compare_matched(a[:1], b[:1])


def test_the_command_line_pairs_seeds_by_the_numbers_in_file_names() -> None:
    from pyserini_moe.cli.eval import seed_design, seed_labels
    from pyserini_moe.errors import UserError

    assert seed_labels(["w/detr-s42.test.trec", "w/detr-s43.test.trec"]) == ["42", "43"]
    assert seed_labels(["kept/row.s44.tsv"]) == ["44"]
    assert seed_labels(["bm25.test.trec"]) is None
    groups = {"dpr": ["dpr-s42.trec", "dpr-s43.trec"], "detr": ["detr-s42.trec", "detr-s43.trec"],
              "other": ["o-s7.trec", "o-s8.trec"]}
    labels = seed_design(groups, "detr", "auto")
    assert labels == {"dpr": ["42", "43"], "detr": ["42", "43"], "other": ["7", "8"]}
    from pyserini_moe.eval.seeds import matched

    assert matched(labels, "dpr", "detr") and not matched(labels, "other", "detr")
    assert seed_design(groups, "detr", "nested") is None
    with pytest.raises(UserError, match="--run other's files do not carry the seeds"):
        seed_design(groups, "detr", "matched")


def test_holm_adjusts_in_order_and_is_monotone() -> None:
    from pyserini_moe.eval.seeds import holm

    # three tests: the smallest times 3, the next times 2 (never below the one before), ...
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.4, 0.9]) == pytest.approx([0.8, 0.9])


def _comparison(effect: float, se: float, df: float = 50.0):
    from pyserini_moe.eval.seeds import SeedComparison

    half = float(stats.t.ppf(0.975, df)) * se
    p = float(2 * stats.t.sf(abs(effect / se), df))
    return SeedComparison(effect, effect - half, effect + half, p, df, se, 0.0, 3, 3, 300,
                          "matched")


def test_equivalence_and_non_inferiority_decide_no_gain_by_a_margin() -> None:
    """"No gain" is not decided by a non-significant difference: a tight interval inside the
    margin is equivalence, a wide one says nothing either way."""
    from pyserini_moe.eval.seeds import equivalence_verdict, no_worse_verdict

    assert equivalence_verdict(_comparison(0.002, 0.002)) == "equivalent within 0.01"
    assert equivalence_verdict(_comparison(0.0125, 0.007)) == "not shown either way"
    assert equivalence_verdict(_comparison(0.03, 0.005)) == "different"
    assert no_worse_verdict(_comparison(-0.002, 0.003)) == "held (no worse than 0.01)"
    assert no_worse_verdict(_comparison(-0.03, 0.005)) == "reversed (worse by more than 0.01)"
    assert no_worse_verdict(_comparison(-0.01, 0.01)) == "not shown either way"


def test_minimum_detectable_effect() -> None:
    c = _comparison(0.0131, 0.0072, df=1e6)  # TASER DPR vs Det-R's size, nested
    assert c.se == pytest.approx(0.0072)
    assert c.mde() == pytest.approx((1.959964 + 0.841621) * 0.0072, rel=1e-4)  # ~0.020
    assert c.mde(power=0.9) > c.mde()
