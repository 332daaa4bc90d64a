"""``python -m pyserini_moe.fuse``: fuse TREC runs (ranx fusions, CAME's fusions, Pyserini hybrid).

Examples::

    # reciprocal rank fusion of three runs
    python -m pyserini_moe.fuse --runs a.trec b.trec c.trec --method rrf --output fused.trec
    # the same with Pyserini's fusion flags (python -m pyserini.fusion; --method defaults to rrf)
    python -m pyserini_moe.fuse --runs a.trec b.trec c.trec --rrf.k 60 --k 1000 --depth 1000 \\
        --runtag my-rrf --output fused.trec
    # CAME's sum of raw expert scores, K-th score for missing documents (eq. 12)
    python -m pyserini_moe.fuse --runs lexical.trec local.trec global.trec --method came_sum \\
        --output came.trec
    # Pyserini-style dense + alpha * BM25 hybrid, alpha searched on dev runs (TASER appendix D)
    python -m pyserini_moe.fuse --runs dense.trec bm25.trec --method hybrid --hybrid-normalize \\
        --dev-runs dense.dev.trec bm25.dev.trec --dev-qrels scifact-dev-qrels.tsv --output hybrid.trec
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pyserini_moe.cli import (
    ArgumentParser,
    HelpFormatter,
    SetOnce,
    finite_float,
    output_file,
    positive_int,
    refuse_inside_outputs,
)
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import parse_metric
from pyserini_moe.io import refuse_input_as_output, refuse_one_file_twice, same_file_key
from pyserini_moe.runs import (
    Run,
    check_run_tag,
    first_line_columns,
    is_rank_only,
    read_nonempty_run,
    refuse_non_run_output,
    write_trec_run,
)
from pyserini_moe.search.fusion import (
    CAME_METHODS,
    FUSIONS,
    RANX_METHODS,
    RANX_NORMS,
    RRF_K,
    refuse_untunable_dev,
)
from pyserini_moe.search.hybrid import PYSERINI_ALPHA

METHODS = FUSIONS + ("hybrid",)
CANDIDATES = 1000
DEV_METRIC = "ndcg@10"
TUNED = ("hybrid", "wsum", "linear")  # the methods --dev-runs tunes: alpha, or the weights
# Settings read by some methods only: name -> the methods that read it.
# --norm: not rrf, which reads ranks only (a monotone normalisation cannot change it, and
# ranx's rrf after borda scrambles the ranking); a CAME fusion defines its own; hybrid has
# --hybrid-normalize.
NORMED = tuple(m for m in RANX_METHODS if m != "rrf")
_ONLY_FOR = {"rrf_k": ("rrf",), "weights": ("wsum", "linear"),
             "norm": NORMED,
             **dict.fromkeys(("alpha", "hybrid_normalize", "weight_on_dense"), ("hybrid",)),
             **dict.fromkeys(("dev_runs", "dev_qrels", "metric"), TUNED)}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.fuse", description=__doc__.splitlines()[0].split(": ", 1)[1],
        formatter_class=HelpFormatter)
    parser.add_argument("--runs", nargs="+", required=True,
                        help="run files to fuse (TREC, or MS MARCO's qid docid rank)")
    parser.add_argument("--method", choices=METHODS, default="rrf",
                        help=f"ranx: {', '.join(RANX_METHODS)}; CAME (table 4): "
                             f"{', '.join(CAME_METHODS)}; hybrid: Pyserini's "
                             "dense + alpha * sparse of exactly two runs (dense first); default "
                             "rrf, as Pyserini's fusion")
    parser.add_argument("--output", required=True, type=output_file,
                        help="fused TREC run (written atomically)")
    parser.add_argument("--run-tag", "--runtag", dest="run_tag", default=None, metavar="TAG",
                        action=SetOnce,
                        help="last column of the run (default fuse-METHOD); --runtag is "
                             "Pyserini's name for it")
    parser.add_argument("--hits", "--k", dest="hits", type=positive_int, default=1000,
                        metavar="N", action=SetOnce,
                        help="results kept per query; --k is Pyserini's name for it")
    parser.add_argument("--candidates", "--depth", dest="candidates", type=positive_int,
                        default=None, metavar="N", action=SetOnce,
                        help=f"top results of each run that enter the fusion (default: "
                             f"{CANDIDATES} for hybrid, its K' (TASER uses 100); the whole run "
                             "otherwise); --depth is Pyserini's name for it")
    parser.add_argument("--norm", default=None, choices=RANX_NORMS,
                        help=f"ranx normalisation for {'/'.join(NORMED)}; default raw scores "
                             "(rrf reads ranks only, so it takes none)")
    parser.add_argument("--weights", type=finite_float, nargs="+", default=None,
                        help="wsum/linear weights, one per run (or tune them with --dev-runs)")
    parser.add_argument("--rrf-k", "--rrf.k", dest="rrf_k", type=positive_int, default=None,
                        action=SetOnce,
                        help=f"rrf's k: 1 / (k + rank), k >= 1 (default {RRF_K}); --rrf.k is "
                             "Pyserini's name for it")
    parser.add_argument("--remove-query", action="store_true",
                        help="drop each query's own id from the runs first, as if each was "
                             "searched with --remove-query (BEIR ArguAna, Quora); runs searched "
                             "so already lack it, and fusion only ranks their union, so the "
                             "fused run cannot bring it back")
    hyb = parser.add_argument_group("hybrid")
    hyb.add_argument("--alpha", type=finite_float, default=PYSERINI_ALPHA, action=SetOnce,
                     help="weight of the second (sparse) run; default "
                          f"{PYSERINI_ALPHA}, Pyserini's default (it used to be 1.0: pass "
                          "--alpha 1.0 to reproduce older hybrid runs); or tune it with "
                          "--dev-runs")
    hyb.add_argument("--hybrid-normalize", action="store_true",
                     help="Pyserini's per-query normalisation (Ma et al. 2021)")
    hyb.add_argument("--weight-on-dense", action="store_true",
                     help="alpha weighs the first (dense) run instead")
    dev = parser.add_argument_group("tuning on a dev split")
    dev.add_argument("--dev-runs", nargs="+", default=None,
                     help="the same systems' runs on dev queries, in the order of --runs: tunes "
                          "alpha (hybrid, grid 0.5..2.0 step 0.1), or weights (wsum, linear)")
    dev.add_argument("--dev-qrels", default=None, help="qrels of the dev queries")
    dev.add_argument("--metric", default=None,
                     help=f"metric maximised on dev (default {DEV_METRIC})")
    return parser


def _read(path: str, remove_query: bool, depth: int | None) -> Run:
    """A run to fuse, its queries' own ids dropped with ``--remove-query``, then cut to its top
    ``depth`` hits a query (``--candidates`` / ``--depth``; None: all)."""
    from pyserini_moe.search.fusion import top_k

    run = read_nonempty_run(path, "fuse")
    if remove_query:
        from pyserini_moe.search.base import remove_query as drop_query

        run = drop_query(run)
    return run if depth is None else top_k(run, depth)


def _say_different_queries(paths: list[str], runs: list[Run], judged: set[str] | None = None) -> None:
    """Runs over different query sets (another split, a failed search) fuse without complaint,
    each missing query from the other runs alone: one warning line says so. Dev runs
    (``judged``: the dev qrels' queries) are compared on the judged queries, which the tuning
    scores: one missing there counts as a miss of that system alone, and biases the tuning."""
    queries = [set(run) if judged is None else set(run) & judged for run in runs]
    if all(q == queries[0] for q in queries):
        return
    counts = ", ".join(f"{path}: {len(q)}" for path, q in zip(paths, queries))
    total = len(set().union(*queries))
    if judged is None:
        print(f"warning: the runs hold different queries ({counts}; {total} in all); a query "
              "missing from a run is fused from the others", file=sys.stderr)
    else:
        print(f"warning: the dev runs hold different judged queries ({counts}; {total} in all, "
              f"of {len(judged)} in --dev-qrels); a judged query missing from a dev run scores "
              "as that system's miss, which biases the tuning against it", file=sys.stderr)


def _refuse_what_the_method_ignores(args: argparse.Namespace) -> None:
    """A setting the chosen method does not read is a mistake (a weight meant for wsum given to
    rrf, an alpha to combsum, dev runs to rrf, which tunes nothing), not something to drop in
    silence; then fill the defaults."""
    if (args.dev_runs is None) != (args.dev_qrels is None):
        raise UserError("--dev-runs and --dev-qrels go together")
    given = [name for name, methods in _ONLY_FOR.items()
             if _is_set(args, name) and args.method not in methods]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        why = (" (rrf reads ranks only: no normalisation of the scores can change it)"
               if "norm" in given and args.method == "rrf" else "")
        raise UserError(f"--method {args.method} does not use {flags}{why}")
    _refuse_what_tuning_replaces(args)
    if args.weights is not None and (min(args.weights) < 0 or not any(args.weights)):
        raise UserError(f"--weights must be >= 0 and not all 0, got {args.weights}")
    args.rrf_k = RRF_K if args.rrf_k is None else args.rrf_k
    if args.method == "hybrid" and args.candidates is None:
        args.candidates = CANDIDATES


def _is_set(args: argparse.Namespace, name: str) -> bool:
    """Whether a setting was given. ``--alpha`` defaults to Pyserini's value, which ``--help``
    shows: it counts as given when typed (:class:`SetOnce` records that), even as that value or
    as 0; the other settings default to None or False."""
    if name == "alpha":
        return hasattr(args, "_given_alpha")
    value = getattr(args, name)
    return value is not None and value is not False


def _refuse_what_tuning_replaces(args: argparse.Namespace) -> None:
    """``--dev-runs`` chooses alpha or the weights: one given beside it would be replaced by
    the tuned value in silence, and ``--metric`` without it would be read by nothing. The metric
    is checked here, before any run is read."""
    if args.dev_runs is None:
        if args.metric is not None:
            raise UserError("--metric is the metric maximised on dev: give --dev-runs and "
                            "--dev-qrels with it, or leave it out")
        return
    for name, what in (("weights", "the weights"), ("alpha", "alpha")):
        if _is_set(args, name):
            raise UserError(f"--{name} or --dev-runs (which tunes {what}), not both")
    args.metric = parse_metric(args.metric or DEV_METRIC).name


def _refuse_tuning_on_the_fused_runs(runs: list[str], dev_runs: list[str]) -> None:
    """A run in both ``--runs`` and ``--dev-runs`` (however spelt) tunes alpha or the weights on
    the very queries being fused: the dev qrels then judge the test queries, and the fused run
    is fitted to its own evaluation. ``fuse`` cannot see which qrels judge ``--runs``, so the
    files are what it can compare."""
    fused = {same_file_key(path): path for path in runs}
    for path in dev_runs:
        same = fused.get(same_file_key(path))
        if same is not None:
            raise UserError(f"--dev-runs {path} is also fused (--runs {same}): tuning on the runs "
                            "being fused fits them to their own queries; give the same systems' "
                            "runs on dev queries")


def _refuse_dev_copies(paths: list[str], runs: list[Run], dev_paths: list[str],
                       dev_runs: list[Run]) -> None:
    """A dev run that holds the same rankings as a fused run is a copy of it, whatever its
    name, compression or run tag (``cp``, ``gzip -k``, a re-tagged ``sed``): tuning on it fits
    the fused run to its own queries. Compared as read (after ``--remove-query`` and
    ``--candidates``), which is what the tuning sees."""
    for path, dev_run in zip(dev_paths, dev_runs):
        same = next((p for p, run in zip(paths, runs) if run == dev_run), None)
        if same is not None:
            raise UserError(f"--dev-runs {path} holds the same rankings as --runs {same}: tuning "
                            "on a copy of a run being fused fits it to its own queries; give the "
                            "same systems' runs on dev queries")


def _say_if_dev_judges_fused_queries(runs: list[Run], dev_runs: list[Run],
                                     judged: set[str]) -> None:
    """Dev runs of the fused queries, judged by the dev qrels, tune alpha or the weights on the
    very queries being fused (dev runs of the test split under other names): one warning line
    says how many. One qrels file judging both splits is no such case: only queries the dev runs
    hold are tuned on."""
    fused = set().union(*runs)
    both = fused & set().union(*dev_runs) & judged
    if both:
        print(f"warning: {len(both)} of the {len(fused)} fused queries are judged in --dev-qrels: "
              "tuning on them fits the fused run to its own queries (are the dev runs and qrels "
              "of another split?)", file=sys.stderr)


def _run_tag(path: str) -> str:
    """The run tag (last column) of a TREC run's first line; "" for a file without one (MS
    MARCO's three columns, an unreadable file: that is reported where the run is read)."""
    try:
        parts = first_line_columns(path)
    except (OSError, UserError):
        return ""
    return parts[5] if len(parts) == 6 else ""


def _say_if_dev_runs_reordered(runs: list[str], dev_runs: list[str]) -> None:
    """``--dev-runs`` pair with ``--runs`` by position: the tuned weight (or alpha) of the n-th
    dev run is applied to the n-th run. When the run tags tell the systems apart and the dev
    runs' tags are the fused runs' in another order, the dev runs were given out of order: one
    warning line says so (a tag is only a hint, so it does not refuse)."""
    tags = [_run_tag(path) for path in runs]
    dev_tags = [_run_tag(path) for path in dev_runs]
    if ("" in tags or len(set(tags)) != len(tags) or tags == dev_tags
            or sorted(tags) != sorted(dev_tags)):
        return
    print(f"warning: the --dev-runs' run tags ({', '.join(dev_tags)}) are those of --runs "
          f"({', '.join(tags)}) in another order: --dev-runs pair with --runs by position, so "
          "the tuned values would go to the wrong runs; list the dev runs in the order of --runs",
          file=sys.stderr)



# The default run tags of sparse runs: this toolkit's search (bm25, impact) and Pyserini's Lucene
# searchers (Anserini); hybrid takes such a run second.
SPARSE_TAGS = ("bm25", "impact", "Anserini")


def _say_if_hybrid_order_swapped(runs: list[str], flag: str) -> None:
    """``hybrid`` takes the dense (or any model's) run first and the sparse one second, as
    Pyserini's does (``--alpha`` weighs the sparse run, or with ``--weight-on-dense`` the dense
    one). When the run tags say the first is a sparse run and the second is not, they were given
    the other way round: one warning line says so (a tag is a hint, so it does not refuse)."""
    first, second = (_run_tag(path) for path in runs)
    if first in SPARSE_TAGS and second and second not in SPARSE_TAGS:
        print(f"warning: --method hybrid takes the dense (or model) run first and the sparse run "
              f"second, but the run tags say {flag} {runs[0]} is {first} and {runs[1]} "
              f"{second}: give them the other way round", file=sys.stderr)


def _say_if_short(candidates: int | None, hits: int, runs: int) -> None:
    """Each run's top ``--candidates`` is fused: below ``--hits`` / (number of runs) their union
    cannot fill ``--hits`` a query, a shorter run than asked for (``search`` says so for its
    hybrid too, naming BM25; here the runs are any)."""
    if candidates is not None and runs * candidates < hits:
        print(f"warning: each run's top {candidates} is fused (--candidates): at most "
              f"{runs * candidates} hits a query, not --hits {hits}", file=sys.stderr)


def _say_if_at_the_edge(alpha: float, table: dict[float, float]) -> None:
    """A tuned alpha at an end of the grid that beats its neighbour may not be the optimum: the
    dev metric was still rising there (the grid is TASER's, 0.5..2.0; Pyserini's default 0.1
    lies outside it)."""
    grid = sorted(table)
    for end, nxt in ((grid[0], grid[1:2]), (grid[-1], grid[-2:-1])):
        if alpha == end and nxt and table[end] > table[nxt[0]]:
            print(f"warning: the tuned alpha {alpha} is at the end of the grid "
                  f"({grid[0]}..{grid[-1]}) and better than its neighbour: the best alpha may lie "
                  "beyond it; try --alpha by hand", file=sys.stderr)


# Fusions that read only ranks: an MS MARCO run (no scores) is as good as a TREC run to them.
RANK_FUSIONS = ("rrf", "sum_rr", "max_rr")


def _refuse_rank_only_runs(args: argparse.Namespace) -> None:
    """A method that adds or weighs scores given an MS MARCO run (``qid docid rank``) would
    fuse its made-up ``1 / rank`` with real scores of the other runs."""
    if args.method in RANK_FUSIONS or args.norm in ("rank", "borda"):
        return
    for path in [*args.runs, *(args.dev_runs or [])]:
        if Path(path).is_file() and is_rank_only(path):  # a missing one: "not found", later
            norm = " or --norm rank" if args.method in _ONLY_FOR["norm"] else ""
            raise UserError(f"{path} is an MS MARCO run (qid docid rank: no scores) and --method "
                            f"{args.method} fuses scores: use a rank fusion "
                            f"({', '.join(RANK_FUSIONS)}){norm}, or give TREC runs with their "
                            "scores")


def _say_what_is_fused(args: argparse.Namespace, runs: list) -> None:
    """One line before the work: what is fused, how, and why a ranx method takes a while (numba
    compiles ranx's functions in each new process: 10-30 s, then the fusion itself is quick)."""
    queries = len({qid for run in runs for qid in run})
    how = args.method + (f" ({args.norm})" if args.norm else "")
    tuning = "; tuning on the dev runs" if args.dev_runs is not None else ""
    slow = args.method not in (*CAME_METHODS, "rrf", "hybrid")
    print(f"fusing {len(runs)} runs ({queries} quer{'y' if queries == 1 else 'ies'}) with "
          f"{how}{tuning}"
          + ("; ranx compiles its functions first (10-30 s)" if slow else ""), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _refuse_what_the_method_ignores(args)
    if args.alpha < 0:
        raise UserError(f"--alpha must be >= 0 (the weight of the second run), got {args.alpha}")
    if len(args.runs) < 2:
        raise UserError("--runs needs at least two runs")
    if args.method == "hybrid" and len(args.runs) != 2:  # before the runs are read
        raise UserError("hybrid fuses exactly two runs: dense (or any model) first, sparse second")
    if args.dev_runs is not None and len(args.dev_runs) != len(args.runs):
        raise UserError("--dev-runs must list one run per --runs entry, in the same order")
    if args.weights is not None and len(args.weights) != len(args.runs):
        raise UserError(f"--weights needs {len(args.runs)} values, one per run")
    # before the work, not after; an empty --run-tag is refused, not replaced by the default
    tag = check_run_tag(f"fuse-{args.method}" if args.run_tag is None else args.run_tag)
    _refuse_rank_only_runs(args)
    refuse_input_as_output([args.output], [*args.runs, *(args.dev_runs or []), args.dev_qrels])
    refuse_non_run_output(args.output)
    refuse_inside_outputs("--output", args.output, file=True)
    refuse_one_file_twice((f"--runs {path}", path) for path in args.runs)
    refuse_one_file_twice((f"--dev-runs {path}", path) for path in args.dev_runs or [])
    _refuse_tuning_on_the_fused_runs(args.runs, args.dev_runs or [])
    if args.dev_runs is not None:
        _say_if_dev_runs_reordered(args.runs, args.dev_runs)
    runs = [_read(p, args.remove_query, args.candidates) for p in args.runs]
    _say_different_queries(args.runs, runs)
    dev = None
    if args.dev_runs is not None:
        from pyserini_moe.data.topics import load_qrels

        dev = ([_read(p, args.remove_query, args.candidates) for p in args.dev_runs],
               load_qrels(args.dev_qrels))
        refuse_untunable_dev(*dev, names=[f"--dev-runs {p}" for p in args.dev_runs])
        _refuse_dev_copies(args.runs, runs, args.dev_runs, dev[0])
        _say_if_dev_judges_fused_queries(runs, dev[0], set(dev[1]))
        _say_different_queries(args.dev_runs, dev[0], judged=set(dev[1]))
    tuned: dict = {}
    _say_if_short(args.candidates, args.hits, len(runs))
    _say_what_is_fused(args, runs)
    if args.method == "hybrid":
        from pyserini_moe.search.hybrid import hybrid_fusion, search_alpha

        _say_if_hybrid_order_swapped(args.runs, "--runs")
        if args.dev_runs is not None:
            _say_if_hybrid_order_swapped(args.dev_runs, "--dev-runs")
        alpha = args.alpha
        if dev is not None:
            alpha, table = search_alpha(*dev[0], dev[1], metric=args.metric,
                                        normalization=args.hybrid_normalize, k_prime=args.candidates)
            tuned = {"alpha": alpha, "dev": {str(a): v for a, v in table.items()}}
            _say_if_at_the_edge(alpha, table)
        fused = hybrid_fusion(runs[0], runs[1], alpha, args.hybrid_normalize, args.weight_on_dense,
                       k=args.hits)
    else:
        from pyserini_moe.search.fusion import fuse, optimize_weights

        params: dict = {"k": args.rrf_k} if args.method == "rrf" else {}
        if args.method in ("wsum", "linear"):
            if dev is not None:
                params = optimize_weights(dev[0], dev[1], args.method, args.metric, norm=args.norm)
                tuned = params
            elif args.weights is not None:
                params = {"weights": args.weights}
            else:
                raise UserError(f"{args.method} needs --weights or --dev-runs/--dev-qrels")
        fused = fuse(runs, args.method, norm=args.norm, params=params, k=args.hits)
    write_trec_run(fused, args.output, tag=tag, hits=args.hits)
    if tuned:
        print(f"tuned on dev: {json.dumps(tuned)}", file=sys.stderr)
    print(f"{len(fused)} queries fused with {args.method}; run written to {args.output}",
          file=sys.stderr)
    return 0

