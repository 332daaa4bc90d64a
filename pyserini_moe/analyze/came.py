"""``python -m pyserini_moe.analyze came``: how CAME's three experts differ and what fusing gains.

From the runs that ``python -m pyserini_moe.search --retriever fused --expert-runs PREFIX`` writes
(``PREFIX.impact.trec`` = lexical, ``PREFIX.multivector.trec`` = local, ``PREFIX.dense.trec`` =
global) and one or more fused runs, the command reports, in Markdown:

1. table 3 in small: each expert's and each fused run's metrics, every run tested (paired, by
   :func:`pyserini_moe.eval.metrics.compare`, as ``python -m pyserini_moe.eval --baseline``)
   against the best single expert;
2. how much the experts' result lists overlap (section 5.3: "the rank-biased overlap (RBO) between
   top 1000 results retrieved by any two independently trained experts is 42%-48%"): an RBO
   matrix, top-k overlap, and each expert's relevant documents that no other expert finds;
3. figure 4 in kind (section 5.5): the queries where the experts disagree most, with each run's
   rank of the first relevant document and its top documents.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from pyserini_moe.analyze.common import emit, figure, refuse_run_without_judged_queries, save_png
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.eval.metrics import (
    compare,
    distinct_metrics,
    evaluate,
    format_comparison,
    parse_metrics,
    say_if_depths_differ,
)
from pyserini_moe.io import iter_lines, refuse_one_file_twice
from pyserini_moe.representation import CAME_EXPERTS
from pyserini_moe.runs import Run, ranked, read_trec_run

if TYPE_CHECKING:
    from pyserini_moe.eval.metrics import Qrels

# CAME's matching experts (section 3.2) and the run file each gets from ``search --expert-runs``.
EXPERTS = {expert: r.index_kind for expert, r in CAME_EXPERTS.items()}
DEFAULT_METRICS = ("ndcg@10", "recall@100", "recall@1000")
# Section 5.3 compares the experts' top 1000; it cites Webber et al. (2010) but gives no p.
# p = 0.9 is a common choice: the top 10 ranks carry 86% of the weight (Webber et al. eq. 21).
PAPER_DEPTH = 1000
DEFAULT_RBO_P = 0.9
OVERLAP_KS = (10, 100)
COMPLEMENT_DEPTH = 100
TOP_DOCS = 3  # documents listed per run in the case study
RELEVANT_SHOWN = 5  # relevant documents listed per case study query
SNIPPET_CHARS = 60  # a document without a title is shown by its first words

Ranking = list[str]  # docids, best first


def rbo(a: Sequence[str], b: Sequence[str], p: float = DEFAULT_RBO_P) -> float:
    """Extrapolated rank-biased overlap RBO_ext of two rankings (Webber et al. 2010, eq. 32).

    With S the shorter list (length s), L the longer (length l), and X_d the number of documents
    that S's top d and L's top d share (for d > s, S whole against L's top d)::

        RBO_ext = (1-p)/p * [ sum_{d=1..l} X_d/d * p^d + sum_{d=s+1..l} X_s*(d-s)/(s*d) * p^d ]
                  + [ (X_l - X_s)/l + X_s/s ] * p^l

    For lists of equal length k this is eq. 30, ``X_k/k * p^k + (1-p)/p * sum_d X_d/d * p^d``:
    the agreement seen at depth k is assumed to hold below it, so identical lists score 1 at any
    depth and disjoint ones 0, and a list that is a prefix of the other also scores 1. Lists
    must be free of duplicates (runs are); ties are whatever order the caller gives (here
    trec_eval's). One empty list against a non-empty one scores 0; two empty lists are undefined.
    """
    if not 0 < p < 1:
        raise UserError(f"RBO's p must be in (0, 1), got {p}")
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    s, n = len(short), len(long_)
    if n == 0:
        raise UserError("RBO of two empty rankings is undefined")
    if s == 0:
        return 0.0
    seen_short: set[str] = set()
    seen_long: set[str] = set()
    x = 0  # X_d
    x_s = 0
    total = 0.0  # the bracketed sums
    for d in range(1, n + 1):
        item = long_[d - 1]
        if d <= s:
            mine = short[d - 1]
            seen_short.add(mine)
            seen_long.add(item)
            x += (mine in seen_long) + (item in seen_short) - (mine == item)
            if d == s:
                x_s = x
        else:
            x += item in seen_short
            total += x_s * (d - s) / (s * d) * p ** d
        total += x / d * p ** d
    return (1 - p) / p * total + ((x - x_s) / n + x_s / s) * p ** n


def overlap_at(a: Sequence[str], b: Sequence[str], k: int) -> float:
    """|A_k ∩ B_k| / k for the top k of each list: a shorter list still divides by k (the
    overlap@k of the IR literature; the runs analysed hold 1,000 hits, so k is what they hold)."""
    return len(set(a[:k]) & set(b[:k])) / k


def rankings(run: Run) -> dict[str, Ranking]:
    """qid -> docids in trec_eval's order (score descending, ties by docid descending)."""
    return {qid: [docid for docid, _ in ranked(hits)] for qid, hits in run.items()}


def mean_pairwise(lists: Mapping[str, Mapping[str, Ranking]], qids: Sequence[str],
                  measure: Callable[[Ranking, Ranking], float],
                  progress: bool = False) -> dict[tuple[str, str], float]:
    """``measure`` of every pair of runs, averaged over ``qids``. A query one run has no results
    for counts as no overlap; a query neither has is left out."""
    means = {}
    for x, y in tqdm(list(itertools.combinations(lists, 2)), desc="overlap", disable=not progress):
        values = [measure(lists[x].get(q, []), lists[y].get(q, [])) for q in qids
                  if lists[x].get(q) or lists[y].get(q)]
        means[x, y] = math.fsum(values) / len(values) if values else 0.0
    return means


@dataclass(frozen=True)
class Complement:
    """One expert's relevant documents in its top k (pooled over queries), and how many of them
    no other expert has in its own top k."""

    found: int
    unique: int

    @property
    def share(self) -> float | None:
        return self.unique / self.found if self.found else None


def relevant(qrels: Qrels) -> dict[str, set[str]]:
    """qid -> documents judged relevant (> 0); queries without any are left out."""
    return {q: rel for q, docs in qrels.items() if (rel := {d for d, g in docs.items() if g > 0})}


def complementarity(lists: Mapping[str, Mapping[str, Ranking]], qrels: Qrels,
                    k: int = COMPLEMENT_DEPTH) -> dict[str, Complement]:
    """Per expert, the relevant documents of its top k that are in no other expert's top k: what
    it alone contributes to the fusion's candidates (section 5.3, "could complement each other")."""
    found = dict.fromkeys(lists, 0)
    unique = dict.fromkeys(lists, 0)
    for qid, rel in relevant(qrels).items():
        tops = {name: set(ranking.get(qid, [])[:k]) for name, ranking in lists.items()}
        for name, top in tops.items():
            others = set().union(*(t for n, t in tops.items() if n != name))
            found[name] += len(top & rel)
            unique[name] += len(top & rel - others)
    return {name: Complement(found[name], unique[name]) for name in lists}


def first_relevant(ranking: Ranking, rel: set[str], depth: int) -> int | None:
    """1-based rank of the first relevant document in the top ``depth``; None beyond it."""
    return next((r for r, docid in enumerate(ranking[:depth], start=1) if docid in rel), None)


def disagreements(lists: Mapping[str, Mapping[str, Ranking]], qrels: Qrels, depth: int,
                  n: int) -> list[tuple[str, float]]:
    """The ``n`` queries where the experts disagree most, as ``(qid, spread)``.

    Disagreement is the spread (max - min over experts) of the reciprocal rank of the first
    relevant document within ``depth`` (0 beyond it). It is 1 for figure 4's pattern, one expert
    at rank 1 and another beyond the top 1000, while ranks 500 vs 1000 barely count. Ties go to
    the query whose worst expert ranks the document lowest, then to the smaller qid; queries
    with no disagreement (spread 0) are never picked.
    """
    scored = []
    for qid, rel in relevant(qrels).items():
        ranks = [first_relevant(r.get(qid, []), rel, depth) for r in lists.values()]
        rr = [1 / r if r else 0.0 for r in ranks]
        spread = max(rr) - min(rr)
        if spread > 0:
            worst = max(r or depth + 1 for r in ranks)
            scored.append((-spread, -worst, qid))
    return [(qid, -neg) for neg, _, qid in sorted(scored)[:n]]


# -- Markdown ---------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def square(names: Sequence[str], pairs: Mapping[tuple[str, str], float]) -> list[list[float]]:
    """The symmetric matrix of pairwise values, 1 on the diagonal (RBO of a list with itself)."""
    return [[1.0 if x == y else pairs.get((x, y), pairs.get((y, x), math.nan)) for y in names]
            for x in names]


def format_rbo_matrix(names: Sequence[str], pairs: Mapping[tuple[str, str], float]) -> str:
    lines = ["| RBO | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {x} | " + " | ".join(f"{v:.3f}" for v in row) + " |"
              for x, row in zip(names, square(names, pairs))]
    return "\n".join(lines)


def format_overlaps(overlaps: Mapping[int, Mapping[tuple[str, str], float]]) -> str:
    """One row per pair of experts, one column per k."""
    ks = list(overlaps)
    lines = ["| pair | " + " | ".join(f"top-{k} overlap" for k in ks) + " |",
             "|---|" + "---:|" * len(ks)]
    for pair in next(iter(overlaps.values())):
        lines.append(f"| {pair[0]} / {pair[1]} | "
                     + " | ".join(f"{overlaps[k][pair]:.3f}" for k in ks) + " |")
    return "\n".join(lines)


def format_complementarity(complements: Mapping[str, Complement]) -> str:
    lines = [f"| expert | relevant in top-{COMPLEMENT_DEPTH} | in no other expert's | share |",
             "|---|---:|---:|---:|"]
    for name, c in complements.items():
        share = "-" if c.share is None else f"{c.share:.2%}"
        lines.append(f"| {name} | {c.found} | {c.unique} | {share} |")
    return "\n".join(lines)


def format_cases(cases: Sequence[tuple[str, float]], lists: Mapping[str, Mapping[str, Ranking]],
                 qrels: Qrels, depth: int, topics: Mapping[str, str],
                 labels: Mapping[str, str]) -> str:
    """Per query: its text, its relevant documents, and per run (experts, then fused) the rank
    of the first relevant document ('-' beyond ``depth``, as in figure 4) and its top documents.
    ``labels`` maps a docid to what to show after it (title or snippet)."""
    def doc(docid: str) -> str:
        return _cell(f"{docid} ({labels[docid]})" if labels.get(docid) else docid)

    rel = relevant(qrels)
    blocks = []
    for i, (qid, spread) in enumerate(cases, start=1):
        title = f"{qid}: {_cell(topics[qid])}" if qid in topics else qid
        judged = sorted(rel[qid], key=lambda d: (-qrels[qid][d], d))
        more = f" and {len(judged) - RELEVANT_SHOWN} more" if len(judged) > RELEVANT_SHOWN else ""
        lines = [f"### {i}. {title}", "",
                 f"Disagreement {spread:.3f}. Relevant: "
                 + ", ".join(map(doc, judged[:RELEVANT_SHOWN])) + more + ".", "",
                 f"| run | first relevant rank | top {TOP_DOCS} |", "|---|---:|---|"]
        for name, ranking in lists.items():
            hits = ranking.get(qid, [])
            rank = first_relevant(hits, rel[qid], depth)
            lines.append(f"| {name} | {rank or '-'} | "
                         + ", ".join(map(doc, hits[:TOP_DOCS])) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def plot_rbo(names: Sequence[str], pairs: Mapping[tuple[str, str], float], path: str | Path,
             title: str) -> None:
    """Heat map of the RBO matrix, each cell annotated with its value."""
    fig, (ax,) = figure(4.8, 4.0)
    matrix = square(names, pairs)
    image = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.3f}", ha="center", va="center",
                    color="black" if v > 0.6 else "white")
    ax.set(xticks=range(len(names)), xticklabels=names, yticks=range(len(names)),
           yticklabels=names, title=title)
    fig.colorbar(image, ax=ax, label="RBO")
    save_png(fig, path)


# -- command line -----------------------------------------------------------------------------
def parse_named_runs(specs: Sequence[str], flag: str, allowed: Sequence[str] | None = None,
                     syntax: str = "NAME=RUN_FILE, e.g. lexical=runs/came.impact.trec"
                     ) -> dict[str, str]:
    """``["lexical=a.trec", ...]`` -> ``{"lexical": "a.trec", ...}``, in the order given;
    ``syntax`` is the flag's own form and example, for the refusal of a malformed value."""
    runs: dict[str, str] = {}
    for spec in specs:
        name, sep, path = (part.strip() for part in spec.partition("="))
        if not sep or not name or not path:
            raise UserError(f"{flag} {spec!r}: expected {syntax}")
        if allowed is not None and name not in allowed:
            raise UserError(f"{flag} {spec!r}: unknown expert {name!r}; valid: "
                            f"{', '.join(allowed)}")
        if name in runs:
            raise UserError(f"{flag}: {name!r} given twice")
        runs[name] = path
    return runs


def _read_titles(corpus: str, docids: set[str]) -> dict[str, str]:
    """Title of each wanted document, or the start of its text when it has none."""

    labels = {}
    for document in BeirCollection.load(corpus).corpus():
        if document.id in docids:
            text = document.title or document.text
            labels[document.id] = (text if len(text) <= SNIPPET_CHARS  # cut at a word
                                   else text[:SNIPPET_CHARS + 1].rsplit(None, 1)[0] + "…")
    return labels


@dataclass(frozen=True)
class CameAnalysis:
    """What ``analyze came`` takes, flag for flag (see its ``--help``): malformed or clashing run
    names, one run file given twice (two experts, or an expert and a fused run), unknown metrics
    and numbers out of range are refused when the object is made, before any run is read."""

    expert_runs: Sequence[str]  # EXPERT=RUN, two or three of EXPERTS
    qrels: str
    fused: Sequence[str] | None = None  # NAME=RUN
    topics: str | None = None  # for the query texts of the case study
    corpus: str | None = None  # for the document titles of the case study
    metrics: Sequence[str] = DEFAULT_METRICS
    depth: int = PAPER_DEPTH
    rbo_p: float = DEFAULT_RBO_P
    cases: int = 5
    quiet: bool = False
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:

        experts = self.expert_paths()
        if len(experts) < 2:
            raise UserError(f"--expert-runs: need at least two of {', '.join(EXPERTS)}; got "
                            f"{', '.join(experts)}")
        if clash := set(self.fused_paths()) & set(experts):
            raise UserError(f"--fused: {', '.join(sorted(clash))} is already an expert's name")
        refuse_one_file_twice([(f"{flag} {name}={path}", path)
                               for flag, named in (("--expert-runs", experts),
                                                   ("--fused", self.fused_paths()))
                               for name, path in named.items()])
        if self.depth < 1:
            raise UserError(f"--depth must be >= 1, got {self.depth}")
        if self.cases < 0:
            raise UserError(f"--cases must be >= 0, got {self.cases}")
        if not 0 < self.rbo_p < 1:
            raise UserError(f"--rbo-p must be in (0, 1), got {self.rbo_p}")
        distinct_metrics(self.metrics)

    def expert_paths(self) -> dict[str, str]:
        """``{expert: run file}``, in the order given."""
        return parse_named_runs(self.expert_runs, "--expert-runs", list(EXPERTS))

    def fused_paths(self) -> dict[str, str]:
        """``{name: run file}`` of the fused runs, in the order given."""
        return parse_named_runs(self.fused or [], "--fused",
                                syntax="NAME=RUN_FILE, e.g. sum=runs/came.trec")


def run_came(analysis: CameAnalysis) -> int:
    """``analyze came``: read and check the runs, compare and overlap the experts, write the
    report (and the RBO plot)."""
    experts, fused, runs, qrels, topics, metrics = _read_came_inputs(analysis)
    names = list(experts)
    rbos, text = _came_report(analysis, experts, fused, runs, qrels, topics, metrics)
    emit(text, analysis.output)
    if analysis.plot:
        plot_rbo(names, rbos, analysis.plot, f"RBO of CAME's experts (top {analysis.depth}, "
                                             f"p = {analysis.rbo_p:g})")
    return 0


def _read_came_inputs(analysis: CameAnalysis) -> tuple[dict[str, str], dict[str, str],
                                                       dict[str, Run], Qrels,
                                                       dict[str, str], list[str]]:
    """The named expert and fused runs (each checked against the qrels), qrels, topics, metrics."""

    experts, fused = analysis.expert_paths(), analysis.fused_paths()
    metrics = [m.name for m in parse_metrics(analysis.metrics)]
    paths = {**experts, **fused}
    for name, path in paths.items():
        if not Path(path).is_file():
            flag = "--expert-runs" if name in experts else "--fused"
            raise FileNotFoundError(f"{flag} {name}: run file not found: {path}")
    qrels = load_qrels(analysis.qrels)
    runs = {}
    for name, path in paths.items():
        runs[name] = read_trec_run(path)
        refuse_run_without_judged_queries(name, path, runs[name], qrels, analysis.qrels)
    say_if_depths_differ(runs, metrics)
    topics = load_topics(analysis.topics) if analysis.topics else {}
    return experts, fused, runs, qrels, topics, metrics


def _came_report(analysis: CameAnalysis, experts: dict[str, str],
                 fused: dict[str, str], runs: dict[str, Run], qrels: Qrels, topics: dict[str, str],
                 metrics: list[str]) -> tuple[dict[tuple[str, str], float], str]:
    """The experts' pairwise RBO, and the Markdown report: table 3, overlap, case study."""

    key = metrics[0]
    scores = {name: evaluate(runs[name], qrels, [key])[key] for name in experts}
    best = max(experts, key=scores.__getitem__)  # ties: the first given
    comparison = compare(runs, qrels, metrics, baseline=best)

    lists = {name: rankings(run) for name, run in runs.items()}
    expert_lists = {name: lists[name] for name in experts}
    qids = sorted(qrels)
    rbos = mean_pairwise({n: {q: r[:analysis.depth] for q, r in lst.items()}
                          for n, lst in expert_lists.items()}, qids,
                         lambda a, b: rbo(a, b, analysis.rbo_p), progress=not analysis.quiet)
    overlaps = {k: mean_pairwise(expert_lists, qids, lambda a, b, k=k: overlap_at(a, b, k))
                for k in OVERLAP_KS}
    complements = complementarity(expert_lists, qrels)
    rel = relevant(qrels)
    pooled = sum(len(set().union(*(set(lst.get(q, [])[:COMPLEMENT_DEPTH])
                                   for lst in expert_lists.values())) & docs)
                 for q, docs in rel.items())
    cases = disagreements(expert_lists, qrels, analysis.depth, analysis.cases)
    labels: dict[str, str] = {}
    if analysis.corpus and cases:
        wanted = {d for q, _ in cases for lst in lists.values() for d in lst.get(q, [])[:TOP_DOCS]}
        wanted |= {d for q, _ in cases for d in rel[q]}
        labels = _read_titles(analysis.corpus, wanted)
        if not labels:  # the case study would show ids alone, as if no corpus were given
            raise UserError(f"--corpus {analysis.corpus} holds none of the {len(wanted)} "
                            "documents the case study shows: give the runs' corpus")
    if analysis.topics and cases and not any(q in topics for q, _ in cases):
        raise UserError(f"--topics {analysis.topics} holds none of the {len(cases)} queries the "
                        "case study shows: give the runs' topics")

    names = list(experts)
    sections = [
        f"# CAME: experts and fusion on {analysis.qrels}",
        f"{len(qrels)} queries. Experts: " + ", ".join(f"{n} ({p})" for n, p in experts.items())
        + (". Fused: " + ", ".join(f"{n} ({p})" for n, p in fused.items()) if fused else "")
        + ".",
        "## Effectiveness (CAME table 3)",
        f"Every run is tested against the best single expert by {key}, {best}.",
        format_comparison(comparison),
        "## Overlap between the experts (CAME section 5.3)",
        f"Rank-biased overlap (RBO_ext, Webber et al. 2010) of the top {analysis.depth}, "
        f"p = {analysis.rbo_p:g}, mean over the queries of the qrels (the paper: 42%-48% at top "
        "1000 between independently trained experts).",
        format_rbo_matrix(names, rbos),
        "Top-k overlap |A ∩ B| / k, mean over the queries of the qrels.",
        format_overlaps(overlaps),
        f"Complementarity: the relevant documents in each expert's top {COMPLEMENT_DEPTH} that no "
        f"other expert has in its top {COMPLEMENT_DEPTH}, pooled over queries. All experts "
        f"together find {pooled} of the {sum(map(len, rel.values()))} relevant documents.",
        format_complementarity(complements),
        "## Case study (CAME figure 4)",
    ]
    if cases:
        sections += [
            f"The {len(cases)} queries where the experts disagree most: the largest spread (max - "
            "min over experts) of the reciprocal rank of the first relevant document in the top "
            f"{analysis.depth} (0 beyond it; '-' in the tables).",
            format_cases(cases, lists, qrels, analysis.depth, topics, labels)]
    else:
        sections.append("No query on which the experts disagree." if analysis.cases
                        else "Left out (--cases 0).")
    return rbos, "\n\n".join(sections) + "\n"


# -- the competition during training (eq. 9-11) -----------------------------------------------
def read_competition(path: str | Path) -> list[dict[str, float]]:
    """The steps of a CAME training log (``train_log.jsonl``) with their per-expert batch-mean
    weights (``weight_<expert>``) and losses (``loss_<expert>``)."""

    path = _log_file(path)
    lines = _log_lines(path)
    rows = []
    for i, (number, line) in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1 and rows:  # a training killed while writing its last step
                print(f"warning: {path}: line {number}, the last, is cut off (a training stopped "
                      f"while writing it): summarising the {len(rows)} complete steps before it",
                      file=sys.stderr)
                break
            raise UserError(f"{path}: line {number} is not a JSON record: not a whole training "
                            "log") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}: line {number} is not a JSON record: not a training log")
        rows.append(row)
    if not rows or not any(key.startswith("weight_") for key in rows[0]):
        raise UserError(f"{path}: not a CAME training log (no weight_<expert> entries)")
    return rows


LOG_FILE = "train_log.jsonl"  # what ``train`` writes in its output folder (train/trainer.py)


def _log_file(path: str | Path) -> Path:
    """The log file: ``path``, or a training folder's ``train_log.jsonl``."""
    file = Path(path)
    if file.is_dir():
        if (file / LOG_FILE).is_file():
            return file / LOG_FILE
        raise UserError(f"{path} is a folder without a {LOG_FILE}: give a training output folder "
                        f"or its {LOG_FILE}")
    if not file.is_file():
        raise UserError(f"{path}: no such training log")
    return file


def _log_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of a UTF-8 log (gunzipped when named ``.gz``), numbered from 1: a
    binary file (a PNG, a gzip under another name) or another encoding (UTF-16) is refused in
    one line naming the file."""
    try:
        return list(iter_lines(path))
    except DataFormatError as error:  # it names a gzip stream under a plain name itself
        raise UserError(f"{error}: not a training log, which is UTF-8 JSON lines (or gzipped, "
                        "named .gz)") from None
    except OSError as error:
        raise UserError(f"{path}: cannot read the training log ({error.strerror or error})") \
            from None


def competition_summary(rows: Sequence[Mapping[str, float]], bins: int) -> list[dict[str, float]]:
    """Per stretch of training (``bins`` equal ranges of steps): each expert's mean weight and
    mean loss, and the share of steps on which it held the largest batch-mean weight (ties to
    none: in the standardized stage every weight is 1)."""
    experts = [key.removeprefix("weight_") for key in rows[0] if key.startswith("weight_")]
    out = []
    size = math.ceil(len(rows) / bins)
    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        summary = {"from_step": part[0]["step"], "to_step": part[-1]["step"]}
        for expert in experts:
            summary[f"weight_{expert}"] = sum(r[f"weight_{expert}"] for r in part) / len(part)
            summary[f"loss_{expert}"] = sum(r[f"loss_{expert}"] for r in part) / len(part)
            summary[f"leads_{expert}"] = sum(
                all(r[f"weight_{expert}"] > r[f"weight_{other}"] for other in experts
                    if other != expert) for r in part) / len(part)
        out.append(summary)
    return out


def format_competition(name: str, summary: Sequence[Mapping[str, float]]) -> str:
    experts = [key.removeprefix("weight_") for key in summary[0] if key.startswith("weight_")]
    head = ("| steps | " + " | ".join(f"w {e}" for e in experts) + " | "
            + " | ".join(f"loss {e}" for e in experts) + " | "
            + " | ".join(f"leads {e}" for e in experts) + " |")
    lines = [f"### {name}", "", head, "|---|" + "---:|" * (3 * len(experts))]
    for s in summary:
        lines.append(f"| {s['from_step']}-{s['to_step']} | "
                     + " | ".join(f"{s[f'weight_{e}']:.3f}" for e in experts) + " | "
                     + " | ".join(f"{s[f'loss_{e}']:.3f}" for e in experts) + " | "
                     + " | ".join(f"{s[f'leads_{e}']:.0%}" for e in experts) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class CompetitionAnalysis:
    """What ``analyze came-competition`` takes, flag for flag (see its ``--help``): malformed log
    names and fewer than one stretch of steps are refused when the object is made."""

    log: Sequence[str]  # NAME=LOG
    bins: int = 10
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        self.log_paths()
        if self.bins < 1:
            raise UserError(f"--bins must be >= 1, got {self.bins}")

    def log_paths(self) -> dict[str, str]:
        """``{name: training log}``, in the order given."""
        return parse_named_runs(self.log, "--log",
                                syntax="NAME=LOG, e.g. came=work/came/train_log.jsonl")


def _stretches(summaries: Mapping[str, Sequence[object]], bins: int) -> str:
    """How many stretches the tables show: ``--bins`` cuts a log into stretches of
    ceil(steps / bins) steps, so a log shorter than ``--bins`` (or not divisible by it) shows
    fewer; the header says what is shown, per log when they differ."""
    counts = {name: len(summary) for name, summary in summaries.items()}
    shown = set(counts.values())
    if len(shown) == 1:
        n = shown.pop()
        text = f"{n} stretch{'' if n == 1 else 'es'} of steps"
    else:
        text = ("stretches of steps ("
                + ", ".join(f"{name}: {n}" for name, n in counts.items()) + ")")
    if max(counts.values()) < bins:
        text += f" (not --bins {bins}: a stretch holds a whole number of steps, the same in each)"
    return text


def run_competition(analysis: CompetitionAnalysis) -> int:
    """``analyze came-competition``: the eq. 11 weights and each expert's loss over training."""
    logs = {name: read_competition(path) for name, path in analysis.log_paths().items()}
    summaries = {name: competition_summary(rows, analysis.bins) for name, rows in logs.items()}
    text = ["# CAME's competition during training (eq. 9-11)",
            f"Batch means of the training log, in {_stretches(summaries, analysis.bins)}: each "
            "expert's weight w_e (eq. 11; 1 in the standardized stage, eq. 9), its contrastive "
            "loss, and the share of steps on which it held the largest weight. Uniform weights "
            "are 1/3; with tau = 0.5 an expert ranking d+ first while the others rank it second "
            "gets 0.58, and 0.79 at most."]
    text += [format_competition(name, summary) for name, summary in summaries.items()]
    emit("\n\n".join(text) + "\n", analysis.output)
    if analysis.plot:
        fig, axes = figure(ncols=len(logs))
        for ax, (name, rows) in zip(axes, logs.items()):
            for key in (k for k in rows[0] if k.startswith("weight_")):
                ax.plot([r["step"] for r in rows], [r[key] for r in rows],
                        label=key.removeprefix("weight_"), linewidth=0.8)
            ax.set(title=name, xlabel="step", ylabel="batch-mean weight (eq. 11)")
            ax.legend()
        save_png(fig, analysis.plot)
    return 0
