"""Seed-aware statistics on simulated data whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pyserini_moe.eval.seeds import (
    TOLERANCE_FLOOR,
    SeedSummary,
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
