"""``python -m pyserini_moe.eval``: score TREC runs against qrels, compare runs with significance.

Examples::

    python -m pyserini_moe.eval --run runs/bm25.scifact.test.trec --qrels scifact:test
    python -m pyserini_moe.eval --run runs/bm25.trec runs/moe.trec --qrels scifact:test \\
        --metrics ndcg@10 recall@100 --stat-test fisher --output results.json
    python -m pyserini_moe.eval --run run.trec --qrels beir-v1.0.0-scifact-test --trec-eval
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from pyserini_moe.cli import ArgumentParser, HelpFormatter, finite_float, output_file
from pyserini_moe.errors import UserError
from pyserini_moe.eval.metrics import (
    DEFAULT_METRICS,
    STAT_TESTS,
    VALID_METRICS,
    check_coverage,
    compare,
    distinct_metrics,
    evaluate_per_query,
    format_comparison,
    format_table,
    mean_values,
    say_if_depths_differ,
    trec_eval,
)
from pyserini_moe.eval.outputs import refuse_foreign_outputs as refuse_outputs_of_others
from pyserini_moe.eval.outputs import text_sign
from pyserini_moe.eval.per_query import HEADER as PER_QUERY_HEADER
from pyserini_moe.eval.per_query import is_per_query_file, read_per_query, write_per_query
from pyserini_moe.eval.seeds import compare_groups, format_seeded
from pyserini_moe.io import (
    atomic_path,
    open_text_output,
    refuse_input_as_output,
    refuse_one_file_twice,
    same_file_key,
)
from pyserini_moe.runs import Run, read_nonempty_run

# The trec_eval cell of kept per-query values: no ranked list to run it on.
KEPT_UNCHECKED = "kept values"
# trec_eval prints 4 decimals: a larger gap than its rounding means the two disagree.
TREC_EVAL_TOLERANCE = 1e-4
DEFAULT_STAT_TEST = "student"
DEFAULT_MAX_P = 0.05


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.eval",
        description="Evaluate run files (TREC: qid Q0 docid rank score tag; or MS MARCO: "
                    "qid docid rank) against qrels with "
                    "`trec_eval -c` semantics: every query of the qrels counts, queries missing "
                    "from a run score 0. With several runs, print a comparison table with paired "
                    "significance tests against the baseline.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--run", nargs="+", required=True, metavar="RUN",
                        help="run file(s), TREC or MS MARCO; a run is named by its file name "
                             "(by its path when two file names clash). NAME=PATTERN names a "
                             "condition trained with several seeds: the run files PATTERN "
                             "matches (a glob, e.g. 'detr=work/detr-s*.test.trec'; quote it), "
                             "one per seed. With "
                             "several seeds anywhere, the comparison reports mean ± sd over "
                             "seeds and a t-test over queries and seeds (effect, 95%% interval, "
                             "p), not the paired test of --stat-test. There a seed's file may "
                             "also be kept per-query values (--per-query's format, as the "
                             "regression runner keeps them in regressions/per-query/) in place "
                             "of its run")
    parser.add_argument("--qrels", required=True,
                        help="`<collection>:<split>` (e.g. scifact:test), a qrels file (TREC "
                             "`qid 0 docid rel` or BEIR TSV), or a Pyserini qrels name "
                             "(e.g. beir-v1.0.0-scifact-test)")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), metavar="METRIC",
                        help=f"metrics to compute; valid: {VALID_METRICS}")
    parser.add_argument("--baseline", metavar="NAME",
                        help="run the others are tested against, by name or path "
                             "(default: the first --run)")
    parser.add_argument("--stat-test", choices=list(STAT_TESTS), default=None,
                        help="significance test of runs of one seed each (default "
                             f"{DEFAULT_STAT_TEST}): " + "; ".join(f"{k} = {v}"
                                                                  for k, v in STAT_TESTS.items()))
    parser.add_argument("--seed-design", choices=SEED_DESIGNS, default="auto",
                        help="how the seeds of two conditions relate: matched = seed s of one "
                             "was trained with seed s of the other (same batches and negatives) "
                             "or both are one training read two ways, and the test pairs them; "
                             "nested = independent trainings; auto = matched where both "
                             "conditions' files carry the same seed numbers (sNN in their "
                             "names), else nested")
    parser.add_argument("--max-p", type=finite_float, default=None,
                        help=f"p-value at or below which a difference is marked significant, "
                             f"above 0 and below 1 (default {DEFAULT_MAX_P})")
    parser.add_argument("--trec-eval", action="store_true",
                        help="also compute every metric with trec_eval (Java, via Pyserini) and "
                             "print both values and their absolute difference (kept per-query "
                             "values have no ranked list: their rows say 'kept values')")
    parser.add_argument("--per-query", metavar="OUT.tsv", type=output_file,
                        help="write per-query values (columns: run, qid, one per metric)")
    parser.add_argument("--output", metavar="OUT.json", type=output_file,
                        help="write all results (means, trec_eval values, p-values) as JSON")
    parser.add_argument("--format", choices=["markdown", "plain"], default="markdown",
                        help="table style printed on stdout")
    parser.add_argument("--table", metavar="OUT.md", type=output_file,
                        help="also write the printed tables to this Markdown file, headed by the "
                             "command that made them (results pages generated, not typed). "
                             "An existing --table, --output or --per-query file is replaced "
                             "only when an earlier eval wrote it; a name ending in .gz is "
                             "gzipped")
    parser.add_argument("--title", default=None,
                        help="heading of the --table file (default: the qrels)")
    return parser


def run_groups(specs: list[str]) -> dict[str, list[str]]:
    """``{condition: [run file per seed]}`` in the order given: a plain path is a one-seed
    condition named by its file; ``NAME=PATTERN`` the files a glob matches (sorted)."""
    plain = [s for s in specs if not _is_group(s)]
    plain_names = dict(zip(plain, run_names(plain)))
    groups: dict[str, list[str]] = {}
    for spec in specs:
        label, sep, _ = spec.partition("=")
        if sep and not label.strip() and not Path(spec).is_file():
            raise UserError(f"--run {spec}: the label before '=' is empty: name the condition, "
                            "e.g. --run 'NAME=PATTERN'")
        if spec in plain_names:
            name, files = plain_names[spec], [spec]
        else:
            name, _, pattern = spec.partition("=")
            files = sorted(glob.glob(pattern))
            folders = [f for f in files if os.path.isdir(f)]
            if folders:  # else "run file not found: <the folder>", later
                raise UserError(f"--run {spec}: {pattern} matches the folder {folders[0]}, not "
                                "a run file: make the pattern match the runs only")
            if not files:
                raise FileNotFoundError(f"--run {spec}: no run file matches {pattern}")
            _refuse_one_seed_twice(name, files)
        if name in groups and groups[name] == files:
            raise UserError(f"--run {spec} is given twice: give each run once")
        if name in groups:
            raise UserError(f"--run {spec}: the name {name!r} is taken")
        groups[name] = files
    refuse_one_file_twice((f"--run {path}" if name == path else f"--run {name}={path}", path)
                          for name, files in groups.items() for path in files)
    return groups


def seed_names(groups: dict[str, list[str]]) -> list[str]:
    """One name per file: the condition's, or ``condition/file`` for each seed of a seeded
    condition (``condition/its path`` when seeds in one folder each share a file name)."""
    names = [name if len(files) == 1 else f"{name}/{seed}"
             for name, files in groups.items() for seed in run_names(files)]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash:  # a plain run's path spelt as a seed's name: one would replace the other
        raise UserError(f"--run: two runs are named {clash!r}; rename the condition")
    return names


def _refuse_seeds_of_other_queries(groups: dict[str, list[str]], names: list[str],
                                   runs: dict[str, Run], qrels: dict[str, Any]) -> None:
    """The seeds of one condition are runs of the same topics: a run of another query set given
    as a seed would count 0 on the queries it lacks and pull the mean down (a coverage warning
    only). A seed that retrieved nothing for a few queries stays a seed: refused are two runs
    that share fewer than half of the judged queries either answers."""
    by_name = iter(names)
    for label, files in groups.items():
        seeds = [name for name in (next(by_name) for _ in files) if name in runs]
        if len(seeds) < 2:  # (kept per-query values hold the qrels' queries exactly)
            continue
        answered = {seed: {q for q in qrels if runs[seed].get(q)} for seed in seeds}
        first = seeds[0]
        for other in seeds[1:]:
            a, b = answered[first], answered[other]
            if a | b and 2 * len(a & b) < len(a | b):
                raise UserError(
                    f"--run {label}: its seeds {first} and {other} answer different queries "
                    f"({len(a - b)} judged queries only in the first, {len(b - a)} only in the "
                    "second): the seeds of one condition must be runs of the same topics")


def _refuse_kept_values_where_runs_are_read(args: argparse.Namespace,
                                            groups: dict[str, list[str]],
                                            kept: dict[str, str]) -> None:
    """Kept per-query values (``eval --per-query``, or a regression's ``per-query/`` files) stand
    in for a run where only per-query values are read: the test over queries and seeds. A
    paired test of one-seed runs reads the ranked lists themselves (``--trec-eval`` checks the
    runs given and marks the kept values as unchecked)."""
    if not kept:
        return
    first = next(iter(kept.values()))
    if not any(len(files) > 1 for files in groups.values()):
        raise UserError(f"{first} holds per-query values, read in place of a run only in a "
                        "comparison over seeds (--run 'NAME=PATTERN' matching several seeds); "
                        "give the run itself here")


def _stat_test(given: str | None, groups: dict[str, list[str]]) -> str:
    """``--stat-test``, which compares runs of one seed each: with seed groups the t-test over
    queries and seeds is used instead, so a test named there would be dropped in silence."""
    if given is not None and any(len(files) > 1 for files in groups.values()):
        raise UserError(f"--stat-test {given}: with several seeds the comparison is the t-test "
                        "over queries and seeds, not a paired test; leave --stat-test out")
    return given or DEFAULT_STAT_TEST


def _refuse_comparison_without_runs(args: argparse.Namespace,
                                    groups: dict[str, list[str]]) -> None:
    """``--stat-test``, ``--baseline`` and ``--max-p`` set how runs are compared: with one run
    (or one seeded condition) nothing is compared, and the settings would go unread while the
    table looks as if they had been applied."""
    if len(groups) > 1:
        return
    given = [flag for flag, value in (("--stat-test", args.stat_test),
                                      ("--baseline", args.baseline), ("--max-p", args.max_p))
             if value is not None]
    if given:
        one = len(given) == 1
        raise UserError(f"{', '.join(given)} {'sets' if one else 'set'} how runs are compared, "
                        f"but {next(iter(groups))} is the only run given: nothing is compared; "
                        f"add the runs to compare it with, or leave {'it' if one else 'them'} "
                        "out")


def _max_p(given: float | None) -> float:
    """``--max-p``: a p-value threshold, above 0 (p = 0 is never reached by these tests) and
    below 1 (every difference would be marked)."""
    if given is None:
        return DEFAULT_MAX_P
    if not 0 < given < 1:
        raise UserError(f"--max-p {given:g}: must be above 0 and below 1 (e.g. {DEFAULT_MAX_P})")
    return given


def _is_group(spec: str) -> bool:
    """``NAME=PATTERN``: a name without a path separator before '=' (a path with '=' in it stays a
    path when the file exists)."""
    name, sep, _ = spec.partition("=")
    return bool(sep and name and "/" not in name and not Path(spec).is_file())


def _baseline(given: str | None, groups: dict[str, list[str]]) -> str:
    """The condition named by ``--baseline`` (its name, or the path of its one run)."""
    if given is None:
        return next(iter(groups))
    target = same_file_key(given)
    matches = [n for n, files in groups.items()
               if given == n or any(target == same_file_key(f) for f in files)]
    if not matches:
        raise UserError(f"--baseline {given!r} is none of the runs: {', '.join(groups)}")
    return matches[0]



# The first line (or lines) by which each output is known as one this command wrote: only such
# a file is replaced (see :mod:`pyserini_moe.eval.outputs`, which analyze shares).
_OUTPUT_SIGNS = {
    "--table": text_sign(lambda lines: len(lines) > 2 and lines[0].startswith("### ")
                         and lines[2].startswith("<!-- generated by: python -m pyserini_moe.eval")),
    "--per-query": text_sign(lambda lines: lines[0].startswith("\t".join(PER_QUERY_HEADER) + "\t")),
    "--output": text_sign(lambda lines: lines[0] == "{" and len(lines) > 1
                          and lines[1].startswith('  "qrels": ')),
}


def refuse_foreign_outputs(outputs: dict[str, str | None]) -> None:
    """An existing ``--table`` / ``--per-query`` / ``--output`` file that an earlier ``eval``
    wrote (or an empty one: nothing to lose) is replaced; any other file is refused before the
    work (trec_eval's JVM takes a minute), naming the file."""
    refuse_outputs_of_others(outputs, _OUTPUT_SIGNS, "eval")


SEED_DESIGNS = ("auto", "matched", "nested")
_SEED_IN_NAME = re.compile(r"(?:^|[^0-9A-Za-z])s(\d+)(?=[^0-9]|$)")


def seed_labels(files: list[str]) -> list[str] | None:
    """The seed each file names (``sNN`` in its file name: ``detr-s42.test.trec``, the kept
    ``<row>.s42.tsv``), in order; None when a file names none or two files the same."""
    labels = [_seed_in_name(path) for path in files]
    if None in labels or len(set(labels)) != len(labels):
        return None
    return labels


def _seed_in_name(path: str) -> str | None:
    """The seed a file's name gives (its last ``sNN``), or None."""
    found = _SEED_IN_NAME.findall(Path(path).name)
    return found[-1] if found else None


def _refuse_one_seed_twice(name: str, files: list[str]) -> None:
    """Two files of one condition that name the same seed (``b-s42.trec`` and ``b-s42x.trec``,
    both matched by ``b-s42*``) are not two seeds: counted as two, they would narrow the interval
    over seeds and, matched, pair by a label that is not unique."""
    first: dict[str, str] = {}
    for path in files:
        seed = _seed_in_name(path)
        if seed is None:
            continue
        if seed in first:
            raise UserError(f"--run {name}: {first[seed]} and {path} both read as seed {seed}: "
                            "give each seed of a condition once (make the pattern match one file "
                            "per seed)")
        first[seed] = path


def seed_design(groups: dict[str, list[str]], baseline: str,
                design: str) -> dict[str, list[str]] | None:
    """The seed labels ``compare_groups`` pairs by: each condition's, or None for ``nested``.
    ``matched`` insists that every condition has the baseline's seeds (one line otherwise)."""
    if design == "nested":
        return None
    labels = {name: seed_labels(files) for name, files in groups.items()}
    if design == "matched":
        for name, found in labels.items():
            if found is None or sorted(found) != sorted(labels[baseline] or []):
                raise UserError(f"--seed-design matched: --run {name}'s files do not carry the "
                                f"seeds of the baseline {baseline} (sNN in their names); use "
                                "--seed-design nested")
    return {name: found for name, found in labels.items() if found is not None}


def run_names(paths: list[str]) -> list[str]:
    """File names, or the paths as given when two runs share a file name."""
    names = [Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)




def main(argv: list[str] | None = None) -> int:
    """The command; user errors propagate (``run_main`` prints them as one line, exit 2)."""
    args = build_parser().parse_args(argv)
    metrics = [m.name for m in distinct_metrics(args.metrics)]
    groups = run_groups(args.run)
    paths = [path for files in groups.values() for path in files]
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"run file not found: {path}")
    refuse_input_as_output([args.output, args.table, args.per_query], [*paths, args.qrels])
    refuse_foreign_outputs({"--table": args.table, "--per-query": args.per_query,
                            "--output": args.output})
    stat_test = _stat_test(args.stat_test, groups)
    names = seed_names(groups)
    baseline = _baseline(args.baseline, groups)
    max_p = _max_p(args.max_p)
    _refuse_comparison_without_runs(args, groups)
    kept = {name: path for name, path in zip(names, paths) if is_per_query_file(path)}
    _refuse_kept_values_where_runs_are_read(args, groups, kept)
    runs: dict[str, Run] = {name: read_nonempty_run(path, "evaluate")
                            for name, path in zip(names, paths) if name not in kept}
    from pyserini_moe.data.topics import load_qrels, qrels_file

    qrels = load_qrels(args.qrels)
    _refuse_seeds_of_other_queries(groups, names, runs, qrels)
    check_coverage(runs, qrels)
    say_if_depths_differ(runs, metrics)

    scores = {name: read_per_query(kept[name], qrels, metrics) if name in kept
              else evaluate_per_query(runs[name], qrels, metrics) for name in names}
    means = {name: mean_values(scores[name]) for name in names}
    result: dict[str, Any] = {"qrels": args.qrels, "queries": len(qrels), "metrics": metrics,
                    "runs": {name: {"path": path, "metrics": means[name]}
                             for name, path in zip(names, paths)}}
    tables = []
    if any(len(files) > 1 for files in groups.values()):
        by_file = iter(names)
        per_query = {name: [scores[next(by_file)] for _ in files]
                     for name, files in groups.items()}
        seeded = compare_groups(per_query, metrics, baseline, max_p,
                                seeds=seed_design(groups, baseline, args.seed_design))
        result["comparison"] = seeded.to_dict()
        tables.append(format_seeded(seeded, args.format))
    elif len(runs) > 1:
        comparison = compare(runs, qrels, metrics, baseline, stat_test, max_p)
        result["comparison"] = comparison.to_dict()
        tables.append(format_comparison(comparison, args.format))
    if args.trec_eval:  # the JVM's start and Pyserini's wrapper: ~50 s that said nothing
        print(f"running trec_eval (Java, via Pyserini) on {len(runs)} run(s); this takes a "
              "while", file=sys.stderr)
        rows = []
        qrels_path = qrels_file(args.qrels)  # trec_eval reads TREC format only
        for name, path in zip(names, paths):
            if name in kept:  # its ranked list is gone: say so rather than drop the row
                result["runs"][name]["trec_eval"] = None
                rows += [[name, m, f"{means[name][m]:.4f}", KEPT_UNCHECKED, ""] for m in metrics]
                continue
            reference = trec_eval(path, qrels_path, metrics)
            result["runs"][name]["trec_eval"] = reference
            for m in metrics:
                diff = abs(means[name][m] - reference[m])
                rows.append([name, m, f"{means[name][m]:.4f}", f"{reference[m]:.4f}",
                             f"{diff:.4f}"])
                if diff > TREC_EVAL_TOLERANCE:
                    print(f"warning: {name} {m}: ranx {means[name][m]:.6f} differs from trec_eval "
                          f"{reference[m]:.4f}", file=sys.stderr)
        several = len(names) > 1  # by names, not runs: kept values are rows without a run
        if not several:
            rows = [row[1:] for row in rows]
        headers = ["run"] * several + ["metric", "ranx", "trec_eval", "abs diff"]
        tables.append(format_table(headers, rows, args.format))
    elif len(names) == 1:
        rows = [[m, f"{means[names[0]][m]:.4f}"] for m in metrics]
        tables.append(format_table(["metric", names[0]], rows, args.format))
    print(f"{len(qrels)} queries in {args.qrels}\n")
    print("\n\n".join(tables))

    if args.per_query:
        write_per_query(args.per_query, scores, metrics)
    if args.table:
        command = " ".join(["python -m pyserini_moe.eval", *(argv if argv is not None
                                                              else sys.argv[1:])])
        with atomic_path(args.table) as tmp, open_text_output(tmp, Path(args.table)) as f:
            f.write(f"### {args.title or args.qrels}\n\n<!-- generated by: {command} -->\n\n"
                    f"{len(qrels)} queries in {args.qrels}.\n\n" + "\n\n".join(tables) + "\n")
    if args.output:
        with atomic_path(args.output) as tmp, open_text_output(tmp, Path(args.output)) as f:
            f.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0
