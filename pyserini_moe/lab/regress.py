"""Regression runner: run the steps of a YAML condition, evaluate, compare with expected values.

A regression file (``regressions/<name>.yaml``)::

    name: bm25-scifact
    description: BM25 flat index on SciFact, Pyserini's BEIR settings
    scale: local                  # local: runs here; paper: needs data/GPUs listed in `requires`
    requires:                     # optional; all must hold or the conditions are skipped
      data: [scifact]             # collection names or paths that must resolve locally
      gpu: false
    steps:                        # optional; run once before the conditions (with a selection
                                  # of conditions: only the steps writing what it reads)
      - "{python} -m pyserini_moe.index --corpus scifact --index {work}/index --overwrite"
    conditions:
      - name: bm25-flat
        steps:
          - "{python} -m pyserini_moe.search --index {work}/index --topics scifact:test
             --output {work}/bm25.trec"
        run: "{work}/bm25.trec"
        qrels: scifact:test
        metrics: {ndcg@10: 0.6789, recall@100: {expected: 0.9253, tolerance: 0.003}}
        tolerance: 0.002          # default for this condition's metrics (none: 0.00005)
        source: "Pyserini 2CR, beir-v1.0.0-scifact.flat"
      - name: taser.nq.test        # DPR-style answer accuracy instead of qrels
        run: "{work}/nq.trec"
        answers: "{work}/dpr/test/nq.jsonl"  # `python -m pyserini_moe.dpr qa` output, a DPR
                                  # .qa.csv, or a Pyserini topics name such as dpr-nq-test
        passages: "$DPR_DIR/psgs_w100.tsv"   # or a corpus.jsonl(.gz) / its folder
        regex: false              # answers are regular expressions (CuratedTREC)
        metrics: {top20: 0.836, top100: 0.886}
        source: "TASER table A2"

A condition that trains may name several training seeds; its steps, run and paths are then
run once per seed with ``{seed}`` filled in, and its expected values are means over the seeds
with the per-seed values beside them::

      - name: taser-detr.scifact.test
        seeds: [42, 43, 44]
        steps:
          - "{python} -m pyserini_moe.train --config ... --seed {seed} --output-dir {work}/detr-s{seed}"
          - ...
        run: "{work}/detr-s{seed}.test.trec"
        qrels: scifact:test
        metrics:
          ndcg@10: {expected: 0.7201, sd: 0.0100, seeds: [0.7101, 0.7201, 0.7301],
                    tolerance: spread}

The runner checks the mean over the seeds it measures against ``expected``; ``tolerance: spread``
derives the tolerance from the recorded per-seed values (``pyserini_moe.eval.seeds.TOLERANCE_RULE``).
``expected`` and ``sd`` must be the mean and standard deviation of ``seeds`` (to 4 decimals); a
condition of one seed records no ``sd`` (a spread needs at least 2 seeds). Each seed's per-query
values are kept (``regressions/per-query/<file>/<condition>.s<seed>.tsv`` with the default work
folder): the test over queries and seeds reads them after the runs and models are gone, and
``--evaluate-only`` measures a seed from them where its run is not in the work folder.

A metric whose expected value is ``null`` has not been measured yet: the runner reports what it
measures with status ``UNSET`` (neither pass nor fail), so a new condition can be run once and its
values copied into the file.

A condition has either ``qrels`` (metrics ndcg@k, recall@k, mrr@k, map, ...) or ``answers`` and
``passages`` (metrics topK: share of questions with an answer string in their top K passages,
matched as DPR and Pyserini's ``evaluate_dpr_retrieval`` match them).

Placeholders in steps and paths: ``{python}`` (this interpreter), ``{work}`` (the work folder of
this file), ``{data}`` (the shared data folder), ``{root}`` (the repository root), ``{results}``
(where results pages go: the repository's docs/results, or the run's own folder when it works
elsewhere), ``{kept}`` (this file's kept per-query values, beside ``--work-dir``'s runs or in
regressions/per-query/<file>: a results page over seeds reads them, so seeds trained in other
sittings count), ``{seed}`` (in a condition with ``seeds``); environment variables (``$BEIR_DIR``) are
expanded too. Every other brace is taken literally (``awk '{print $1}'``).

``--condition`` runs the named conditions only; a condition that reads what a skipped one writes
(a model, an index, a run) is refused before anything runs, naming the condition to add.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyserini_moe.data import KNOWN_COLLECTIONS, load_answers, load_qrels
from pyserini_moe.errors import UserError
from pyserini_moe.eval import (
    TOLERANCE_RULE,
    SeedSummary,
    answer_accuracy,
    evaluate_per_query,
    mean_values,
    parse_metric,
    read_per_query,
    tolerance_from_spread,
    write_per_query,
)
from pyserini_moe.io import atomic_path, read_yaml
from pyserini_moe.paths import shared_data_root
from pyserini_moe.runs import read_trec_run
from pyserini_moe.validate import ConfigError, convert

REPO_ROOT = Path(__file__).resolve().parents[2]
SCALES = ("local", "paper")
_TOPK = re.compile(r"top([1-9][0-9]*)")
# The only placeholders of steps and paths (``{seed}`` only in a condition with seeds).
PLACEHOLDERS = ("python", "work", "root", "data", "results", "kept", "seed")
PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
PATH_BRACE = re.compile(r"\{([A-Za-z_]+)\}/")  # a placeholder where a path starts
RESULTS_DIR = REPO_ROOT / "docs" / "results"  # {results} unless the run says otherwise
KEPT_DIR = REPO_ROOT / "regressions" / "per-query"  # seeds' per-query values, one folder a file
# Flags whose value a step writes; ``--index`` is written by the commands that build one and
# read by the others. Every other path under the work folder that a step names is read.
WRITE_FLAGS = frozenset({"--output", "--output-dir", "--table", "--plot", "--per-query"})
INDEX_BUILDERS = frozenset({"pyserini_moe.index", "pyserini_moe.merge"})
# A metric with no tolerance in its file: half a unit of the fourth decimal, the precision the
# files write values to and the table prints, so a value that prints the same passes.
DEFAULT_TOLERANCE = 0.00005
METRIC_KEYS = frozenset({"expected", "tolerance", "sd", "seeds"})  # a metric's mapping form
# A step's pieces as a POSIX shell reads them: '...' and \x literal, "..." and bare text with their
# variables expanded; a lone quote is one piece, left for shlex to refuse.
SHELL_PIECE = re.compile(r"""'[^']*'|\\.|"(?:\\.|[^"\\])*"|[^'"\\]+|.""", re.DOTALL)


class RegressionSpecError(ConfigError):
    """A regression YAML that does not follow the schema; the message names file and field."""


@dataclasses.dataclass
class MetricCheck:
    metric: str
    expected: float | None  # None: not measured yet (status UNSET); a multi-seed row's mean
    tolerance: float
    seeds: tuple[float, ...] = ()  # a multi-seed row's recorded per-seed values


@dataclasses.dataclass
class Condition:
    name: str
    steps: list[str]
    run: str
    qrels: str | None
    checks: list[MetricCheck]
    source: str
    answers: str | None = None  # DPR-style answer accuracy instead of qrels
    passages: str | None = None
    regex: bool = False
    seeds: tuple[int, ...] = ()  # training seeds: steps and run once per seed ({seed})

    def runs_per_seed(self) -> list[int | None]:
        """The seeds to run (``[None]``: a condition without seeds runs once)."""
        return list(self.seeds) or [None]

    def evaluate(self, work: Path, seed: int | None = None, keep: Path | None = None,
                 kept_if_gone: bool = False) -> dict[str, float]:
        """The metrics of this condition's run (of ``seed``), from its qrels or its answers (each
        path may name the seed: a seed's own held-out queries). ``keep``: a seed's per-query
        values (qrels metrics) are also written to ``keep/<condition>.s<seed>.tsv``, where the
        verdicts over seeds can read them once the run is gone (``pyserini_moe.eval.per_query``).
        ``kept_if_gone``: a seed whose run is not in ``work`` is measured from those kept values
        instead (said on stderr): seeds trained in other sittings, on other machines, make one
        row without training again the seeds whose runs went with their machine."""
        run_path = Path(expand(self.run, work, seed))
        kept = keep / f"{self.name}.s{seed}.tsv" if keep is not None and seed is not None else None
        if self.answers is None:
            metrics = [k.metric for k in self.checks]
            qrels = load_qrels(expand(self.qrels, work, seed))
            if kept_if_gone and kept is not None and kept.is_file() and not run_path.exists():
                print(f"note: {self.name} seed {seed}: no run {run_path}; measured from its kept "
                      f"per-query values, {kept}", file=sys.stderr)
                return mean_values(read_per_query(kept, qrels, metrics))
            scores = evaluate_per_query(read_trec_run(run_path), qrels, metrics)
            if kept is not None:
                write_per_query(kept, {self.name: scores}, metrics)
            return mean_values(scores)
        run = read_trec_run(run_path)
        assert self.passages is not None
        ks = {k.metric: int(_TOPK.fullmatch(k.metric).group(1)) for k in self.checks}
        accuracy = answer_accuracy(run, load_answers(expand(self.answers, work, seed)),
                                   expand(self.passages, work, seed), ks.values(), self.regex)
        return {metric: accuracy[f"top{k}"] for metric, k in ks.items()}


@dataclasses.dataclass
class Regression:
    path: Path
    name: str
    description: str
    scale: str
    requires: dict[str, Any]
    steps: list[str]
    conditions: list[Condition]


@dataclasses.dataclass
class Outcome:
    """One line of the result table."""
    condition: str
    metric: str
    expected: float | None
    measured: float | None
    tolerance: float | None
    # OK, FAIL, SKIP, ERROR, UNSET, PLAN (a dry run); SEEDS: some of a multi-seed row's seeds only
    status: str
    note: str = ""
    seeds: dict[int, float] = dataclasses.field(default_factory=dict)  # per seed, when seeded

    @property
    def sd(self) -> float | None:
        return SeedSummary(tuple(self.seeds.values())).sd if len(self.seeds) > 1 else None


def _require(mapping: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in mapping:
        raise RegressionSpecError(f"{where}: missing field '{key}'")
    value = mapping[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RegressionSpecError(f"{where}: field '{key}' must be {names}, got {value!r}")
    return value


def _steps(raw: Any, where: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(s, str) and s.strip() for s in raw):
        raise RegressionSpecError(f"{where}: 'steps' must be a list of non-empty command strings")
    return raw


def _number(value: Any, where: str) -> float:
    """A number as recipes read them (``2e-5`` too, which YAML 1.1 leaves a string)."""
    try:
        return convert(float, value, "", Path(where))
    except ConfigError:
        raise RegressionSpecError(f"{where}: expected a number, got {value!r}") from None


def _expected(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _judgments(raw: dict, where: str) -> tuple[str | None, str | None, str | None, bool]:
    """``(qrels, answers, passages, regex)``: a condition is judged by qrels or by answers."""
    if ("qrels" in raw) == ("answers" in raw):
        raise RegressionSpecError(f"{where}: needs exactly one of 'qrels' (ranking metrics) and "
                                  "'answers' (DPR top-k accuracy)")
    if "qrels" in raw:
        for key in ("passages", "regex"):
            if key in raw:
                raise RegressionSpecError(f"{where}: field '{key}' goes with 'answers', not "
                                          "'qrels'")
        return _require(raw, "qrels", where, str), None, None, False
    answers = _require(raw, "answers", where, str)
    passages = _require(raw, "passages", where, str)
    regex = raw.get("regex", False)
    if not isinstance(regex, bool):
        raise RegressionSpecError(f"{where}: field 'regex' must be true or false, got {regex!r}")
    return None, answers, passages, regex


def _check_metric(metric: str, by_answers: bool, where: str) -> None:

    if by_answers:
        if not _TOPK.fullmatch(str(metric)):
            raise RegressionSpecError(f"{where}: metric {metric!r}: a condition with 'answers' "
                                      "measures top-k accuracy: top20, top100, ... (topK)")
        return
    if _TOPK.fullmatch(str(metric)):
        raise RegressionSpecError(f"{where}: metric {metric!r} is answer accuracy: it needs "
                                  "'answers' and 'passages' instead of 'qrels'")
    try:
        parse_metric(metric)
    except ValueError as e:
        raise RegressionSpecError(f"{where}: {e}") from None


def _seeds(raw: Any, where: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if (not isinstance(raw, list) or not raw or len(set(raw)) != len(raw)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw)):
        raise RegressionSpecError(f"{where}: 'seeds' must be a list of distinct integers")
    return tuple(raw)


def _metric_check(metric: str, spec: Any, default_tol: float | str, n_seeds: int,
                  where: str) -> MetricCheck:
    """One metric's expectation: a number, or a mapping (expected, tolerance; with seeds: sd,
    seeds, and ``tolerance: spread``), checked for consistency with the condition's seeds."""
    if not isinstance(spec, dict):
        if n_seeds > 1 and spec is not None:
            raise RegressionSpecError(f"{where}: a condition with seeds records each seed's value: "
                                      "{expected: MEAN, sd: SD, seeds: [...], tolerance: ...}")
        spec = {"expected": spec}
    unknown = sorted(set(spec) - METRIC_KEYS)
    if unknown:  # a misspelt 'expected' would turn a check into UNSET without a word
        raise RegressionSpecError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} "
                                  f"(known: {', '.join(sorted(METRIC_KEYS))})")
    expected = _expected(spec.get("expected"), f"{where}.expected")
    values = _seed_values(spec.get("seeds"), f"{where}.seeds")
    for value in (expected, *values):
        if value is not None and not 0 <= value <= 1:  # ranking metrics and top-k accuracy
            raise RegressionSpecError(f"{where}: {value} is outside [0, 1], where every metric "
                                      "a regression checks lies")
    if "sd" in spec and n_seeds == 0:  # it would be read nowhere
        raise RegressionSpecError(f"{where}.sd: only a condition with 'seeds' records an sd")
    if "sd" in spec and n_seeds == 1:  # eval's tables too give one seed no sd
        raise RegressionSpecError(f"{where}.sd: a condition of one seed has no sd (a spread "
                                  "needs at least 2 seeds): leave 'sd' out")
    if values and len(values) != n_seeds:
        raise RegressionSpecError(f"{where}.seeds: {len(values)} value(s) for the condition's "
                                  f"{n_seeds} seed(s)")
    if n_seeds > 1 and expected is not None and not values:
        raise RegressionSpecError(f"{where}: a condition with seeds records each seed's value "
                                  "('seeds': [...])")
    if values:
        summary = SeedSummary(values)
        if expected is None or round(abs(summary.mean - expected), 6) > DEFAULT_TOLERANCE:
            raise RegressionSpecError(f"{where}.expected: {expected} is not the mean of its seeds "
                                      f"({summary.mean:.4f})")
        sd = _expected(spec.get("sd"), f"{where}.sd")
        if len(values) > 1 and (sd is None or round(abs(summary.sd - sd), 6) > DEFAULT_TOLERANCE):
            raise RegressionSpecError(f"{where}.sd: {sd} is not the standard deviation of its "
                                      f"seeds ({summary.sd:.4f})")
    tolerance = spec.get("tolerance", default_tol)
    if tolerance == "spread":
        if len(values) < 2:
            hint = (": a metric not measured yet takes its own tolerance ({expected: null, "
                    "tolerance: 0.01}) until its seeds' values are in"
                    if expected is None and "tolerance" not in spec else "")
            raise RegressionSpecError(f"{where}: 'tolerance: spread' needs the values of at least "
                                      f"2 seeds{hint}")
        tol = tolerance_from_spread(SeedSummary(values).sd, len(values))
    else:
        tol = _number(tolerance, f"{where}.tolerance")
    if tol < 0:
        raise RegressionSpecError(f"{where}: tolerance must be >= 0")
    return MetricCheck(metric, expected, tol, values)


def _seed_values(raw: Any, where: str) -> tuple[float, ...]:
    """A metric's per-seed values: a list of numbers in the order of the condition's seeds (a
    mapping by seed, a number or a text would otherwise be read key by key or letter by
    letter)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RegressionSpecError(f"{where}: expected a list of the seeds' values in the order of "
                                  f"the condition's seeds, got {type(raw).__name__} {raw!r}")
    return tuple(_number(v, where) for v in raw)


def _check_path_placeholders(texts: list[str], where: str) -> None:
    """A ``{name}/`` that is no placeholder is a typo (``{wrok}/run.trec``): left as written, it
    would be a folder of that literal name under the repository. Braces elsewhere (an awk
    program's ``{print $1}``) are a step's own and stay allowed."""
    for text in texts:
        for name in PATH_BRACE.findall(str(text)):
            if name not in PLACEHOLDERS:
                known = " ".join(f"{{{p}}}" for p in PLACEHOLDERS)
                raise RegressionSpecError(f"{where}: '{{{name}}}' in {text!r} is no placeholder "
                                          f"(known: {known})")


def _check_seed_placeholder(raw: dict, seeded: bool, where: str) -> None:
    """A multi-seed condition keeps each seed's outputs apart; ``{seed}`` means nothing without."""
    texts = [*(raw.get("steps") or []), raw.get("run", ""),
             *(str(raw.get(key) or "") for key in ("qrels", "answers", "passages"))]
    uses = any("{seed}" in t for t in texts)
    if seeded and "{seed}" not in raw.get("run", ""):
        raise RegressionSpecError(f"{where}: a condition with 'seeds' needs '{{seed}}' in its run "
                                  "path (one run per seed)")
    if uses and not seeded:
        raise RegressionSpecError(f"{where}: '{{seed}}' is used but the condition names no 'seeds'")


# A regression's or condition's name becomes a folder and file names under --work-dir and
# regressions/per-query/: letters, digits and . _ + - only, never a path ("../x" wrote outside).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def _plain_name(name: str, where: str) -> str:
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise RegressionSpecError(f"{where} {name[:80]!r}: use letters, digits and . _ + - only "
                                  "(it names folders and files under the work folder)")
    return name


# What a regression file and each of its conditions may set: a misspelt key (``tolerence``)
# was read as absent, its setting silently the default.
FILE_KEYS = ("name", "description", "scale", "requires", "tolerance", "steps", "conditions")
CONDITION_KEYS = ("name", "seeds", "steps", "run", "qrels", "answers", "passages", "regex",
                  "tolerance", "metrics", "source")


def _refuse_unknown_keys(doc: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = [str(key) for key in doc if key not in known]
    if unknown:
        raise RegressionSpecError(f"{where}: unknown key {', '.join(map(repr, unknown))} (it may "
                                  f"have: {', '.join(known)})")


def load_regression(path: str | os.PathLike) -> Regression:
    """Parse and validate a regression file (every error names the file and the field)."""
    path = Path(path)
    doc = read_yaml(path, "regression file", RegressionSpecError)
    if not isinstance(doc, dict):
        raise RegressionSpecError(f"{path}: top level must be a mapping")
    _refuse_unknown_keys(doc, FILE_KEYS, str(path))
    name = _plain_name(_require(doc, "name", str(path), str), f"{path}: name")
    scale = doc.get("scale", "local")
    if scale not in SCALES:
        raise RegressionSpecError(f"{path}: scale must be one of {SCALES}, got {scale!r}")
    requires = doc.get("requires") or {}
    if not isinstance(requires, dict) or set(requires) - {"data", "gpu"}:
        raise RegressionSpecError(f"{path}: 'requires' may only have 'data' (list) and 'gpu' (bool)")
    _check_data_names(requires.get("data"), f"{path}: requires.data")
    conditions = []
    raw_conditions = _require(doc, "conditions", str(path), list)
    if not raw_conditions:
        raise RegressionSpecError(f"{path}: 'conditions' is empty")
    seen: set[str] = set()
    for i, raw in enumerate(raw_conditions):
        where = f"{path}: conditions[{i}]"
        if not isinstance(raw, dict):
            raise RegressionSpecError(f"{where}: must be a mapping")
        cname = _plain_name(_require(raw, "name", where, str), f"{where}: name")
        where = f"{path}: condition '{cname}'"
        _refuse_unknown_keys(raw, CONDITION_KEYS, where)
        if cname in seen:
            raise RegressionSpecError(f"{where}: duplicate condition name")
        seen.add(cname)
        default_tol = raw.get("tolerance", doc.get("tolerance", DEFAULT_TOLERANCE))
        if default_tol != "spread":  # 'spread': each metric's from its own seeds
            default_tol = _number(default_tol, f"{where}: tolerance")
        qrels, answers, passages, regex = _judgments(raw, where)
        seeds = _seeds(raw.get("seeds"), where)
        checks = []
        for metric, spec in _require(raw, "metrics", where, dict).items():
            _check_metric(metric, answers is not None, where)
            checks.append(_metric_check(metric, spec, default_tol, len(seeds), f"{where}: {metric}"))
        if not checks:
            raise RegressionSpecError(f"{where}: 'metrics' is empty")
        _check_seed_placeholder(raw, bool(seeds), where)
        _check_path_placeholders([*(raw.get("steps") or []), raw.get("run", ""),
                                  raw.get("qrels", "")], where)
        conditions.append(Condition(
            name=cname, steps=_steps(raw.get("steps"), where),
            run=_require(raw, "run", where, str), qrels=qrels, checks=checks,
            source=_require(raw, "source", where, str), answers=answers, passages=passages,
            regex=regex, seeds=seeds))
    if any("{seed}" in step for step in _steps(doc.get("steps"), str(path))):
        raise RegressionSpecError(f"{path}: '{{seed}}' in the file's own steps: only a condition "
                                  "with 'seeds' has one")
    _check_path_placeholders(_steps(doc.get("steps"), str(path)), str(path))
    return Regression(path=path, name=name, description=str(doc.get("description", "")),
                      scale=scale, requires=requires, steps=_steps(doc.get("steps"), str(path)),
                      conditions=conditions)


def _check_data_names(data: Any, where: str) -> None:
    """A bare name must be a collection the toolkit knows: a misspelt one would otherwise read as
    missing data, and every condition would be skipped with exit 0. Paths and ``$VAR/...`` entries
    name files the user keeps, and stay free."""
    if data is None:
        return
    if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
        raise RegressionSpecError(f"{where}: must be a list of collection names or paths")
    root = shared_data_root()
    for name in data:
        bare = not any(c in name for c in "/$\\") and not name.startswith("~")
        if bare and name not in KNOWN_COLLECTIONS and not (root is not None
                                                            and (root / name).is_dir()):
            close = difflib.get_close_matches(name, KNOWN_COLLECTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RegressionSpecError(
                f"{where}: unknown collection {name[:80]!r}{hint}; name a known collection, "
                "or a path such as $BEIR_DIR/<name>/corpus.jsonl")


def missing_requirements(reg: Regression) -> list[str]:
    """What this machine lacks for ``reg``; empty when it can run.

    ``requires.data`` entries are paths (environment variables expanded, e.g.
    ``$MSMARCO_DIR/collection.tsv``) or names of collections in the shared data folder.
    """
    missing = []
    root = shared_data_root()
    for spec in reg.requires.get("data") or []:
        expanded = os.path.expandvars(str(spec))
        local = Path(expanded).exists() or ("$" not in expanded and root is not None
                                            and (root / expanded).is_dir())
        if not local:
            missing.append(f"data {spec}")
    if reg.requires.get("gpu"):
        import torch  # noqa: PLC0415 - `regress --dry-run` needs no torch

        if not torch.cuda.is_available():
            missing.append("a CUDA GPU")
    return missing


def expand(text: str, work: Path, seed: int | None = None, results: Path | None = None,
           quote: bool = False, kept: Path | None = None) -> str:
    """Environment variables (``$BEIR_DIR``) as a shell would, then the placeholders. Nothing else
    is read as one: a step's own braces (awk's ``'{print $1}'``) are kept as written. ``quote``:
    for a step, which is split like a shell line, each path is one word even with spaces, and
    single-quoted text stays literal, as in a shell (a python or awk snippet's ``$NAME``).
    ``kept``: the file's folder of kept per-query values, ``{kept}`` (a results page over seeds
    reads them there, whichever machine trained each seed)."""
    data = shared_data_root()
    values = {"python": sys.executable, "work": work, "root": REPO_ROOT,
              "data": data if data is not None else "<no shared data>",
              "results": results or RESULTS_DIR,
              "kept": kept if kept is not None else "<no kept folder>"}
    if quote:
        values = {k: shlex.quote(str(v)) for k, v in values.items()}
    if seed is not None:
        values["seed"] = seed
    env = _shell_expandvars(text) if quote else os.path.expandvars(text)
    return PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], env)


def _shell_expandvars(step: str) -> str:
    """``$NAME`` and ``${NAME}`` expanded outside single quotes and backslash escapes only."""
    return "".join(piece if piece[0] in "'\\" else os.path.expandvars(piece)
                   for piece in SHELL_PIECE.findall(step))


def run_step(command: str, work: Path, dry_run: bool, seed: int | None = None,
             results: Path | None = None, where: str = "", kept: Path | None = None) -> None:
    """Run one step (``where``: which condition, seed and step it is, printed before it; a step
    that takes long says so when it ends, since trainings run with --quiet)."""
    cmd = expand(command, work, seed, results, quote=True, kept=kept)
    print(f"{where}$ {cmd}", flush=True)
    if dry_run:
        return
    start = time.perf_counter()
    argv = shlex.split(cmd)
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT)
    except FileNotFoundError:
        raise UserError(f"step program {argv[0]!r} not found; steps run without a shell (no "
                        f"pipes, ';', '>' or VAR=value assignments): {cmd}") from None
    if proc.returncode != 0:
        raise UserError(f"step failed (exit {proc.returncode}): {cmd}")
    took = time.perf_counter() - start
    if took >= 60:
        print(f"   ... step done in {took / 60:.1f} min", flush=True)


def step_paths(command: str, work: Path, seed: int | None = None) -> tuple[list[str], list[str]]:
    """(written, read): the paths under ``work`` a step's arguments name, as normalised paths or
    glob patterns (``name=pattern`` values and ``--set key=path`` included)."""
    tokens = shlex.split(expand(command, work, seed, quote=True))
    module = tokens[tokens.index("-m") + 1] if "-m" in tokens[:-1] else ""
    root = os.path.normpath(work)
    written: list[str] = []
    read: list[str] = []
    flag = ""  # the flag a value belongs to: every value up to the next flag (--index A B)
    for token in tokens:
        if token.startswith("-"):
            flag = token
            continue
        value = token.split("=", 1)[1] if "=" in token else token
        value = os.path.normpath(value)
        if not value.startswith(root + os.sep):
            continue
        writes = flag in WRITE_FLAGS or (flag == "--index" and module in INDEX_BUILDERS)
        (written if writes else read).append(value)
    return written, read


def _within(path: str, written: str) -> bool:
    """Whether reading ``path`` (a path or a glob) reads what writing ``written`` makes."""
    return (path == written or path.startswith(written + os.sep)
            or fnmatch.fnmatch(written, path))


def skipped_dependency(reg: Regression, selected: list[Condition], work: Path) -> str | None:
    """One line naming the first path a selected condition reads that only an unselected one
    writes (and that is not there yet); None when the selection can run on its own."""
    producers = [(path, c.name) for c in reg.conditions for seed in c.runs_per_seed()
                 for step in c.steps for path in step_paths(step, work, seed)[0]]
    written = [path for step in reg.steps for path in step_paths(step, work)[0]]
    for c in selected:
        for seed in c.runs_per_seed():
            for step in c.steps:
                made, needed = step_paths(step, work, seed)
                for path in needed:
                    if any(_within(path, w) for w in written) or glob.glob(path):
                        continue
                    names = sorted({name for w, name in producers
                                    if name != c.name and _within(path, w)})
                    if names:
                        return (f"--condition {c.name} reads {path}, which {' / '.join(names)} "
                                f"writes: add --condition {names[0]} (or run the whole file)")
                written += made
    return None


def _condition_reads(c: Condition, work: Path, seed: int | None) -> list[str]:
    """The paths under ``work`` a condition reads: its steps' inputs and the files it evaluates."""
    evaluated = [expand(path, work, seed) for path in (c.run, c.qrels, c.answers, c.passages)
                 if path is not None]
    return ([read for step in c.steps for read in step_paths(step, work, seed)[1]]
            + [os.path.normpath(path) for path in evaluated])


def shared_steps(reg: Regression, selected: list[Condition], work: Path) -> list[str]:
    """The file's own steps a selection of its conditions needs: those writing what a selected
    condition reads, and in turn what those steps read. A step whose outputs its arguments do not
    name always runs (nothing says it is not needed). Why: ``--condition`` on one seeded row must
    not re-train every model the file's other rows share (came-scifact.yaml: seven trainings)."""
    reads = [path for c in selected for seed in c.runs_per_seed()
             for path in _condition_reads(c, work, seed)]
    needed: list[str] = []
    for step in reversed(reg.steps):
        made, read = step_paths(step, work)
        if not made or any(_within(path, m) for path in reads for m in made):
            needed.append(step)
            reads += read
    return needed[::-1]


def check(measured: float, c: MetricCheck) -> str:
    """OK / FAIL of a measured value (a multi-seed row's mean) against its expectation."""
    if c.expected is None:
        return "UNSET"
    # Rounding drops float noise, so a delta exactly at the tolerance passes.
    return "OK" if round(abs(measured - c.expected), 6) <= c.tolerance else "FAIL"


def run_regression(reg: Regression, work: Path, dry_run: bool = False,
                   only: list[str] | None = None, evaluate_only: bool = False,
                   only_seeds: list[int] | None = None,
                   results: Path | None = None,
                   keep: Path | None = None) -> tuple[list[Outcome], dict[str, float]]:
    """Run ``reg``; returns the table rows and each condition's wall time in seconds.

    ``evaluate_only`` runs no step and evaluates the runs already in ``work``: for steps run by
    hand, e.g. split over parallel job queues, then checked against the file in one table; a
    seed's run that is not there is measured from its kept per-query values, where ``keep``
    holds them (a seed trained in an earlier sitting, on a machine since gone).
    ``only_seeds`` runs the seeded conditions for these of their seeds only (two queues share a
    condition's seeds); their rows report the seeds run, status SEEDS, without a verdict on the
    mean, which ``evaluate_only`` gives once every seed's run is there. ``results``: where
    ``{results}`` points (default: the repository's docs/results). ``keep``: where each seed's
    per-query values are kept (see :meth:`Condition.evaluate`; None: nowhere). A dry run returns
    each metric's expected value with status PLAN."""
    conditions = [c for c in reg.conditions if not only or c.name in only]
    if only and not evaluate_only:
        problem = skipped_dependency(reg, conditions, work)
        if problem:
            raise UserError(problem)
    file_steps = shared_steps(reg, conditions, work) if only else reg.steps
    missing = missing_requirements(reg)
    if missing:
        reason = f"skipped: {reg.scale}-scale, this machine lacks " + ", ".join(missing)
        rows = [Outcome(c.name, k.metric, k.expected, None, k.tolerance, "SKIP", reason)
                for c in conditions for k in c.checks]
        if dry_run:
            for step in file_steps:
                print(f"$ {expand(step, work, results=results, quote=True, kept=keep)}")
            for c in conditions:
                for seed in c.runs_per_seed():
                    for step in c.steps:
                        print(f"$ {expand(step, work, seed, results, quote=True, kept=keep)}")
        return rows, {}
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Outcome] = []
    times: dict[str, float] = {}
    start = time.perf_counter()
    try:
        for step in [] if evaluate_only else file_steps:
            run_step(step, work, dry_run, results=results, kept=keep)
    except UserError as e:
        return [Outcome(c.name, k.metric, k.expected, None, k.tolerance, "ERROR", str(e))
                for c in conditions for k in c.checks], {}
    shared = time.perf_counter() - start
    for number, c in enumerate(conditions, start=1):
        t0 = time.perf_counter()
        try:
            per_seed = {}
            for seed in c.runs_per_seed():
                if seed is not None and only_seeds and seed not in only_seeds:
                    continue
                for i, step in enumerate([] if evaluate_only else c.steps, start=1):
                    where = (f"[{number}/{len(conditions)} {c.name}"
                             f"{'' if seed is None else f' seed {seed}'}, step {i}/{len(c.steps)}] ")
                    run_step(step, work, dry_run, seed, results, where, keep)
                if not dry_run:
                    per_seed[seed] = c.evaluate(work, seed, keep, kept_if_gone=evaluate_only)
            if dry_run:
                rows += [Outcome(c.name, k.metric, k.expected, None, k.tolerance, "PLAN", c.source)
                         for k in c.checks]
                continue
        except (RuntimeError, ValueError, OSError) as e:
            rows += [Outcome(c.name, k.metric, k.expected, None, k.tolerance, "ERROR", str(e))
                     for k in c.checks]
            continue
        finally:
            times[c.name] = time.perf_counter() - t0 + (shared if c is conditions[0] else 0.0)
        rows += [_outcome(c, k, per_seed) for k in c.checks]
    return rows, times


def _outcome(c: Condition, k: MetricCheck,
             per_seed: dict[int | None, dict[str, float]]) -> Outcome:
    """A table row: the value, or a seeded condition's mean with its per-seed values."""
    values = {seed: measured[k.metric] for seed, measured in per_seed.items()}
    mean = SeedSummary(tuple(values.values())).mean
    seeds = {} if c.seeds == () else values
    partial = len(values) < len(c.runs_per_seed())
    return Outcome(c.name, k.metric, k.expected, mean, k.tolerance,
                   "SEEDS" if partial else check(mean, k), c.source, seeds)


def format_table(rows: list[Outcome], times: dict[str, float]) -> str:
    """Plain-text table of expected vs measured, one line per metric."""
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    header = f"{'condition':40} {'metric':12} {'expected':>9} {'measured':>9} {'delta':>8} " \
             f"{'tol':>6} {'time':>7}  status"
    lines = [header, "-" * len(header)]
    for r in rows:
        delta = "-" if r.measured is None or r.expected is None else f"{r.measured - r.expected:+.4f}"
        t = f"{times[r.condition]:.0f}s" if r.condition in times else "-"
        line = f"{r.condition:40} {r.metric:12} {num(r.expected):>9} {num(r.measured):>9} " \
               f"{delta:>8} {num(r.tolerance) if r.tolerance is not None else '-':>6} {t:>7}  {r.status}"
        if r.status in ("SKIP", "ERROR"):
            line += f"  ({r.note})"
        elif len(r.seeds) > 1:
            line += (f"  (mean of {len(r.seeds)} seeds, sd {r.sd or 0:.4f}: "
                     + ", ".join(f"{s}: {v:.4f}" for s, v in r.seeds.items()) + ")")
        elif r.seeds:  # one seed has no spread: no sd to show
            line += "  (" + ", ".join(f"seed {s}: {v:.4f}" for s, v in r.seeds.items()) + ")"
        lines.append(line)
    if any(len(r.seeds) > 1 for r in rows):
        lines.append(f"tolerance 'spread' of a multi-seed row: {TOLERANCE_RULE}")
    return "\n".join(lines)


def write_report(reg: Regression, rows: list[Outcome], times: dict[str, float], work: Path) -> Path:
    """``<work>/report.json``: what the docs' results tables are generated from."""
    report = {"name": reg.name, "scale": reg.scale, "file": str(reg.path),
              "wall_time_s": times, "rows": [dataclasses.asdict(r) for r in rows]}
    target = work / "report.json"
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n")
    return target
