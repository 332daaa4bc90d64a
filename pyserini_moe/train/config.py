"""The training recipe: ``encoders/<name>.yaml`` loaded into validated dataclasses.

A recipe is checked completely when it is loaded, so a typo'd field or an impossible value fails
in the first second with the file and the field named (``ConfigError``, a ``ValueError``), not
after an hour of BM25 mining or training. Relative paths are relative to the working directory
(the repository root, where the commands are run).

Schema (defaults in brackets; see ``encoders/*.yaml`` for commented examples)::

    output_dir: work/models/<name>           # required unless --output-dir gives it
    model:
      type: siamese                          # required: a registered model type
      backbone: all-minilm-l6-v2             # [packaged MiniLM] HF name or folder
      args: {pooling: mean}                  # [{}] extra keyword arguments of <Class>.from_backbone
    data:
      collection: scifact                    # required: name or BEIR folder
      split: train                           # [train] qrels split the examples come from
      validation_fraction: 0.05              # [0.05] held-out QUERIES for validation loss
      seed: 42                               # [42] which queries are held out
      num_negatives: 1                       # [1] hard negatives per query per step
      positives: all                         # [all] all: an example per (query, positive) pair;
                                             # first: the query's first positive (DPR's gold);
                                             # sample: one drawn per query every epoch
      negatives:
        source: bm25                         # [bm25] bm25 | run | model
        run: path/to/run.trec                # source=run: any TREC run
        model: path/to/model                 # source=model: an encoder to mine with ...
        kind: dense                          # ... and its index kind: dense|impact|multivector
                                             # (each refused beside a source that does not read it)
        depth: 100                           # [100] candidates per query
        skip_top: 0                          # [0] ranks skipped (likely unjudged positives)
      query_max_length: 32                   # [32] tokens
      passage_max_length: 128                # [128] tokens
    training:
      learning_rate: 2.0e-5                  # required
      group_learning_rates: {}               # [{}] parameter-name prefix or glob -> learning rate
      epochs: 1                              # [1]
      max_steps: null                        # [null] cap on optimizer steps
      batch_size: 16                         # [16] queries per forward pass
      grad_accumulation: 1                   # [1] forward passes per optimizer step
      grad_cache_chunk: null                 # [null] GradCache: texts per encoder pass (null:
                                             #   the whole batch at once); every in-batch
                                             #   negative kept at one chunk's memory
      weight_decay: 0.01                     # [0.01] (not on biases / LayerNorm)
      warmup_ratio: 0.1                      # [0.1] linear warmup, then linear decay to 0
      temperature: 1.0                       # [1.0] scores are divided by it
      flops_weight: {query: 0.0, passage: 0.0}  # [0] FLOPS on sparse outputs (or one number)
      flops_warmup_ratio: 0.0                # [0] quadratic ramp of the FLOPS weight (SPLADE)
      max_grad_norm: 1.0                     # [1.0] null = no clipping
      seed: 42                               # [42] the run's seed: initialisation of new
                                             #   modules, data order, negatives, dropout
      eval_every: null                       # [once per epoch] optimizer steps
      keep_snapshots: false                  # [false] also save the model of every validation
                                             #   to snapshots/step-N/ (checkpoint studies)
      device: auto                           # [auto] auto | cpu | cuda | cuda:N
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pyserini_moe.io import read_yaml
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE
from pyserini_moe.modeling.registry import model_class, model_types
from pyserini_moe.representation import INDEX_KINDS
from pyserini_moe.validate import (
    ConfigError,
    build_dataclass,
    check,
    fail,
    fraction,
    non_negative,
    one_of,
    positive,
    seed_range,
    size_up_to,
)

# Far above any recipe (the papers train 5-40 epochs); past it a value is a typo, and counting
# the epochs' batches would run until killed.
MAX_EPOCHS = 100_000
NEGATIVE_SOURCES = ("bm25", "run", "model")
# The ``data.negatives`` fields each source reads; set beside another source, one is ignored.
SOURCE_FIELDS = {"bm25": (), "run": ("run",), "model": ("model", "kind")}
POSITIVE_MODES = ("all", "first", "sample")
MINING_KINDS = INDEX_KINDS


def _device(value: str) -> str | None:
    if re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        return None
    return "must be auto, cpu, cuda or cuda:N"


def _learning_rates(value: dict[str, float]) -> str | None:
    bad = {k: v for k, v in value.items() if not k or v <= 0}
    return f"needs non-empty prefixes and learning rates > 0, got {bad}" if bad else None


def _model_type(value: str) -> str | None:

    known = model_types()
    return None if value in known else f"unknown model type; known: {', '.join(known)}"





@dataclass(frozen=True)
class ModelConfig:
    """Which architecture, from which pretrained backbone."""

    type: str = field(metadata=check(_model_type))
    backbone: str = DEFAULT_BACKBONE
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NegativesConfig:
    """Where hard negatives come from; a model-mined run can also be fed in as ``source: run``."""

    source: str = field(default="bm25", metadata=check(one_of(NEGATIVE_SOURCES)))
    run: Path | None = None
    model: str | None = None
    kind: str | None = field(default=None, metadata=check(
        lambda v: None if v is None else one_of(MINING_KINDS)(v)))
    depth: int = field(default=100, metadata=check(positive))
    skip_top: int = field(default=0, metadata=check(non_negative))


@dataclass(frozen=True)
class DataConfig:
    """Training examples: (query, positive, hard negatives) from one qrels split."""

    collection: str
    split: str = "train"
    validation_fraction: float = field(default=0.05, metadata=check(fraction))
    seed: int = field(default=42, metadata=check(seed_range))
    num_negatives: int = field(default=1, metadata=check(non_negative))
    positives: str = field(default="all", metadata=check(one_of(POSITIVE_MODES)))
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    query_max_length: int = field(default=32, metadata=check(positive))
    passage_max_length: int = field(default=128, metadata=check(positive))


@dataclass(frozen=True)
class FlopsWeight:
    """FLOPS regulariser weights; SPLADE regularises queries harder than documents."""

    query: float = field(default=0.0, metadata=check(non_negative))
    passage: float = field(default=0.0, metadata=check(non_negative))

    @staticmethod
    def expand_number(value: float) -> dict[str, float]:
        """A recipe may give one number: the same weight for both sides."""
        return {"query": value, "passage": value}


@dataclass(frozen=True)
class TrainingConfig:
    """The optimisation loop."""

    learning_rate: float = field(metadata=check(positive))
    group_learning_rates: dict[str, float] = field(default_factory=dict,
                                                   metadata=check(_learning_rates))
    epochs: int = field(default=1, metadata=check(size_up_to(MAX_EPOCHS)))
    max_steps: int | None = field(default=None, metadata=check(positive))
    batch_size: int = field(default=16, metadata=check(positive))
    grad_accumulation: int = field(default=1, metadata=check(positive))
    grad_cache_chunk: int | None = field(default=None, metadata=check(positive))
    weight_decay: float = field(default=0.01, metadata=check(non_negative))
    warmup_ratio: float = field(default=0.1, metadata=check(fraction))
    temperature: float = field(default=1.0, metadata=check(positive))
    flops_weight: FlopsWeight = field(default_factory=FlopsWeight)
    flops_warmup_ratio: float = field(default=0.0, metadata=check(fraction))
    max_grad_norm: float | None = field(default=1.0, metadata=check(positive))
    seed: int = field(default=42, metadata=check(seed_range))
    eval_every: int | None = field(default=None, metadata=check(positive))
    keep_snapshots: bool = False
    device: str = field(default="auto", metadata=check(_device))


@dataclass(frozen=True)
class TrainConfig:
    """A whole recipe; ``source`` is the file it came from (for messages and provenance)."""

    model: ModelConfig
    data: DataConfig
    training: TrainingConfig
    output_dir: Path
    source: Path | None = field(default=None, compare=False, metadata={"internal": True})

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain YAML/JSON data (paths as strings), without ``source``."""
        out = _plain(dataclasses.asdict(self))
        out.pop("source")
        return out

    def with_overrides(self, **overrides: Any) -> TrainConfig:
        """Copy with command-line overrides (``output_dir``, ``epochs``, ``max_steps``, ``device``,
        ``seed``),
        validated like the file."""
        raw = self.to_dict()
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "output_dir":
                raw["output_dir"] = str(value)
            else:
                raw["training"][key] = value
        return from_dict(raw, self.source or Path("<command line>"))

    def with_settings(self, settings: list[str],
                      flags: dict[str, str] | None = None) -> TrainConfig:
        """Copy with ``dotted.field=value`` settings (values parsed as YAML), e.g.
        ``data.negatives.run=work/round1.trec``: what a second training round changes.

        ``flags`` (dotted field -> the command-line flag that set it, e.g. ``training.seed`` ->
        ``--seed 42``): a setting of one of those fields, or of a section holding one, is refused
        (applied after the flag, it would beat the flag without a word). A setting that replaces
        a whole section (``model={type: siamese}``) is refused where it would drop a field the
        recipe set there (``model.backbone`` back to its default)."""
        raw = self.to_dict()
        given: dict[str, str] = {}
        for setting in settings:
            key, sep, text = setting.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--set {setting!r}: expected FIELD=VALUE, e.g. "
                                  "data.negatives.source=run")
            if given.setdefault(key.strip(), text.strip()) != text.strip():
                raise ConfigError(f"--set {key.strip()} is given twice ({given[key.strip()]} and "
                                  f"{text.strip()}): give it once", key.strip())
            inside = next((f"{k}={v}" for k, v in given.items() if k.startswith(f"{key.strip()}.")),
                          None)
            if inside is not None:  # applied in order, this one would drop the earlier one
                raise ConfigError(f"--set {setting.strip()} replaces the whole of {key.strip()}, "
                                  f"which the earlier --set {inside} sets inside: the earlier one "
                                  "would be lost; give the field in the section's value, or drop "
                                  "one of them", key.strip())
            if any(not part.strip() for part in key.strip().split(".")):
                raise ConfigError(f"--set {setting.strip()}: {key.strip()!r} has an empty field "
                                  "name (a dot too many?): expected dotted field names, e.g. "
                                  "training.max_steps=1000", key.strip())
            _refuse_flag_clash(setting.strip(), key.strip(), flags or {})
            *parents, leaf = key.strip().split(".")
            node = raw
            for i, part in enumerate(parents):
                if node.get(part) is None:
                    node[part] = {}
                if not isinstance(node[part], dict):
                    raise ConfigError(f"--set {setting!r}: {'.'.join(parents[:i + 1])} is not a "
                                      "section")
                node = node[part]
            node[leaf] = yaml.safe_load(text) if text.strip() else None
        try:
            changed = from_dict(raw, self.source or Path("<command line>"))
        except ConfigError as e:  # a bad value given on the command line: blame --set, not the file
            given = {s.partition("=")[0].strip(): s for s in settings}
            if e.field in given:
                problem = str(e).split(f"{e.field}: ", 1)[-1]
                raise ConfigError(f"--set {given[e.field]}: {problem}", e.field) from None
            section = max((k for k in given if e.field.startswith(f"{k}.")), key=len, default=None)
            if section is not None:  # a field of a section --set replaced whole: not the file's
                problem = str(e).split(f"{e.field}: ", 1)[-1]
                raise ConfigError(f"--set {given[section]}: {e.field}: {problem}", e.field) from None
            made = next((k for k in given if k.startswith(f"{e.field}.")), None)
            if made is not None:  # a section the recipe lacks, which this --set made up
                problem = str(e).split(f"{e.field}: ", 1)[-1]
                raise ConfigError(f"--set {given[made]}: {e.field}: {problem}", e.field) from None
            raise
        _refuse_dropped_fields(self, changed, settings)
        return changed


def _refuse_flag_clash(setting: str, key: str, flags: dict[str, str]) -> None:
    """``--set training.seed=7`` beside ``--seed 42`` (or ``--set training={...}``, which holds
    training.seed): the --set, applied last, would silently beat the flag."""
    for name, flag in flags.items():
        if key == name or key.startswith(f"{name}."):
            raise ConfigError(f"--set {setting} and {flag} both set {name}: give one of them",
                              name)
        if name.startswith(f"{key}."):
            raise ConfigError(f"--set {setting} replaces the whole of {key}, which {flag} also "
                              f"sets ({name}): give one of them, or set the other fields of "
                              f"{key} one by one (--set {key}.FIELD=VALUE)", name)


def _refuse_dropped_fields(before: TrainConfig, after: TrainConfig, settings: list[str]) -> None:
    """A setting whose value replaces a whole section (``model={type: siamese}``) leaves out
    fields the recipe set there; they would fall back to their defaults in silence (the
    packaged MiniLM trained instead of the recipe's backbone). Fields the value gives, or a
    later setting gives, are not dropped; nor are fields whose default is the recipe's value."""
    keys = [s.partition("=")[0].strip() for s in settings]
    for setting, key in zip(settings, keys):
        text = setting.partition("=")[2]
        value = yaml.safe_load(text) if text.strip() else None
        old, new = before, after
        for part in key.split("."):
            old, new = getattr(old, part, None), getattr(new, part, None)
        if not (dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new)
                and isinstance(value, dict)):
            continue  # a field's value (a dict-valued field such as model.args included)
        others = set(keys) - {key}
        dropped = _dropped(old, new, value, key, others)
        if dropped:
            names = ", ".join(f"{path} ({was})" for path, was in dropped)
            raise ConfigError(f"--set {setting.strip()} replaces the whole of {key} and so drops "
                              f"what the recipe set there: {names} would fall back to the "
                              f"default; set the fields one by one instead (--set "
                              f"{key}.FIELD=VALUE), or give the dropped ones in the value",
                              dropped[0][0])


def _dropped(old: Any, new: Any, value: dict, where: str,
             others: set[str]) -> list[tuple[str, Any]]:
    """The fields of section ``old`` (dotted under ``where``) that ``value`` and the ``others``
    settings leave out and that changed from ``old`` to ``new``: (path, the recipe's value)."""
    out: list[tuple[str, Any]] = []
    for f in dataclasses.fields(old):
        if f.metadata.get("internal"):
            continue
        path = f"{where}.{f.name}"
        was, now = getattr(old, f.name), getattr(new, f.name)
        if path in others:
            continue
        if dataclasses.is_dataclass(was):
            inner = value.get(f.name, {})
            if f.name not in value or isinstance(inner, dict):
                out += _dropped(was, now, inner if isinstance(inner, dict) else {}, path, others)
        elif f.name not in value and was != now:
            out.append((path, _plain(was)))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def load_config(path: str | os.PathLike,
                output_dir: str | os.PathLike | None = None) -> TrainConfig:
    """Read and validate a recipe file. ``output_dir`` (``--output-dir``) replaces the recipe's
    before validation, so a recipe shared between runs may leave it out."""
    path = Path(path)
    raw = read_yaml(path, "recipe", ConfigError)
    if output_dir is not None and isinstance(raw, dict):
        raw = {**raw, "output_dir": str(output_dir)}
    return from_dict(raw, path)


def from_dict(raw: Any, source: str | os.PathLike = "<dict>") -> TrainConfig:
    """Validate parsed YAML; every complaint names ``source`` and the dotted field."""
    source = Path(source)
    config = build_dataclass(TrainConfig, raw, "", source)
    config = dataclasses.replace(config, source=source)
    _check_across_fields(config, source)
    return config


def _check_across_fields(config: TrainConfig, source: Path) -> None:
    negatives = config.data.negatives
    where = "data.negatives"
    _refuse_unread_negatives(negatives, source)
    if config.data.num_negatives == 0 and negatives != NegativesConfig():
        changed = next(f.name for f in dataclasses.fields(NegativesConfig)
                      if getattr(negatives, f.name) != getattr(NegativesConfig(), f.name))
        fail(source, f"{where}.{changed}", f"not read when data.num_negatives is 0 (in-batch "
             f"negatives only, nothing is mined): remove {where}, or set num_negatives")
    if negatives.source == "run":
        if negatives.run is None:
            fail(source, f"{where}.run", "required when source is 'run'")
        if not negatives.run.is_file():
            fail(source, f"{where}.run", f"run file not found: {negatives.run}")
    if negatives.source == "model":
        for name in ("model", "kind"):
            if getattr(negatives, name) is None:
                fail(source, f"{where}.{name}", "required when source is 'model'")
    if negatives.skip_top >= negatives.depth:
        fail(source, f"{where}.skip_top", f"must be smaller than depth ({negatives.depth}), "
                                           f"got {negatives.skip_top}")
    _check_model_args(config.model, source)


def _refuse_unread_negatives(negatives: NegativesConfig, source: Path) -> None:
    """A ``run``, ``model`` or ``kind`` beside a source that does not read it would be dropped
    in silence: BM25 negatives trained on while the recipe names a round-1 run."""
    read = SOURCE_FIELDS[negatives.source]
    for name in ("run", "model", "kind"):
        if getattr(negatives, name) is not None and name not in read:
            user = next(s for s, fields in SOURCE_FIELDS.items() if name in fields)
            fail(source, f"data.negatives.{name}", f"not read when source is "
                 f"{negatives.source!r}: remove it, or set data.negatives.source to {user!r}")


def _check_model_args(model: ModelConfig, source: Path) -> None:
    """``model.args`` must be the model's arguments, each valid (its ``Args``, declared once)."""
    cls = model_class(model.type)
    for key in model.args:
        if key not in cls.argument_names():
            fail(source, f"model.args.{key}", f"not an argument of the {model.type} model "
                                               f"(accepted: {', '.join(cls.argument_names()) or 'none'})")
    try:
        cls.Args(**model.args)
    except ConfigError as e:
        raise ConfigError(f"{source}: model.args.{e}", f"model.args.{e.field}") from None
