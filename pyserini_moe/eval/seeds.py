"""Results over training seeds: summaries, regression tolerances, and a test that sees both query
and seed variance.

A trained condition is a distribution, not a number: re-training with another seed (another
initialisation of new modules, batch order, negatives and dropout) moves SciFact nDCG@10 by a few
hundredths, as much as the effects the papers' claims rest on. A per-query paired t-test between
two single runs sees only query variance, so it calls a difference significant that another seed
would reverse. :func:`compare_seeded` compares two conditions, each given as a (seeds x queries)
matrix of per-query scores, under the two-way model

    score[c, s, q] = mu_c + a_q + (ca)_cq + b_cs + e_csq

(query difficulty ``a_q`` shared by both conditions and cancelling in the difference; a
condition-by-query interaction ``(ca)_cq``, the query variance a paired t-test sees; a seed effect
``b_cs`` shared by every query of one training run; residual noise ``e_csq``). The difference of
the conditions' grand means then has variance

    Var(d) = Var((ca)_A - (ca)_B + mean_s e) / Q  +  sigma_b,A^2 / n_A  +  sigma_b,B^2 / n_B

estimated by the method of moments: the first term as the paired t-test's squared standard error
on seed-averaged per-query scores; each seed component from the spread of that condition's
seed means, less the share of residual noise that spread carries (``Var(e) / Q``, from the
seeds x queries residuals), floored at 0. The t statistic uses Welch-Satterthwaite degrees of
freedom over the three components. A condition with one seed contributes no seed variance: right
for what does not train (BM25, a zero-shot model: the same run every time), an understatement
for one training run, which :meth:`SeedComparison.seeds_estimated` flags. The tests
(tests/eval/test_seeds.py) check on simulated data that the false-positive rate stays near the
nominal level where a paired t-test's is several times it, and that a large effect is found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from pyserini_moe.eval.metrics import format_table

# The smallest tolerance of a multi-seed row: how far one fixed checkpoint's SciFact nDCG@10 moved
# when its recipe was re-trained with the same seed on other hardware (CPU against an H100: TASER
# Det-R 0.0030, Tok-R 0.0048, SB-MoE 0.0027, CAME Sum 0.0045; CoT-MoTE's 14-step recipe
# moved 0.015, more than any floor should hide). Three seeds that happen to agree (sd 0 to 0.002)
# say nothing below that: a re-run elsewhere would fail a tolerance of 0.0001 with nothing wrong.
TOLERANCE_FLOOR = 0.005
# How a multi-seed regression row's tolerance is set (tolerance_from_spread); the files quote it.
TOLERANCE_RULE = (f"max(sd, 1.96 * sd * sqrt(2 / n), {TOLERANCE_FLOOR}), rounded up to 4 decimals: "
                  "the 95% bound on the difference of two n-seed means whose seeds spread by sd, "
                  f"never tighter than one seed's spread nor than the {TOLERANCE_FLOOR} a fixed "
                  "checkpoint moves between machines")


@dataclass(frozen=True)
class SeedSummary:
    """One metric of one condition over its seeds."""

    values: tuple[float, ...]  # per seed, in the seeds' order

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def sd(self) -> float:
        """Sample standard deviation over seeds (0 for one seed)."""
        return float(np.std(self.values, ddof=1)) if self.n > 1 else 0.0


def tolerance_from_spread(sd: float, n: int) -> float:
    """The regression tolerance of an ``n``-seed mean whose seeds spread by ``sd``.

    A re-run's n-seed mean differs from the file's by at most 1.96 * sd * sqrt(2 / n) 19 times in
    20 (two independent means); below 8 seeds that exceeds sd, from 8 seeds on the rule keeps sd
    itself, so a row is never tighter than its measured spread. A few seeds that nearly agree
    estimate sd near 0, so the tolerance is never below :data:`TOLERANCE_FLOOR`, the variation
    one fixed checkpoint shows between machines. Rounded up to the fourth decimal, the precision
    the files write. ``n`` < 2 has no spread: ValueError.
    """
    if n < 2:
        raise ValueError("a tolerance from the spread needs at least 2 seeds")
    bound = max(sd, 1.96 * sd * math.sqrt(2.0 / n))
    return max(TOLERANCE_FLOOR, math.ceil(round(bound * 1e4, 6)) / 1e4)


@dataclass(frozen=True)
class SeedComparison:
    """Condition A against condition B over queries and seeds."""

    effect: float  # mean(A) - mean(B)
    ci_low: float  # 95% interval of the effect (or 1 - alpha)
    ci_high: float
    p_value: float  # two-sided
    df: float
    se_query: float  # the parts of the standard error: query (paired) ...
    se_seed: float  # ... and seed (both conditions' seed components)
    n_a: int
    n_b: int
    queries: int
    design: str = "nested"  # "matched": seed s of A paired with seed s of B (compare_matched)

    @property
    def se(self) -> float:
        """The standard error of the effect (the interval's half-width over its t quantile)."""
        return math.sqrt(self.se_query ** 2 + self.se_seed ** 2)

    def mde(self, power: float = 0.8, alpha: float = 0.05) -> float:
        """The minimum detectable effect: the true difference this comparison's noise (its
        standard error and degrees of freedom) finds with probability ``power`` at ``alpha``,
        two-sided. What a "not shown" can rule out, and what it cannot."""
        df = self.df if math.isfinite(self.df) else 1e9
        return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * self.se)

    def seeds_estimated(self, trained: tuple[bool, bool] = (True, True)) -> bool:
        """Whether every trained side had seeds enough (>= 2) to estimate its seed variance (an
        untrained side, BM25 or a zero-shot model, has none to estimate)."""
        return all(n > 1 or not t for n, t in zip((self.n_a, self.n_b), trained))


def _seed_component(scores: np.ndarray) -> tuple[float, int]:
    """(sigma_b^2 / n, n - 1): a condition's seed variance component of its grand mean."""
    n, q = scores.shape
    if n < 2:
        return 0.0, 0
    seed_means = scores.mean(axis=1)
    residual = scores - seed_means[:, None] - scores.mean(axis=0)[None, :] + scores.mean()
    noise = float((residual ** 2).sum()) / ((n - 1) * (q - 1)) if q > 1 else 0.0
    sigma2 = max(0.0, float(np.var(seed_means, ddof=1)) - noise / q)
    return sigma2 / n, n - 1


def compare_seeded(a: np.ndarray | Sequence[Sequence[float]],
                   b: np.ndarray | Sequence[Sequence[float]],
                   alpha: float = 0.05) -> SeedComparison:
    """Condition ``a`` against ``b``: per-query scores as (seeds x queries) matrices, the queries
    in the same order in both. See the module docstring for the model and the estimator."""
    a, b = np.atleast_2d(np.asarray(a, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the conditions have scores for {a.shape[1]} and {b.shape[1]} queries")
    q = a.shape[1]
    if q < 2:
        raise ValueError("a comparison needs at least 2 queries")
    diff = a.mean(axis=0) - b.mean(axis=0)
    effect = float(diff.mean())
    v_query = float(np.var(diff, ddof=1)) / q
    (v_a, df_a), (v_b, df_b) = _seed_component(a), _seed_component(b)
    variance = v_query + v_a + v_b
    if variance == 0.0:  # identical runs
        return SeedComparison(effect, effect, effect, 1.0 if effect == 0 else 0.0, math.inf,
                              0.0, 0.0, a.shape[0], b.shape[0], q)
    parts = [(v_query, q - 1), (v_a, df_a), (v_b, df_b)]
    df = variance ** 2 / sum(v ** 2 / d for v, d in parts if d > 0 and v > 0)
    se = math.sqrt(variance)
    t = effect / se
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return SeedComparison(effect, effect - half, effect + half, p, float(df),
                          math.sqrt(v_query), math.sqrt(v_a + v_b), a.shape[0], b.shape[0], q)


def compare_matched(a: np.ndarray | Sequence[Sequence[float]],
                    b: np.ndarray | Sequence[Sequence[float]],
                    alpha: float = 0.05) -> SeedComparison:
    """Condition ``a`` against ``b`` when their seeds are matched: row s of both is one training
    seed (the same batch order and negatives for both architectures), or one training read two
    ways (two fusions of one model, hybrid against dense). See the module docstring: the
    differences ``d[s, q] = a[s, q] - b[s, q]`` follow the crossed model

        d[s, q] = delta + u_q + v_s + w_sq

    (a condition-by-query term ``u``, a seed-by-condition term ``v``, residual ``w``), so that
    Var(mean d) = sigma_u^2 / Q + sigma_v^2 / S + sigma_w^2 / (S Q). For the balanced design the
    REML estimate is the ANOVA one, (MS_seed + MS_query - MS_res) / (S Q), with sigma_v^2 floored
    at 0 (MS_seed below MS_res); the degrees of freedom are Satterthwaite's over the three mean
    squares as measured, MS_seed included where the floor set it aside, so a seed component
    estimated at 0 still counts as uncertain (its S - 1 degrees of freedom) instead of known
    (the jump to Q - 1). On simulations at the noise of the kept per-query files (residual sd
    0.13-0.19 a query, seeds correlated 0.22-0.77 across conditions; tests/eval/test_seeds.py,
    2,000 replicates a cell) its level is 2.7-6.7% at the nominal 5% and its 95% interval covers
    93-97%, with 3 or 5 seeds: conservative where the seed component is truly 0."""
    a, b = np.atleast_2d(np.asarray(a, dtype=float)), np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape != b.shape:
        raise ValueError(f"matched seeds need the same seeds and queries on both sides, got "
                         f"{a.shape} and {b.shape} (seeds x queries)")
    seeds, q = a.shape
    if seeds < 2 or q < 2:
        raise ValueError("a matched comparison needs at least 2 seeds and 2 queries")
    d = a - b
    grand, by_seed, by_query = float(d.mean()), d.mean(axis=1), d.mean(axis=0)
    ms_seed = q * float(((by_seed - grand) ** 2).sum()) / (seeds - 1)
    ms_query = seeds * float(((by_query - grand) ** 2).sum()) / (q - 1)
    residual = d - by_seed[:, None] - by_query[None, :] + grand
    df_res = (seeds - 1) * (q - 1)
    ms_res = float((residual ** 2).sum()) / df_res
    seed_part = max(ms_seed - ms_res, 0.0)
    total = seed_part + ms_query
    if total == 0.0:  # identical differences everywhere
        p = 1.0 if grand == 0 else 0.0
        return SeedComparison(grand, grand, grand, p, math.inf, 0.0, 0.0, seeds, seeds, q,
                              "matched")
    df = total ** 2 / (ms_seed ** 2 / (seeds - 1) + ms_query ** 2 / (q - 1)
                       + ms_res ** 2 / df_res)
    se = math.sqrt(total / (seeds * q))
    p = float(2 * stats.t.sf(abs(grand / se), df))
    half = float(stats.t.ppf(1 - alpha / 2, df)) * se
    return SeedComparison(grand, grand - half, grand + half, p, float(df),
                          math.sqrt(ms_query / (seeds * q)),
                          math.sqrt(seed_part / (seeds * q)), seeds, seeds, q, "matched")


def verdict(comparison: SeedComparison, claimed_sign: int = 1, max_p: float = 0.05,
            trained: tuple[bool, bool] = (True, True)) -> str:
    """``held`` / ``reversed`` / ``not shown`` for the claim that the effect has ``claimed_sign``
    (+1: A beats B). A claim with a trained side of one seed is never ``held`` nor ``reversed``
    (its training noise is unmeasured): it reads ``not shown (1 seed)`` however small its p."""
    if comparison.p_value > max_p or comparison.effect == 0:
        return "not shown"
    if not comparison.seeds_estimated(trained):
        return "not shown (1 seed)"
    return "reversed" if (comparison.effect > 0) != (claimed_sign > 0) else "held"


# The margin within which two conditions count as equivalent, in nDCG@10, where a paper states
# none of its own: a tenth of the gap between BM25 and a trained dense model on SciFact, and about
# what one fixed checkpoint moves between machines twice over.
EQUIVALENCE_MARGIN = 0.01


def no_worse_verdict(comparison: SeedComparison, margin: float = EQUIVALENCE_MARGIN,
                     alpha: float = 0.05) -> str:
    """For a claim "A is not worse than B" (A >= B; "A does not lose to B"): tested as
    non-inferiority, not decided by a non-significant difference. ``held``: the one-sided
    (1 - alpha) lower bound of A - B is above -margin; ``reversed``: the upper bound is below
    -margin (A worse by more than the margin); else ``not shown either way``."""
    low, high = _one_sided_bounds(comparison, alpha)
    if low > -margin:
        return f"held (no worse than {margin:g})"
    if high < -margin:
        return f"reversed (worse by more than {margin:g})"
    return "not shown either way"


def equivalence_verdict(comparison: SeedComparison, margin: float = EQUIVALENCE_MARGIN,
                        alpha: float = 0.05) -> str:
    """For a claim "A does not beat B" / "A and B are level": two one-sided tests (TOST).
    ``equivalent within margin``: the (1 - 2 alpha) interval lies inside (-margin, margin);
    ``different``: not that, and the (1 - alpha) interval excludes 0; else ``not shown either
    way`` (too little data to tell)."""
    low, high = _one_sided_bounds(comparison, alpha)
    if -margin < low and high < margin:
        return f"equivalent within {margin:g}"
    if comparison.p_value <= alpha:
        return "different"
    return "not shown either way"


def _one_sided_bounds(comparison: SeedComparison, alpha: float) -> tuple[float, float]:
    """The one-sided (1 - alpha) lower and upper bounds of the effect."""
    df = comparison.df if math.isfinite(comparison.df) else 1e9
    half = float(stats.t.ppf(1 - alpha, df)) * comparison.se
    return comparison.effect - half, comparison.effect + half


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the family-wise error rate held at the nominal level over
    every test of a family (a paper's claims table), in any dependence between the tests;
    adjusted p-values in the input's order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class SeededComparison:
    """Conditions of one or more seeds each, against a baseline condition, per metric."""

    metrics: list[str]
    baseline: str
    max_p: float
    summaries: dict[str, dict[str, SeedSummary]]  # condition -> metric -> over its seeds
    tests: dict[str, dict[str, SeedComparison]]  # condition but the baseline -> metric -> test

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "metrics": self.metrics, "baseline": self.baseline, "max_p": self.max_p,
            "test": "t-test over queries and seeds, pyserini_moe.eval.seeds (design per test)",
            "conditions": {name: {m: {"mean": s.mean, "sd": s.sd, "seeds": list(s.values)}
                                  for m, s in by_metric.items()}
                           for name, by_metric in self.summaries.items()},
            "tests": {name: {m: {"effect": t.effect, "ci95": [t.ci_low, t.ci_high],
                                 "p_value": t.p_value, "df": t.df, "seeds": [t.n_a, t.n_b],
                                 "design": t.design, "mde80": t.mde()}
                             for m, t in by_metric.items()}
                      for name, by_metric in self.tests.items()},
        }


def matched(seeds: dict[str, list[str]] | None, name: str, baseline: str) -> bool:
    """Whether ``name`` and ``baseline`` were trained with the same seeds (at least two), listed
    in the same order: then seed s of one is paired with seed s of the other. The design
    decides, never the result."""
    if not seeds or name not in seeds or baseline not in seeds:
        return False
    return len(seeds[name]) > 1 and list(seeds[name]) == list(seeds[baseline])


def compare_groups(per_query: dict[str, list[dict[str, dict[str, float]]]], metrics: list[str],
                   baseline: str, max_p: float = 0.05,
                   seeds: dict[str, list[str]] | None = None) -> SeededComparison:
    """``per_query``: condition -> one ``{metric: {qid: value}}`` per seed (every seed over the
    same queries, as ``evaluate_per_query`` gives them for one qrels). ``seeds``: condition ->
    its seeds' labels in the same order; a condition with the baseline's seeds is compared
    matched (:func:`compare_matched`), any other nested (:func:`compare_seeded`)."""
    def matrix(name: str, metric: str) -> np.ndarray:
        return np.array([[values[metric][q] for q in values[metric]]
                         for values in per_query[name]])

    summaries = {name: {m: SeedSummary(tuple(float(v) for v in matrix(name, m).mean(axis=1)))
                        for m in metrics} for name in per_query}
    tests = {name: {m: (compare_matched if matched(seeds, name, baseline) else compare_seeded)(
                        matrix(name, m), matrix(baseline, m), alpha=0.05)
                    for m in metrics} for name in per_query if name != baseline}
    return SeededComparison(metrics, baseline, max_p, summaries, tests)


def format_seeded(comparison: SeededComparison, style: str = "markdown") -> str:
    """One row per condition: mean +- sd over its seeds, then effect, 95% interval and p against
    the baseline; a legend saying what the test accounts for."""

    rows = []
    for name, by_metric in comparison.summaries.items():
        n = next(iter(by_metric.values())).n
        tests = comparison.tests.get(name, {})
        paired = any(t.design == "matched" for t in tests.values())
        cells = [f"{name} (baseline)" if name == comparison.baseline else name,
                 f"{n} matched" if paired else str(n)]
        for m in comparison.metrics:
            s = by_metric[m]
            cell = f"{s.mean:.4f}" + (f" ± {s.sd:.4f}" if s.n > 1 else "")
            if name != comparison.baseline:
                t = comparison.tests[name][m]
                mark = ("▲" if t.effect > 0 else "▼") if t.p_value <= comparison.max_p else ""
                p = "p<0.001" if t.p_value < 0.001 else f"p={t.p_value:.3f}"
                mde = "" if mark else f", MDE {t.mde():.4f}"  # what a "not shown" can rule out
                cell += (f"{mark} ({t.effect:+.4f} [{t.ci_low:+.4f}, {t.ci_high:+.4f}], "
                         f"{p}{mde})")
            cells.append(cell)
        rows.append(cells)
    legend = (f"mean ± sd over seeds; (effect against {comparison.baseline} [95% interval], p): "
              "a t-test over queries and seeds (pyserini_moe.eval.seeds; a 1-seed row adds no "
              f"seed variance: right for an untrained run, not for one training); 'matched': "
              "the baseline's seeds, paired seed by seed (compare_matched), else the two sides' "
              f"seeds taken as independent (compare_seeded); ▲/▼: p <= {comparison.max_p:g}; "
              "MDE: the difference found 8 times in 10 at this noise (where none was found)")
    return format_table(["run", "seeds", *comparison.metrics], rows, style) + "\n\n" + legend
