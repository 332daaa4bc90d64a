"""Retrieval metrics with ``trec_eval -c`` semantics, computed in-process by ranx.

ranx is fast and gives per-query scores and significance tests; trec_eval (through Pyserini) is the
reference that papers report. :func:`evaluate` is built to agree with ``trec_eval -c`` (the tests
check it):

* every query of the qrels counts and a query missing from the run scores 0 (``-c``), also a query
  judged only non-relevant; run queries absent from the qrels are ignored;
* relevance > 0 is relevant; nDCG uses the graded judgments as gains, ``gain / log2(rank + 1)`` as
  ``ndcg_cut`` does; judgments <= 0 gain nothing;
* tied scores are ranked as trec_eval ranks them, by docid *descending* (:func:`runs.trec_order`);
  ranx's own Run keeps ties in insertion order, which moved nDCG@10 by 0.03 on a run with many
  ties. trec_eval ignores the rank column, so this is the order that counts even for a file whose
  rank column says otherwise (``write_trec_run`` lists ties as they came, as Pyserini does).

ranx and the JVM are imported lazily so that parsing metric names stays instant.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import math
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyserini_moe._java import bootstrap
from pyserini_moe.data.dpr import passage_texts
from pyserini_moe.errors import UserError
from pyserini_moe.io import open_binary
from pyserini_moe.runs import JAVA_INT_MAX, Run, ranked, trec_order

Qrels = dict[str, dict[str, int]]

DEFAULT_METRICS = ("ndcg@10", "recall@100", "recall@1000", "mrr@10", "map")
STAT_TESTS = {
    "student": "paired Student's t-test",
    "fisher": "Fisher's randomization test",
    "tukey": "Tukey's HSD test",
}
# Metric families taking a cut-off k, with the trec_eval measure for k. trec_eval has no cut-off for
# recip_rank, so mrr@k is recip_rank on the run truncated with ``-M k``.
_TREC_MEASURES = {
    "ndcg": "ndcg_cut.{k}",
    "recall": "recall.{k}",
    "precision": "P.{k}",
    "mrr": "recip_rank",
    "map": "map_cut.{k}",
}
VALID_METRICS = "map, mrr, " + ", ".join(f"{family}@k" for family in _TREC_MEASURES)
# trec_eval's own names (``ndcg_cut.10``, ``P.10``, ``recip_rank``: Pyserini's 2CR pages use them),
# read off the table above, lowercased: measure -> family.
_TREC_FAMILIES = {measure.partition(".")[0].lower(): family
                  for family, measure in _TREC_MEASURES.items()}


@dataclass(frozen=True)
class Metric:
    """One user-facing metric and its names in ranx and trec_eval."""

    name: str
    ranx: str
    trec_measure: str
    trec_depth: int | None = None  # trec_eval's -M: only this many hits per query are read

    @property
    def trec_output(self) -> str:
        """The name trec_eval prints: ``ndcg_cut.10`` is reported as ``ndcg_cut_10``."""
        return self.trec_measure.replace(".", "_")


def parse_metric(name: str) -> Metric:
    """Map ``ndcg@10``-style names (case-insensitive) to ranx and trec_eval; ValueError if unknown.

    trec_eval's names are read as the names they measure (``ndcg_cut.10`` as ``ndcg@10``,
    ``recip_rank`` as ``mrr``). The result keeps ``name`` as given, so results are keyed by the
    caller's own spelling.
    """
    key = _from_trec_name(name.strip().lower())
    if key in ("map", "mrr"):
        return Metric(name, key, "map" if key == "map" else "recip_rank")
    family, sep, cutoff = key.partition("@")
    if sep and family in _TREC_MEASURES and cutoff.isdigit() and 0 < int(cutoff) <= JAVA_INT_MAX:
        k = int(cutoff)
        depth = k if family == "mrr" else None
        return Metric(name, f"{family}@{k}", _TREC_MEASURES[family].format(k=k), depth)
    raise UserError(f"unknown metric {name!r}; valid metrics: {VALID_METRICS} "
                    f"(k an integer in [1, {JAVA_INT_MAX}], e.g. ndcg@10), or trec_eval's names for them "
                    "(ndcg_cut.10, recall.100, P.10, map_cut.100, recip_rank, map)")


def _from_trec_name(key: str) -> str:
    """``ndcg_cut.10`` -> ``ndcg@10``, ``recip_rank`` -> ``mrr``; any other name unchanged."""
    measure, dot, cutoff = key.partition(".")
    family = _TREC_FAMILIES.get(measure)
    if family is None or bool(dot) != ("{k}" in _TREC_MEASURES[family]):  # cut-off or none
        return key
    return f"{family}@{cutoff}" if dot else family


def parse_metrics(names: Iterable[str]) -> list[Metric]:
    """Parse and de-duplicate, keeping the order given."""
    metrics = list({m.name: m for m in map(parse_metric, names)}.values())
    if not metrics:
        raise UserError("no metrics given")
    return metrics


def distinct_metrics(names: Iterable[str], flag: str = "--metrics") -> list[Metric]:
    """:func:`parse_metrics` for a user's list: a name repeated as written is one metric, but
    two spellings of one measure (``ndcg@10``, ``nDCG@10``, ``ndcg@010``, ``ndcg_cut.10``) are
    refused, since each would be a row of its own: one number reported as several."""
    metrics = parse_metrics(names)
    seen: dict[str, str] = {}
    for metric in metrics:
        first = seen.setdefault(metric.ranx, metric.name)
        if first != metric.name:
            raise UserError(f"{flag}: {first!r} and {metric.name!r} are one measure "
                            f"({metric.ranx}); give it once")
    return metrics


@contextlib.contextmanager
def _quiet_numba() -> Iterator[None]:
    """ranx's metrics warn, when numba compiles them, about a harmless uint64 -> int64 cast."""
    from numba.core.errors import NumbaTypeSafetyWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaTypeSafetyWarning)
        yield


def _ranx_qrels(qrels: Qrels) -> Any:
    """Per query, ``(doc index, relevance)`` rows, most relevant first (ranx reads IDCG from them).

    A document is numbered by its position in ``qrels[qid]``, which avoids ranx's hashing of docids
    and its Qrels/Run classes, whose numba containers take seconds to set up in each process.
    """
    from numba.typed import List

    if not qrels:
        raise UserError("the qrels are empty")
    arrays = []
    for docs in qrels.values():
        rows = sorted(enumerate(docs.values()), key=lambda row: -row[1])
        arrays.append(np.array(rows, dtype=np.float64).reshape(-1, 2))
    return List(arrays)


def _ranx_run(run: Run, qrels: Qrels) -> Any:
    """Per query of the qrels, ``(doc index, score)`` rows in trec_eval's order, scores distinct.

    Unjudged documents are all numbered -1 (they cannot score); a query missing from the run gets
    no rows. ranx never re-sorts these arrays, so ties cannot be reordered.
    """
    from numba.typed import List

    arrays = []
    for qid, docs in qrels.items():
        index = {docid: i for i, docid in enumerate(docs)}
        ids = [index.get(docid, -1) for docid in trec_order(run.get(qid, {}))]
        arrays.append(np.column_stack([np.array(ids, dtype=np.float64),
                                       np.arange(len(ids), 0, -1, dtype=np.float64)]))
    return List(arrays)


def _per_query_arrays(ranx_qrels: Any, run: Run, qrels: Qrels,
                      specs: list[Metric]) -> dict[str, np.ndarray]:
    """ranx's per-query values, in the order of the qrels' queries.

    Calls ranx's metric functions directly: ``ranx.evaluate(..., return_mean=False)`` with a single
    metric raises KeyError in ranx 0.3.21.
    """
    from ranx.metrics import metric_switch

    ranx_run = _ranx_run(run, qrels)
    scores = {}
    with _quiet_numba():
        for m in specs:
            family, _, k = m.ranx.partition("@")
            scores[m.name] = metric_switch(family)(ranx_qrels, ranx_run, int(k or 0), 1)
    return scores


def evaluate_per_query(run: Run, qrels: Qrels,
                       metrics: Iterable[str]) -> dict[str, dict[str, float]]:
    """``{metric: {qid: value}}`` over every query of the qrels (0 when missing from the run)."""
    arrays = _per_query_arrays(_ranx_qrels(qrels), run, qrels, parse_metrics(metrics))
    return {name: dict(zip(qrels, map(float, values))) for name, values in arrays.items()}


def evaluate(run: Run, qrels: Qrels, metrics: Iterable[str] = DEFAULT_METRICS) -> dict[str, float]:
    """Mean of each metric over the qrels' queries, as ``trec_eval -c`` reports it."""
    return mean_values(evaluate_per_query(run, qrels, metrics))


def mean_values(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{metric: mean}`` of ``{metric: {qid: value}}`` (a run's, or kept per-query values)."""
    return {name: math.fsum(values.values()) / len(values) for name, values in per_query.items()}


def per_query(run: Run, qrels: Qrels, metric: str) -> dict[str, float]:
    """``{qid: value}`` of one metric for every query of the qrels."""
    return evaluate_per_query(run, qrels, [metric])[metric]


@dataclass(frozen=True)
class Comparison:
    """Mean of each run and a paired test of each run against the baseline, per metric."""

    metrics: list[str]
    baseline: str
    stat_test: str
    max_p: float
    means: dict[str, dict[str, float]]  # run -> metric -> mean
    p_values: dict[str, dict[str, float]]  # run other than the baseline -> metric -> p-value

    @property
    def runs(self) -> list[str]:
        return list(self.means)

    def significant(self, run: str, metric: str) -> bool:
        return run != self.baseline and self.p_values[run][metric] <= self.max_p

    def marker(self, run: str, metric: str) -> str:
        """``▲``/``▼`` when significantly better/worse than the baseline, else empty."""
        if not self.significant(run, metric):
            return ""
        return "▲" if self.means[run][metric] > self.means[self.baseline][metric] else "▼"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, markers included."""
        return {
            "metrics": self.metrics, "baseline": self.baseline, "stat_test": self.stat_test,
            "max_p": self.max_p, "means": self.means, "p_values": self.p_values,
            "significant": {run: {m: self.significant(run, m) for m in self.metrics}
                            for run in self.p_values},
            "markers": {run: {m: self.marker(run, m) for m in self.metrics}
                        for run in self.p_values},
        }


def compare(runs: Mapping[str, Run], qrels: Qrels, metrics: Iterable[str] = DEFAULT_METRICS,
            baseline: str | None = None, stat_test: str = "student",
            max_p: float = 0.05) -> Comparison:
    """Per-query paired comparison of ``runs`` (name -> run) against ``baseline``, by ranx's tests.

    Same tests and defaults as ``ranx.compare`` (Fisher: 1000 permutations, seed 42), run on the
    per-query values of :func:`evaluate_per_query`. The baseline defaults to the first run. A
    p-value left undefined because every per-query difference is 0 (identical runs under a t-test)
    is reported as 1.
    """
    from ranx.statistical_tests import compute_statistical_significance

    if len(runs) < 2:
        raise UserError("compare needs at least two runs")
    if stat_test not in STAT_TESTS:
        raise UserError(f"unknown statistical test {stat_test!r}; valid: {', '.join(STAT_TESTS)}")
    baseline = next(iter(runs)) if baseline is None else baseline
    if baseline not in runs:
        raise UserError(f"baseline {baseline!r} is not one of the runs: {', '.join(runs)}")
    specs = parse_metrics(metrics)
    ranx_qrels = _ranx_qrels(qrels)
    scores = {name: _per_query_arrays(ranx_qrels, run, qrels, specs) for name, run in runs.items()}
    queries = len(next(iter(next(iter(scores.values())).values())))
    if queries < 2:  # the tests are undefined (p = 1, numpy's divide-by-zero warnings)
        raise UserError(f"a significance test needs at least 2 judged queries; these runs have "
                        f"{queries}: evaluate them without a baseline")
    with _quiet_numba():
        tests = compute_statistical_significance(list(runs), scores, stat_test=stat_test,
                                                 max_p=max_p)
    means = {name: {m: float(np.mean(v)) for m, v in s.items()} for name, s in scores.items()}
    p_values = {name: {m.name: _defined_p(tests[baseline, name][m.name]["p_value"]) for m in specs}
                for name in runs if name != baseline}
    return Comparison([m.name for m in specs], baseline, stat_test, max_p, means, p_values)


def _defined_p(p: float) -> float:
    p = float(p)
    return 1.0 if math.isnan(p) else p


def format_table(headers: list[str], rows: list[list[str]], style: str = "markdown") -> str:
    """A padded table; columns of numbers are right-aligned, the others left-aligned.

    ``markdown`` renders as a Markdown table (and reads fine as text); ``plain`` uses spaces only.
    """
    if style not in ("markdown", "plain"):
        raise UserError(f"unknown table style {style!r}; valid: markdown, plain")
    columns = list(zip(headers, *rows))
    widths = [max(map(len, column)) for column in columns]
    numeric = [bool(rows) and all(cell[:1].isdigit() for cell in column[1:]) for column in columns]

    def line(cells: Iterable[str]) -> str:
        padded = [c.rjust(w) if right else c.ljust(w)
                  for c, w, right in zip(cells, widths, numeric)]
        return "| " + " | ".join(padded) + " |" if style == "markdown" else "  ".join(padded)

    if style == "markdown":
        rule = "|" + "|".join("-" * (w + 1) + ":" if right else ":" + "-" * (w + 1)
                              for w, right in zip(widths, numeric)) + "|"
    else:
        rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def format_comparison(comparison: Comparison, style: str = "markdown", digits: int = 4,
                      show_p: bool = True) -> str:
    """Runs as rows, metrics as columns, markers and p-values vs the baseline, and a legend."""
    rows = []
    for run in comparison.runs:
        cells = [f"{run} (baseline)" if run == comparison.baseline else run]
        for m in comparison.metrics:
            cell = f"{comparison.means[run][m]:.{digits}f}{comparison.marker(run, m)}"
            if show_p and run != comparison.baseline:
                p = comparison.p_values[run][m]
                cell += " (p<0.001)" if p < 0.001 else f" (p={p:.3f})"
            cells.append(cell)
        rows.append(cells)
    legend = (f"▲/▼: significantly better/worse than {comparison.baseline} "
              f"({STAT_TESTS[comparison.stat_test]}, p <= {comparison.max_p:g})")
    return format_table(["run", *comparison.metrics], rows, style) + "\n\n" + legend


def trec_eval(run_path: str | os.PathLike, qrels_path: str | os.PathLike,
              metrics: Iterable[str] = DEFAULT_METRICS) -> dict[str, float]:
    """The same metrics from trec_eval ``-c`` (Pyserini's wrapper around the reference binary).

    trec_eval prints 4 decimals, so values are rounded to 1e-4. Measures are grouped into one call
    per ``-M`` depth, because the depth applies to every measure of a call (mrr@10 needs -M 10),
    and cut-offs of one measure are merged (``-m recall.100 -m recall.1000`` reports only 100).
    """
    specs = parse_metrics(metrics)
    run_path = Path(run_path)
    if not run_path.is_file():
        raise FileNotFoundError(f"run file not found: {run_path}")

    bootstrap()
    qrels = Path(qrels_path)
    if not qrels.is_file():
        from pyserini.search import get_qrels_file

        qrels = Path(get_qrels_file(str(qrels)))  # a Pyserini name; FileNotFoundError if unknown
    groups: dict[int | None, list[Metric]] = {}
    for m in specs:
        groups.setdefault(m.trec_depth, []).append(m)
    with tempfile.TemporaryDirectory(prefix="trec_eval.") as folder:
        files = [_as_trec_eval_reads(qrels, Path(folder) / "qrels"),
                 _as_trec_eval_reads(run_path, Path(folder) / "run")]
        values = _trec_eval_values(groups, *map(str, files),
                                   f"for {run_path} with qrels {qrels_path}")
    return {m.name: values[m.name] for m in specs}


def _as_trec_eval_reads(path: Path, copy: Path) -> Path:
    """``path``, or a plain copy of it when it is gzipped or starts with a UTF-8 byte-order mark:
    trec_eval reads the bytes as they are, so it would fail on gzip, or file the first line under
    a query id carrying the mark, where this project's readers read what was meant (the same
    judgments and hits for both, never two values in silence)."""
    with open_binary(path) as src:
        head = src.read(len(codecs.BOM_UTF8))
        if head != codecs.BOM_UTF8 and not path.name.endswith(".gz"):
            return path
        with open(copy, "wb") as dst:
            dst.write(head.removeprefix(codecs.BOM_UTF8))
            shutil.copyfileobj(src, dst)
    return copy


def _trec_eval_values(groups: dict[int | None, list[Metric]], qrels: str, run: str,
                      what: str) -> dict[str, float]:
    """One trec_eval call per ``-M`` depth (the JVM is up); ``what`` names the files in errors."""
    from pyserini.eval.trec_eval import trec_eval as pyserini_trec_eval

    values: dict[str, float] = {}
    for depth, group in groups.items():
        args = ["trec_eval", "-c", *(["-M", str(depth)] if depth else [])]
        for measure in _merge_cutoffs(m.trec_measure for m in group):
            args += ["-m", measure]
        args += [qrels, run]
        out, err = io.StringIO(), io.StringIO()
        failure = ""
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                pyserini_trec_eval(args)
            except (ValueError, KeyError, IndexError) as e:  # its parsing of bad files or output
                failure = f"{type(e).__name__}: {e}"
        reported = {}
        for line in out.getvalue().splitlines():
            parts = [p.strip() for p in line.split("\t")]
            if len(parts) == 3 and parts[1] == "all":
                reported[parts[0]] = float(parts[2])
        for m in group:
            if m.trec_output not in reported:
                detail = err.getvalue().strip() or failure or out.getvalue().strip() or "no output"
                raise UserError(f"trec_eval did not report {m.trec_measure} {what}: {detail}")
            values[m.name] = reported[m.trec_output]
    return values


def _merge_cutoffs(measures: Iterable[str]) -> list[str]:
    """``recall.100, recall.1000`` -> ``recall.100,1000``: trec_eval keeps one -m per measure."""
    cutoffs: dict[str, dict[str, None]] = {}  # ordered sets
    for measure in measures:
        base, _, cutoff = measure.partition(".")
        cutoffs.setdefault(base, {})
        if cutoff:
            cutoffs[base][cutoff] = None
    return [f"{base}.{','.join(cs)}" if cs else base for base, cs in cutoffs.items()]


def topk_accuracy(run: Run, answers: Mapping[str, list[str]],
                  passages: Callable[[str], str] | Mapping[str, str],
                  ks: Iterable[int] = (20, 100), regex: bool = False) -> dict[str, float]:
    """DPR top-k accuracy (NQ/TriviaQA): share of questions with an answer in their top-k passages.

    Matching is Pyserini's own ``has_answers`` (DPR's tokenised, uncased match, or regexes), so the
    numbers agree with ``pyserini.eval.evaluate_dpr_retrieval``. Questions without results count
    as misses; run queries without answers are ignored. ``passages`` maps a docid to the text to
    search (DPR searches the passage text without its title). Hits are read in the rank order that
    ``write_trec_run`` writes. Returns ``{"top20": ..., "top100": ...}``.
    """
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise UserError(f"ks must be positive integers, got {ks}")
    if not answers:
        raise UserError("no answers given")

    bootstrap()
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    text = passages.__getitem__ if isinstance(passages, Mapping) else passages
    tokenizer = SimpleTokenizer()
    first_hit = []  # 0-based rank of the first passage with an answer, ks[-1] if none
    for qid, answer_list in answers.items():
        rank = ks[-1]
        for i, (docid, _) in enumerate(ranked(run.get(qid, {}))[:ks[-1]]):
            if has_answers(text(docid), answer_list, tokenizer, regex):
                rank = i
                break
        first_hit.append(rank)
    return {f"top{k}": sum(r < k for r in first_hit) / len(first_hit) for k in ks}


def answer_accuracy(run: Run, answers: Mapping[str, list[str]], passages: str | os.PathLike,
                    ks: Iterable[int], regex: bool = False) -> dict[str, float]:
    """DPR top-k accuracy of ``run``, reading only the passages the run ranks within max(ks)."""

    ks = sorted(set(ks))
    needed = {docid for qid in answers for docid, _ in ranked(run.get(qid, {}))[:ks[-1]]}
    texts = passage_texts(passages, needed)
    missing = needed - texts.keys()
    if missing:
        raise UserError(f"{passages}: the run ranks passage {min(missing)!r} that is not in it "
                        f"({len(missing)} missing): wrong passages file for this run?")
    return topk_accuracy(run, answers, texts, ks, regex)


def say_if_depths_differ(runs: Mapping[str, Run], metrics: Iterable[str]) -> None:
    """Runs of different depths (10 hits a query against 30) compared at a cut-off beyond the
    shallower one: its recall@100 is capped by how many hits it kept, not by how it ranks, and a
    significance mark would credit the deeper run's ranking. One warning line names the depths
    and the metrics affected (those without a cut-off read the whole list)."""
    depths = {name: max(map(len, run.values()), default=0) for name, run in runs.items()}
    shallow = min(depths.values(), default=0)
    if shallow == max(depths.values(), default=0):
        return
    affected = [name for name in metrics if _cutoff(parse_metric(name)) > shallow]
    if affected:
        listed = ", ".join(f"{name}: {depth}" for name, depth in depths.items())
        print(f"warning: the runs hold different numbers of hits a query (at most {listed}): "
              f"{', '.join(affected)} then compare{'s' if len(affected) == 1 else ''} list "
              "lengths as well as rankings; cut the runs to one depth to compare rankings alone",
              file=sys.stderr)


def _cutoff(metric: Metric) -> float:
    """How many hits a query ``metric`` reads: its ``@k``, or all of them."""
    _, sep, k = metric.ranx.partition("@")
    return int(k) if sep else math.inf


def check_coverage(runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]]) -> None:
    """Judged queries a run lacks are said, since they count as 0 in every mean (trec_eval -c);
    so is a run none of whose documents is judged at all: the qrels of another collection whose
    query ids happen to match (Cranfield's and CISI's are both 1, 2, ...) score 0 in silence."""
    judged = {doc for docs in qrels.values() for doc in docs}
    for name, run in runs.items():
        missing = [q for q in qrels if not run.get(q)]
        if missing:
            print(f"warning: {name}: {len(missing)} of {len(qrels)} judged queries have no results "
                  f"(e.g. {missing[0]}); they count as 0", file=sys.stderr)
        retrieved = {doc for qid in qrels for doc in run.get(qid, {})}
        if retrieved and not retrieved & judged:
            print(f"warning: {name}: none of its {len(retrieved)} documents for the judged queries "
                  "is judged in these qrels: are they another collection's?", file=sys.stderr)
