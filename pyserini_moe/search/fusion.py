"""Fusion of runs: ranx's methods plus the CAME fusions ranx lacks, all as pure functions on Runs.

Score fusions that ranx has (CombSUM, CombMNZ, weighted sum, ... with its min-max, max, sum, zmuv,
rank normalisations) go through ``ranx.fuse``/``ranx.optimize_fusion``. RRF is ours (:func:`rrf`:
ranks of tied scores as Pyserini ranks them). CAME's fusions
of expert results (Cai et al., "CAME: Competitively Learning a Mixture-of-Experts Model for
First-stage Retrieval", eq. 12 and table 4) are implemented here, because they fill documents
missing from an expert's top-K with that expert's K-th score, which no ranx method does.

Every fused run keeps only its best ``k`` documents per query (ranked as :func:`runs.ranked` does).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import evaluate, parse_metric
from pyserini_moe.runs import Run, by_docid, ranked

Qrels = dict[str, dict[str, int]]

# Friendly names for ranx's methods; any other ranx method name ("max", "isr", ...) passes through.
RANX_ALIASES = {"combsum": "sum", "combmnz": "mnz"}
RANX_METHODS = ("rrf", "combsum", "combmnz", "wsum")
RRF_K = 60  # Cormack et al.'s k, the default of Pyserini's and ranx's RRF
RANX_NORMS = ("min-max", "max", "sum", "zmuv", "rank", "borda")

# Per query and expert: its hits -> (transformed scores, the value of a doc it did not return).
ListTransform = Callable[[dict[str, float]], tuple[dict[str, float], float]]


def top_k(run: Run, k: int) -> Run:
    """The best ``k`` hits of every query, ties in the order they came (:func:`runs.ranked`): the
    cut Pyserini makes of a searcher's hits or a run file (its fusion's ``depth``)."""
    return {qid: dict(ranked(hits)[:k]) for qid, hits in run.items()}


def fused_top_k(run: Run, k: int) -> Run:
    """The best ``k`` hits of every fused query, ties by ascending docid as Pyserini's fusion
    orders them (a union of documents has no order of its own)."""
    return {qid: dict(by_docid(hits)[:k]) for qid, hits in run.items()}


def _query_ids(runs: Sequence[Run]) -> list[str]:
    """Union of the runs' queries, in first-seen order."""
    return list(dict.fromkeys(qid for run in runs for qid in run))


# --- CAME fusions (came.txt, section 3.4 and table 4) ---------------------------------------------

def _raw_with_kth_fill(hits: dict[str, float]) -> tuple[dict[str, float], float]:
    """Eq. 12's rule: a document beyond an expert's top-K gets the expert's K-th (lowest) score."""
    return hits, min(hits.values(), default=0.0)


def _min_max(hits: dict[str, float]) -> tuple[dict[str, float], float]:
    """Min-max normalised scores; missing documents get 0.

    Table 4 swaps raw for min-max normalised scores "in Eq. (12)", i.e. keeping the K-th-score fill;
    the K-th score is the list's minimum, which min-max maps to 0, so both readings agree. A list
    whose scores are all equal normalises to 0 (every hit ties with the K-th score), as in ranx.
    """
    if not hits:
        return {}, 0.0
    lo, hi = min(hits.values()), max(hits.values())
    span = hi - lo
    return {d: (s - lo) / span if span > 0 else 0.0 for d, s in hits.items()}, 0.0


def _reciprocal_rank(hits: dict[str, float], offset: int = 0) -> tuple[dict[str, float], float]:
    """1 / (offset + rank), rank from 1 with ties in the order they came (a run file's rank
    column, as Pyserini's fusion reads it); missing documents get 0. Offset 0: table 4's
    SumRR/MaxRR; RRF's k otherwise."""
    return {d: 1.0 / (offset + rank) for rank, (d, _) in enumerate(ranked(hits), start=1)}, 0.0


def _combine(runs: Sequence[Run], transform: ListTransform,
             reduce: Callable[[list[float]], float], k: int,
             weights: Sequence[float] | None = None) -> Run:
    """Score every document any expert returned by ``reduce`` over the experts' (weighted) scores.

    An expert without hits for a query contributes its fill value (0) to every document.
    """
    if not runs:
        raise UserError("no runs to fuse")
    weights = [1.0] * len(runs) if weights is None else list(weights)
    if len(weights) != len(runs):
        raise UserError(f"{len(weights)} weights for {len(runs)} runs")
    fused: Run = {}
    for qid in _query_ids(runs):
        lists = [transform(run.get(qid, {})) for run in runs]
        docs = dict.fromkeys(d for scores, _ in lists for d in scores)
        fused[qid] = {d: reduce([w * scores.get(d, fill)
                                 for w, (scores, fill) in zip(weights, lists)])
                      for d in docs}
    return fused_top_k(fused, k)


def came_sum(runs: Sequence[Run], k: int = 1000) -> Run:
    """CAME's fusion (eq. 12): sum of raw expert scores, a missing doc scored at the expert's K-th.

    Each run is taken to be one expert's top-K, so K is the length of its list for the query.
    """
    return _combine(runs, _raw_with_kth_fill, sum, k)


def norm_sum(runs: Sequence[Run], k: int = 1000) -> Run:
    """Table 4's NormSum: sum of per-query min-max normalised scores (missing -> 0)."""
    return _combine(runs, _min_max, sum, k)


def norm_max(runs: Sequence[Run], k: int = 1000) -> Run:
    """Table 4's NormMax: max of per-query min-max normalised scores (missing -> 0)."""
    return _combine(runs, _min_max, max, k)


def sum_rr(runs: Sequence[Run], k: int = 1000) -> Run:
    """Table 4's SumRR: sum of reciprocal ranks 1/rank (not RRF's 1/(60+rank)); missing -> 0."""
    return _combine(runs, _reciprocal_rank, sum, k)


def max_rr(runs: Sequence[Run], k: int = 1000) -> Run:
    """Table 4's MaxRR: max of reciprocal ranks; missing -> 0."""
    return _combine(runs, _reciprocal_rank, max, k)


def rrf(runs: Sequence[Run], k: int = 1000, rrf_k: int = RRF_K) -> Run:
    """Reciprocal rank fusion (Cormack et al., 2009): sum of ``1 / (rrf_k + rank)``; missing -> 0.

    Ours rather than ranx's because tied scores must be ranked as Pyserini ranks them (in the
    order they came, :func:`runs.ranked`; the fused ties by ascending docid) for a fused run to
    diff line for line against Pyserini's fusion; ranx ranks ties in its sort's unspecified
    order."""
    return _combine(runs, functools.partial(_reciprocal_rank, offset=rrf_k), sum, k)


def linear(runs: Sequence[Run], weights: Sequence[float], k: int = 1000) -> Run:
    """Table 4's LinearLayer, kept simple: ``sum_e w_e * s_e`` over raw scores with eq. 12's fill.

    Weights come from :func:`optimize_weights` (``method="linear"``); all-ones is :func:`came_sum`.
    """
    return _combine(runs, _raw_with_kth_fill, sum, k, weights)


_CAME_FUSIONS: dict[str, Callable[..., Run]] = {
    "came_sum": came_sum, "norm_sum": norm_sum, "norm_max": norm_max,
    "sum_rr": sum_rr, "max_rr": max_rr, "linear": linear,
}
CAME_METHODS = tuple(_CAME_FUSIONS)  # CAME's table 4
# Every method name the command lines offer (``fuse`` also passes any other ranx name through).
FUSIONS = CAME_METHODS + RANX_METHODS


def _simplex_grid(n: int, step: float) -> list[tuple[float, ...]]:
    """Weights in [0, 1] on a ``step`` grid that sum to 1, built from integers so none is lost."""
    steps = round(1 / step)
    return [tuple(i / steps for i in combo)
            for combo in itertools.product(range(steps + 1), repeat=n) if sum(combo) == steps]


def optimize_linear(dev_runs: Sequence[Run], dev_qrels: Qrels, metric: str = "ndcg@10",
                    step: float = 0.1, k: int = 1000) -> dict[str, list[float]]:
    """Grid-search :func:`linear`'s weights on a dev split (the first best in grid order wins).

    A ranking is unchanged by scaling all weights, so the simplex ``sum(w) = 1, w >= 0`` covers
    every non-negative weighting. Metrics follow ``trec_eval -c``
    (:mod:`pyserini_moe.eval.metrics`).
    """

    if not dev_runs:
        raise UserError("no runs to fuse")
    grid = _simplex_grid(len(dev_runs), step)
    scores = [next(iter(evaluate(linear(dev_runs, w, k), dev_qrels, [metric]).values()))
              for w in grid]
    return {"weights": list(grid[max(range(len(grid)), key=scores.__getitem__)])}


# --- ranx -----------------------------------------------------------------------------------------

def _ranx_method(method: str) -> str:
    return RANX_ALIASES.get(method, method)


def _ranx_runs(runs: Sequence[Run], qids: Sequence[str]) -> list[Any]:
    """ranx Runs over exactly ``qids`` (ranx requires equal query sets), missing queries empty."""
    from ranx import Run as RanxRun

    return [RanxRun({qid: dict(run.get(qid, {})) for qid in qids}) for run in runs]


@contextlib.contextmanager
def _quiet_ranx() -> Iterator[None]:
    """ranx's first (compiling) call warns about a harmless uint64 -> int64 cast."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
        yield


def fuse(runs: Sequence[Run], method: str, norm: str | None = None,
         params: dict[str, Any] | None = None, k: int = 1000) -> Run:
    """Fuse ``runs`` and keep the top ``k`` per query.

    ``method`` is a CAME fusion (:data:`CAME_METHODS`; ``norm`` must be None, as each defines its
    own, and ``params`` are its keyword arguments, e.g. ``{"weights": [...]}`` for ``linear``) or a
    ranx method: ``rrf`` (``params={"k": 60}`` is ranx's default), ``combsum``/``sum``,
    ``combmnz``/``mnz``, ``wsum`` (``params={"weights": [...]}``), ... with ranx normalisation
    ``norm`` (``min-max``, ``max``, ``sum``, ``zmuv``, ``rank``, ``borda``; None = raw scores).
    Queries missing from some runs are fused from the runs that have them.
    """
    params = dict(params or {})
    if method in _CAME_FUSIONS:
        if norm is not None:
            raise UserError(f"{method} defines its own normalisation; "
                            f"pass norm=None, not {norm!r}")
        return _finite(_CAME_FUSIONS[method](runs, k=k, **params), method)
    import ranx

    if len(runs) < 2:
        raise UserError(f"ranx fusion needs at least two runs, got {len(runs)}")
    if _ranx_method(method) == "rrf" and norm is not None:
        # rrf reads ranks only: a monotone normalisation changes nothing, and ranx's borda
        # before rrf scrambles the ranking (a document both runs rank first fell to rank 7)
        raise UserError(f"rrf fuses ranks, not scores: pass norm=None, not {norm!r}")
    if _ranx_method(method) == "rrf":
        rrf_k = params.pop("k", RRF_K)
        if params:
            raise UserError(f"rrf takes one parameter, k; not {', '.join(sorted(params))}")
        return rrf(runs, k=k, rrf_k=rrf_k)
    with _quiet_ranx():
        fused = ranx.fuse(_ranx_runs(runs, _query_ids(runs)), norm=norm,
                          method=_ranx_method(method), params=params)
    return _finite(fused_top_k({qid: dict(hits) for qid, hits in fused.to_dict().items()}, k),
                   method)


def _finite(run: Run, method: str) -> Run:
    """The fused run, refused when a score overflowed (weights of 1e308 made every score inf,
    ranked by docid), rather than written as a ranking nobody asked for."""
    for qid, hits in run.items():
        if not all(math.isfinite(score) for score in hits.values()):
            raise UserError(f"{method}: the fused scores of query {qid!r} are not finite (weights "
                            "too large?): scale the weights down")
    return run


def refuse_untunable_dev(dev_runs: Sequence[Run], dev_qrels: Qrels,
                         names: Sequence[str] | None = None) -> None:
    """Tuning on a dev split needs the dev runs to answer its judged queries: a run sharing none
    of them scores 0 under every weighting (tuning then drops it, or keeps the first grid point
    of a table of zeros), and runs that retrieve no relevant document make every weighting score
    0 (ranx's optimiser fails on an empty set). Refused in one line, naming the run
    (``names``: how the caller calls each run, e.g. its file)."""
    names = list(names) if names is not None else [f"dev run {i + 1}" for i in range(len(dev_runs))]
    relevant = {qid: {doc for doc, grade in docs.items() if grade > 0}
                for qid, docs in dev_qrels.items()}
    relevant = {qid: docs for qid, docs in relevant.items() if docs}
    if not relevant:
        raise UserError("the dev qrels judge no document relevant: every weighting scores 0 on "
                        "them, so there is nothing to tune")
    for name, run in zip(names, dev_runs):
        if not set(run) & set(dev_qrels):
            raise UserError(f"{name} holds none of the {len(dev_qrels)} queries the dev qrels "
                            "judge: tuning would score it 0 under every weighting (the dev runs "
                            "of another split?)")
    if not any(doc in relevant.get(qid, ()) for run in dev_runs for qid, hits in run.items()
               for doc in hits):
        raise UserError("the dev runs retrieve no document the dev qrels judge relevant: every "
                        "weighting scores 0, so there is nothing to tune")


def optimize_weights(dev_runs: Sequence[Run], dev_qrels: Qrels, method: str = "wsum",
                     metric: str = "ndcg@10", norm: str | None = None,
                     k: int = 1000) -> dict[str, Any]:
    """Tune a fusion's parameters on a dev split; the result is ``fuse``'s ``params``.

    ``linear`` uses :func:`optimize_linear` on dev runs fused to depth ``k``. ranx methods
    (``wsum``: weights on a 0.1 simplex grid, ``rrf``: k in 10..100, ...) use
    ``ranx.optimize_fusion`` with ``norm`` as in :func:`fuse`, over the qrels' queries (ranx
    requires runs and qrels to have the same queries; missing ones are added empty). ranx 0.3.21
    keeps the *last* best configuration on ties, and with 3+ runs skips weightings whose float sum
    is not exactly 1.0, e.g. (.2, .7, .1); :func:`optimize_linear`'s grid has them all.
    Dev runs that cannot be tuned on are refused first (:func:`refuse_untunable_dev`).
    ``metric`` is any name ``eval`` reads (:func:`~pyserini_moe.eval.metrics.parse_metric`:
    ``ndcg@10``, or trec_eval's ``ndcg_cut.10``, ``P.10``, ``recip_rank``), given to ranx in
    ranx's form.
    """
    parse_metric(metric)  # an unknown name is refused in one line before any work
    refuse_untunable_dev(dev_runs, dev_qrels)
    if method == "linear":
        if norm is not None:
            raise UserError(f"linear fuses raw scores; pass norm=None, not {norm!r}")
        return optimize_linear(dev_runs, dev_qrels, metric, k=k)
    import ranx

    qids = list(dev_qrels)
    ranx_metric = parse_metric(metric).ranx  # trec_eval's names (ndcg_cut.10, P.10) as eval reads them
    with _quiet_ranx():
        best = ranx.optimize_fusion(ranx.Qrels(dev_qrels), _ranx_runs(dev_runs, qids), norm=norm,
                                    method=_ranx_method(method), metric=ranx_metric,
                                    show_progress=False)
    return {name: [float(v) for v in value] if isinstance(value, (list, tuple)) else value
            for name, value in best.items()}
