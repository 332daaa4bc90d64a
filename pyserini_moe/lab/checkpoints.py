"""Checkpoint selection studied after the fact: which step each rule keeps, across seeds.

A training run with ``training.keep_snapshots`` leaves the model of every validation in
``snapshots/step-N/``. Each snapshot is indexed and searched here exactly as a regression file
does (``index.encoded.build_indexes`` + ``search.dispatch.search_topics``, exact search) on the
held-out dev queries, which a selection rule may look at, and on test queries, which only the
diagnosis may (the table and the plot of test nDCG@10 against the step). The rules compared:

* ``val-loss``: the lowest contrastive validation loss on the held-out queries (the trainer's
  ``best/``);
* ``dev-<metric>``: the best retrieval metric of the held-out queries over the whole corpus
  (ties: the earlier step);
* ``last``: the end of the recipe's schedule.

Per training the evaluation is cached in ``snapshots/evaluation.json``, keyed by the settings and
by the contents of what it depends on (the corpus, topics and qrels by SHA-256, each snapshot by
its files), so adding a seed re-evaluates only that seed and an edited file is never served the
old numbers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyserini_moe.analyze import EXPERTS as CAME_INDEX_KINDS
from pyserini_moe.analyze import emit, figure, save_png
from pyserini_moe.data import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.eval import SeedSummary, evaluate, format_table, parse_metric
from pyserini_moe.io import atomic_path, read_yaml
from pyserini_moe.representation import INDEX_KINDS

SNAPSHOT = re.compile(r"step-([0-9]+)")
CACHE_FILE = "evaluation.json"
DEV = "dev"  # the held-out queries' name in reports
FUSED = "fused"  # CAME's three experts' indexes, fused as its regression rows (eq. 12, came_sum)
KINDS = (*INDEX_KINDS, FUSED)  # how a snapshot is searched: one index kind, or CAME's fusion


@dataclass(frozen=True)
class Snapshot:
    """One validation of one training: its step, validation loss and measured metrics."""

    step: int
    val_loss: float | None
    metrics: dict[str, dict[str, float]]  # topic set (dev, scifact:test, ...) -> metric -> value


def snapshot_folders(train_dir: Path) -> dict[int, Path]:
    """``{step: folder}`` of a training's ``snapshots/``; UserError when it kept none."""
    folder = train_dir / "snapshots"
    found = {int(m.group(1)): p for p in folder.glob("step-*")
             if p.is_dir() and (m := SNAPSHOT.fullmatch(p.name))} if folder.is_dir() else {}
    if not found:
        raise UserError(f"{train_dir}: no snapshots/step-N folders (train with --set "
                        "training.keep_snapshots=true)")
    return dict(sorted(found.items()))


def validation_losses(train_dir: Path) -> dict[int, float]:
    """``{step: val_loss}`` from the training log."""
    path = train_dir / "train_log.jsonl"
    if not path.is_file():
        raise UserError(f"{train_dir}: no train_log.jsonl (not a training output folder?)")
    return log_validation_losses(path)


def log_validation_losses(path: Path) -> dict[int, float]:
    """``{step: val_loss}`` of a training log file (a training's, or one brought back as
    ``<job>.train_log.jsonl``)."""
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {e["step"]: e["val_loss"] for e in entries if e.get("val_loss") is not None}


def evaluate_training(train_dir: Path, corpus: str, test_sets: list[str], metrics: list[str],
                      kind: str = "dense", max_length: int = 256,
                      query_max_length: int | None = None, progress: bool = True,
                      searcher: Callable[..., dict[str, dict[str, float]]] | None = None
                      ) -> list[Snapshot]:
    """Every snapshot of ``train_dir`` on its dev split and on ``test_sets`` (cached: see
    :func:`_read_cache` for what a cached evaluation is keyed by). ``query_max_length`` None
    searches at the query length each snapshot was trained with."""
    topic_sets = {DEV: (train_dir / "dev_topics.tsv", train_dir / "dev_qrels.txt")}
    topic_sets.update({name: (name, name) for name in test_sets})
    settings = {"corpus": corpus, "corpus_sha256": _corpus_digest(corpus),
                "test_sets": test_sets, "metrics": metrics, "kind": kind,
                "max_length": max_length, "data": _topic_digests(topic_sets)}
    if query_max_length is not None:  # absent, not None: caches made before the flag stay valid
        settings["query_max_length"] = query_max_length
    cache_path = train_dir / "snapshots" / CACHE_FILE
    cache = _read_cache(cache_path, settings)
    losses = validation_losses(train_dir)
    evaluate = searcher or _index_and_search
    out = []
    for step, folder in snapshot_folders(train_dir).items():
        key, stamp = str(step), _snapshot_stamp(folder)
        entry = cache["steps"].get(key)
        if not isinstance(entry, dict) or entry.get("snapshot") != stamp \
                or not isinstance(entry.get("metrics"), dict):
            entry = {"snapshot": stamp, "metrics": evaluate(
                folder, corpus, topic_sets, metrics, kind, max_length, query_max_length,
                progress)}
            cache["steps"][key] = entry
            _write_json(cache_path, cache)
        out.append(Snapshot(step, losses.get(step), entry["metrics"]))
    return out


def _read_cache(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The cached evaluations of ``path`` when they were made with ``settings`` (which hold the
    SHA-256 of the corpus and of every topics and qrels set: a file edited under the same name
    is evaluated again, as is a snapshot whose files changed, see :func:`_snapshot_stamp`),
    else an empty cache. A cache that cannot be read (empty, cut short by a full disk, edited)
    is only a cache: said in one line, dropped, and rewritten as the snapshots are evaluated."""
    empty: dict[str, Any] = {"settings": settings, "steps": {}}
    if not path.is_file():
        return empty
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"notice: {path} is not a readable evaluation cache ({e.__class__.__name__}); "
              "evaluating the snapshots again and rewriting it", file=sys.stderr)
        return empty
    if not isinstance(cache, dict) or cache.get("settings") != settings \
            or not isinstance(cache.get("steps"), dict):
        return empty
    return cache


def _digest(value: Any) -> str:
    """SHA-256 of a loaded mapping (topics, qrels) in a canonical JSON form: the same content
    gives the same digest however the file spells it."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _topic_digests(topic_sets: dict[str, tuple[Any, Any]]) -> dict[str, dict[str, str]]:
    """``{set: {"topics": sha256, "qrels": sha256}}`` of what each topic set loads now."""
    return {name: {"topics": _digest(load_topics(str(topics))),
                   "qrels": _digest(load_qrels(str(qrels)))}
            for name, (topics, qrels) in topic_sets.items()}


def _corpus_digest(corpus: str) -> str:
    """SHA-256 of the corpus's files (``data.corpus_identity``): the documents the
    snapshots are searched over (seconds per GB, next to a snapshot's indexing)."""
    from pyserini_moe.data import corpus_identity, open_corpus  # noqa: PLC0415 - light --help

    return corpus_identity(open_corpus(corpus))["sha256"]


def _snapshot_stamp(folder: Path) -> list[list[Any]]:
    """Each file of a snapshot folder as (name, size, modification time in ns): rewritten
    weights (a training run again into the same folder) change it, so their step is evaluated
    again rather than served the old model's numbers."""
    return [[str(p.relative_to(folder)), (st := p.stat()).st_size, st.st_mtime_ns]
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] != "onnx"]  # export cache: not weights


def _index_and_search(model: Path, corpus: str, topic_sets: dict[str, tuple[Any, Any]],
                      metrics: list[str], kind: str, max_length: int,
                      query_max_length: int | None,
                      progress: bool) -> dict[str, dict[str, float]]:
    """One snapshot indexed into a temporary folder, searched and scored as the regressions do
    (``fused``: an index per CAME expert, searched with ``--retriever fused``)."""
    from pyserini_moe.index import BuildSettings, build_indexes  # noqa: PLC0415 - `analyze --help` stays light
    from pyserini_moe.search import SearchSettings, search_topics  # noqa: PLC0415 - `analyze --help` stays light

    scratch = Path(tempfile.mkdtemp(prefix="snapshot-index-"))
    try:
        kinds = list(CAME_INDEX_KINDS.values()) if kind == FUSED else [kind]
        indexes = {name: scratch / name for name in kinds}
        build_indexes(BuildSettings(corpus, str(model), indexes, max_length=max_length,
                                    progress=progress))
        searched = [str(i) for i in indexes.values()]
        settings = SearchSettings(retriever=kind, index=searched if kind == FUSED else searched[0],
                                  quiet=not progress, query_max_length=query_max_length)
        return {name: evaluate(search_topics(settings, load_topics(str(topics))).run,
                               load_qrels(str(qrels)), metrics)
                for name, (topics, qrels) in topic_sets.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_json(path: Path, value: Any) -> None:

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=1) + "\n")


def select(snapshots: list[Snapshot], dev_metric: str) -> dict[str, int]:
    """The step each rule keeps: ``val-loss``, ``dev-<metric>``, ``last``."""
    rules = {"last": snapshots[-1].step}
    with_loss = [s for s in snapshots if s.val_loss is not None]
    if with_loss:
        rules["val-loss"] = min(with_loss, key=lambda s: (s.val_loss, s.step)).step
    rules[f"dev-{dev_metric}"] = max(snapshots, key=lambda s: (s.metrics[DEV][dev_metric],
                                                               -s.step)).step
    return rules


@dataclass(frozen=True)
class RuleOutcome:
    """One rule across seeds: the steps it kept and what those steps score on a test set."""

    rule: str
    steps: dict[str, int]  # seed label -> step kept
    scores: dict[str, float]  # seed label -> test metric at that step

    @property
    def summary(self) -> SeedSummary:
        """The kept steps' scores over the seeds."""
        return SeedSummary(tuple(self.scores.values()))


def compare_rules(trainings: dict[str, list[Snapshot]], test_set: str, metric: str,
                  dev_metric: str) -> list[RuleOutcome]:
    """Each rule's kept step and test score for every seed (``trainings``: label -> snapshots)."""
    chosen = {label: select(snaps, dev_metric) for label, snaps in trainings.items()}
    rules = list(next(iter(chosen.values())))
    out = []
    for rule in rules:
        steps = {label: chosen[label][rule] for label in trainings}
        scores = {label: next(s for s in trainings[label] if s.step == steps[label])
                  .metrics[test_set][metric] for label in trainings}
        out.append(RuleOutcome(rule, steps, scores))
    return out


def report(trainings: dict[str, list[Snapshot]], test_set: str, metric: str,
           dev_metric: str, title: str) -> str:
    """Markdown: the rules across seeds, then every snapshot of every seed."""

    outcomes = compare_rules(trainings, test_set, metric, dev_metric)
    rows = [[o.rule, ", ".join(f"{s}: {o.steps[s]}" for s in trainings),
             ", ".join(f"{o.scores[s]:.4f}" for s in trainings), f"{o.summary.mean:.4f}",
             f"{o.summary.sd:.4f}",
             f"{min(o.scores.values()):.4f}-{max(o.scores.values()):.4f}"]
            for o in outcomes]
    best = [[label, f"{max(s.metrics[test_set][metric] for s in snaps):.4f}"]
            for label, snaps in trainings.items()]
    parts = [f"### {title}", "",
             f"{len(trainings)} training seed(s); each rule's kept step and its {test_set} "
             f"{metric} (test queries are never looked at by a rule).", "",
             format_table(["rule", "step kept, per seed", f"{metric}, per seed", "mean", "sd",
                           "range"], rows), "",
             f"For reference, the best {test_set} {metric} any snapshot reached (an oracle no rule "
             "can use):", "", format_table(["seed", f"best {metric}"], best), ""]
    for label, snaps in trainings.items():
        sets = list(snaps[0].metrics)
        headers = ["step", "val loss", *[f"{name} {m}" for name in sets
                                         for m in snaps[0].metrics[name]]]
        table = [[str(s.step), "-" if s.val_loss is None else f"{s.val_loss:.4f}",
                  *[f"{s.metrics[name][m]:.4f}" for name in sets for m in s.metrics[name]]]
                 for s in snaps]
        parts += [f"#### seed {label}", "", format_table(headers, table), ""]
    return "\n".join(parts)


def plot(snapshots: list[Snapshot], test_set: str, metric: str, dev_metric: str,
         title: str, path: str | Path) -> None:
    """Test and dev metric against the step, validation loss on a second axis (one seed)."""

    fig, (ax,) = figure()
    steps = [s.step for s in snapshots]
    ax.plot(steps, [s.metrics[test_set][metric] for s in snapshots], "o-",
            label=f"{test_set} {metric} (diagnosis)")
    if all(DEV in s.metrics for s in snapshots):  # runs brought back without dev qrels: none
        ax.plot(steps, [s.metrics[DEV][dev_metric] for s in snapshots], "s--",
                label=f"dev {dev_metric}")
    ax.set_xlabel("training step")
    ax.set_ylabel("metric")
    losses = [(s.step, s.val_loss) for s in snapshots if s.val_loss is not None]
    if losses:
        twin = ax.twinx()
        twin.plot(*zip(*losses), "^:", color="grey", label="validation loss")
        twin.set_ylabel("validation loss")
        twin.legend(loc="lower right")
    ax.legend(loc="lower left")
    ax.set_title("\n".join(textwrap.wrap(title, 70)))  # one long line is clipped by the figure
    save_png(fig, path)


def training_folders(items: Sequence[str]) -> dict[str, Path]:
    """``[SEED=]DIR`` items as {label: folder}; a label given twice is refused (one of the two
    trainings would silently drop out of the means), and so is a folder given twice, however
    spelt (one training counted as two seeds: a spread of 0 that was never measured)."""
    folders: dict[str, Path] = {}
    for item in items:
        label, sep, path = item.partition("=")
        folder = Path(path if sep else label)
        label = label if sep else folder.name
        if label in folders:
            raise UserError(f"--train-dir: the label {label!r} is given twice ({folders[label]} "
                            f"and {folder}); label each training once, e.g. 42=DIR 43=DIR")
        twice = next((other for other in folders.values()
                      if other.resolve() == folder.resolve()), None)
        if twice is not None:
            raise UserError(f"--train-dir: {twice} and {folder} are one training folder; give "
                            "each training once (one folder per seed)")
        folders[label] = folder
    return folders


def _recipe(train_dir: Path) -> dict[str, Any] | None:
    """The recipe a training saved in its folder ({} when it is not a mapping), None when it
    saved none (a folder made by hand): then nothing can be checked against it."""
    from pyserini_moe.train import RECIPE_FILE  # noqa: PLC0415 - `analyze --help` stays light

    recipe = train_dir / RECIPE_FILE
    if not recipe.is_file():
        return None
    saved = read_yaml(recipe, "the training's recipe", UserError)
    return saved if isinstance(saved, dict) else {}


def _section(recipe: dict[str, Any], name: str) -> dict[str, Any]:
    """One section of a recipe ({} when absent or not a mapping)."""
    section = recipe.get(name)
    return section if isinstance(section, dict) else {}


def check_seed(label: str, train_dir: Path) -> None:
    """A numeric label is the training's seed in the report (``#### seed 7``): one that
    contradicts the seed the recipe trained with would put another seed's name on the rows."""
    seed = _section(_recipe(train_dir) or {}, "training").get("seed")
    if label.isdigit() and isinstance(seed, int) and int(label) != seed:
        raise UserError(f"--train-dir {label}={train_dir}: that training's recipe says seed "
                        f"{seed}; label it {seed}={train_dir}, or with a name that is not a "
                        "number")


def check_distinct_seeds(folders: dict[str, Path]) -> None:
    """Two folders whose recipes trained with one seed are one training (a copy, or a
    deterministic rerun): counted as two seeds they give a spread of 0 that was never measured."""
    seen: dict[int, str] = {}
    for label, folder in folders.items():
        seed = _section(_recipe(folder) or {}, "training").get("seed")
        if not isinstance(seed, int):
            continue
        if seed in seen:
            raise UserError(f"--train-dir {seen[seed]} and {label}={folder}: both recipes trained "
                            f"with seed {seed}, one training twice; give one folder per training "
                            "seed")
        seen[seed] = f"{label}={folder}"


# Recipe fields that may differ between the seeds of one condition: the seeds themselves, where
# each training went and the device it ran on.
SEED_FIELDS = frozenset({"training.seed", "data.seed", "output_dir", "training.device"})
# Fields that may differ only as each seed's own: the negatives a seed's earlier round mined
# (a second round reads the run or model of its seed's first round, see SEED_NAMED_FIELDS).
SEED_NAMED_FIELDS = frozenset({"data.negatives.run", "data.negatives.model"})


def check_one_condition(folders: dict[str, Path]) -> None:
    """The trainings are seeds of one recipe: two recipes (another learning rate, pooling) would
    be reported as "2 training seeds" with a mean ± sd over two conditions. The first field in
    which a recipe differs from the first one's, besides :data:`SEED_FIELDS`, is named; a field
    of :data:`SEED_NAMED_FIELDS` passes only as :func:`_seed_named` allows."""
    recipes = {label: _recipe(folder) for label, folder in folders.items()}
    known = {label: _flat(recipe) for label, recipe in recipes.items() if recipe is not None}
    if len(known) < 2:
        return
    (first, base), *others = known.items()
    for label, fields in others:
        field = next((key for key in [*base, *fields] if key not in SEED_FIELDS
                      and not _same(base.get(key), fields.get(key))
                      and not (key in SEED_NAMED_FIELDS and _seed_named(base, fields, key))),
                     None)
        if field is not None:
            raise UserError(f"--train-dir {first}={folders[first]} and {label}={folders[label]}: "
                            f"their recipes differ in {field} ({_shown(base, field)} vs "
                            f"{_shown(fields, field)}), not only in the seed: two conditions, "
                            f"not seeds of one; analyse each on its own{_seed_hint(field)}")


def _seed_named(one: dict[str, Any], other: dict[str, Any], key: str) -> bool:
    """A negatives run or mining model may differ between two seeds only where it is each
    seed's own: its path differs from the other's in the seed numbers alone, each path naming
    its own training's seed there (``work/detr-s42.train.trec`` for seed 42 beside
    ``work/detr-s43.train.trec`` for 43, as a seeded round 2 names them). The content of two
    files cannot tell a seed's own round 1 from another condition's negatives (BM25's top 10
    against the same ten reversed, a model of another recipe); their names, written by the
    study that made them per seed, can. Any other difference is two conditions."""
    seeds = one.get("training.seed"), other.get("training.seed")
    a, b = one.get(key), other.get(key)
    if not (all(isinstance(s, int) for s in seeds) and isinstance(a, str) and isinstance(b, str)):
        return False
    parts_a, parts_b = re.split(r"([0-9]+)", a), re.split(r"([0-9]+)", b)
    if len(parts_a) != len(parts_b):
        return False
    differing = [(x, y) for x, y in zip(parts_a, parts_b) if x != y]
    return bool(differing) and all(x == str(seeds[0]) and y == str(seeds[1])
                                   for x, y in differing)


def _seed_hint(field: str) -> str:
    """What a seeded second round must do for its per-seed negatives to pass as one condition."""
    if field not in SEED_NAMED_FIELDS:
        return ""
    return (f" (a seed's own {field.rsplit('.', 1)[-1]} may differ from another seed's only by "
            "the seed number in its path, e.g. detr-s42.train.trec and detr-s43.train.trec)")


def _flat(recipe: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"training": {"seed": 1}}`` as ``{"training.seed": 1}``, in the recipe's order; an
    empty section adds nothing (``args: {}`` against ``args: {pooling: cls}`` then names
    ``model.args.pooling``)."""
    out: dict[str, Any] = {}
    for key, value in recipe.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def _shown(fields: dict[str, Any], key: str) -> str:
    """A recipe field's value for a message; ``unset`` where the recipe lacks it."""
    return repr(fields[key]) if key in fields else "unset"


def _same(a: object, b: object) -> bool:
    """Equal values, or two spellings of one existing path (the backbone as ``bert`` and as
    ``./bert``)."""
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str) and Path(a).exists() and Path(b).exists():
        return Path(a).resolve() == Path(b).resolve()
    return False


def check_corpus(train_dir: Path, corpus: str) -> None:
    """The held-out queries are the training collection's: searched in another corpus they find
    nothing relevant (dev nDCG 0 at every step) and the dev rule keeps an arbitrary step."""
    recipe = _recipe(train_dir)
    if recipe is None:
        return
    trained_on = str(_section(recipe, "data").get("collection"))
    if Path(trained_on).name != Path(corpus).name:
        raise UserError(f"{train_dir} was trained on {trained_on!r}; its held-out queries "
                        f"belong to that collection, not to --corpus {corpus}: pass --corpus "
                        f"{trained_on}")


def check_held_out(train_dir: Path) -> None:
    """Both rules that look at data, the validation loss and the dev metric, read the training's
    held-out queries (``dev_topics.tsv``, written by the trainer); a training whose recipe held
    none out (``data.validation_fraction: 0``) is refused as such before any snapshot is
    indexed, not at the first search as a missing topics file."""
    from pyserini_moe.train import DEV_TOPICS_FILE  # noqa: PLC0415 - `analyze --help` stays light

    fraction = _section(_recipe(train_dir) or {}, "data").get("validation_fraction")
    if fraction == 0 and not (train_dir / DEV_TOPICS_FILE).is_file():
        raise UserError(f"{train_dir} was trained with data.validation_fraction 0: it held out no "
                        "queries, so neither the validation-loss nor the dev rule can pick a "
                        "step; train with data.validation_fraction above 0 to compare its "
                        "checkpoints")


@dataclass(frozen=True)
class CheckpointsAnalysis:
    """What ``analyze checkpoints`` takes, flag for flag (see its ``--help``): a label given twice
    and an unknown index kind are refused when the object is made, before any snapshot is
    indexed."""

    train_dir: Sequence[str]  # [SEED=]DIR, one training per seed
    corpus: str
    test: str | None = None  # `collection:split`; None: the corpus's test split
    metric: str = "ndcg@10"
    dev_metric: str = "ndcg@10"
    kind: str = "dense"
    max_length: int = 256
    query_max_length: int | None = None  # None: the length each snapshot was trained with
    title: str = "Checkpoint selection"
    quiet: bool = False
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        training_folders(self.train_dir)
        if self.kind not in KINDS:
            raise UserError(f"--kind {self.kind!r}: choose from {', '.join(KINDS)}")
        for flag, name in (("--metric", self.metric), ("--dev-metric", self.dev_metric)):
            _check_metric(flag, name)


def _check_metric(flag: str, name: str) -> None:
    """An unknown metric name is refused when the settings are made, not after every snapshot
    has been indexed and searched (the metric names are part of the cache's key, so a typo also
    dropped the cache)."""
    try:
        parse_metric(name)
    except UserError as e:
        raise UserError(f"{flag}: {e}") from None


def run_checkpoints(analysis: CheckpointsAnalysis) -> int:
    """The ``checkpoints`` subcommand."""

    test = analysis.test or f"{analysis.corpus}:test"
    metrics = list(dict.fromkeys([analysis.metric, analysis.dev_metric]))
    folders = training_folders(analysis.train_dir)
    for label, folder in folders.items():
        check_corpus(folder, analysis.corpus)
        check_seed(label, folder)
    check_distinct_seeds(folders)
    check_one_condition(folders)
    for folder in folders.values():
        check_held_out(folder)
    with _one_query_cut_warning(analysis.query_max_length):
        trainings = {label: evaluate_training(folder, analysis.corpus, [test], metrics,
                                              analysis.kind, analysis.max_length,
                                              analysis.query_max_length, not analysis.quiet)
                     for label, folder in folders.items()}
    emit(report(trainings, test, analysis.metric, analysis.dev_metric, analysis.title),
         analysis.output)
    if analysis.plot:
        first = next(iter(trainings))
        plot(trainings[first], test, analysis.metric, analysis.dev_metric,
             f"{analysis.title}, seed {first}", analysis.plot)
    return 0


@contextlib.contextmanager
def _one_query_cut_warning(query_max_length: int | None) -> Iterator[None]:
    """While the snapshots are searched, the cut-query warnings become one line at the end (the
    query encoder's comes once per snapshot and topic set), naming where the length came from:
    ``--query-max-length``, or each snapshot's training."""
    from pyserini_moe.search import held_query_cuts  # noqa: PLC0415 - `analyze --help` stays light

    with held_query_cuts() as cut_lengths:
        yield
    if cut_lengths:
        lengths = " or ".join(map(str, sorted(cut_lengths)))
        source = ("(--query-max-length)" if query_max_length is not None else
                  "(the query length the snapshots were trained with; --query-max-length "
                  "searches them at another)")
        print(f"warning: queries longer than {lengths} tokens {source} were cut when searched",
              file=sys.stderr)
