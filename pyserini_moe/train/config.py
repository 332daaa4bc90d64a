"""The training recipe: ``encoders/<name>.yaml`` loaded into validated dataclasses.

A recipe is checked completely when it is loaded, so a typo'd field or an impossible value fails
in the first second with the file and the field named (``ConfigError``, a ``ValueError``), not
after an hour of BM25 mining or training. Relative paths are relative to the working directory
(the repository root, where the commands are run).

Schema (defaults in brackets; see ``encoders/*.yaml`` for commented examples)::

    output_dir: work/models/<name>           # required
    model:
      type: siamese                          # required: a registered model type
      backbone: all-minilm-l6-v2             # [packaged MiniLM] HF name or folder
      args: {pooling: mean}                  # [{}] extra keyword arguments of <Class>.from_backbone
    data:
      collection: scifact                    # required: name or BEIR folder
      split: train                           # [train] qrels split the examples come from
      validation_fraction: 0.05              # [0.05] held-out QUERIES for validation loss
      seed: 42                               # [42] validation split and negative sampling
      num_negatives: 1                       # [1] hard negatives per query per step
      positives: all                         # [all] all: an example per (query, positive) pair;
                                             # first: the query's first positive (DPR's gold);
                                             # sample: one drawn per query every epoch
      negatives:
        source: bm25                         # [bm25] bm25 | run | model
        run: path/to/run.trec                # source=run: any TREC run
        model: path/to/model                 # source=model: an encoder to mine with ...
        kind: dense                          # ... and its index kind: dense|impact|multivector
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
      weight_decay: 0.01                     # [0.01] (not on biases / LayerNorm)
      warmup_ratio: 0.1                      # [0.1] linear warmup, then linear decay to 0
      temperature: 1.0                       # [1.0] scores are divided by it
      flops_weight: {query: 0.0, passage: 0.0}  # [0] FLOPS on sparse outputs (or one number)
      flops_warmup_ratio: 0.0                # [0] quadratic ramp of the FLOPS weight (SPLADE)
      max_grad_norm: 1.0                     # [1.0] null = no clipping
      seed: 42                               # [42] python / numpy / torch
      eval_every: null                       # [once per epoch] optimizer steps
      device: auto                           # [auto] auto | cpu | cuda | cuda:N
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pyserini_moe.errors import UserError
from pyserini_moe.io import read_yaml
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE
from pyserini_moe.modeling.base import model_class
from pyserini_moe.representation import INDEX_KINDS

NEGATIVE_SOURCES = ("bm25", "run", "model")
POSITIVE_MODES = ("all", "first", "sample")
MINING_KINDS = INDEX_KINDS


class ConfigError(UserError):
    """A recipe problem; the message names the file and the field (``field``: its dotted path)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# YAML 1.1 (PyYAML) reads 2e-5 and 1E4 as strings: a number needs a dot and a signed exponent
# there. Recipes are written by people who expect YAML 1.2 / Python, so these are numbers too.
_FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


Check = Callable[[Any], str | None]  # returns a complaint, or None when the value is fine


def _positive(value: Any) -> str | None:
    return None if value is None or value > 0 else "must be > 0"


def _non_negative(value: Any) -> str | None:
    return None if value is None or value >= 0 else "must be >= 0"


def _fraction(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def _one_of(choices: tuple[str, ...]) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


def _device(value: str) -> str | None:
    if re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        return None
    return "must be auto, cpu, cuda or cuda:N"


def _learning_rates(value: dict[str, float]) -> str | None:
    bad = {k: v for k, v in value.items() if not k or v <= 0}
    return f"needs non-empty prefixes and learning rates > 0, got {bad}" if bad else None


def _model_type(value: str) -> str | None:
    import pyserini_moe.modeling  # noqa: F401,PLC0415 - registers every model type
    from pyserini_moe.modeling.base import model_types  # noqa: PLC0415

    known = model_types()
    return None if value in known else f"unknown model type; known: {', '.join(known)}"


def _check(check: Check) -> dict[str, Check]:
    """Field metadata: the value check run after the type check."""
    return {"check": check}


@dataclass(frozen=True)
class ModelConfig:
    """Which architecture, from which pretrained backbone."""

    type: str = field(metadata=_check(_model_type))
    backbone: str = DEFAULT_BACKBONE
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NegativesConfig:
    """Where hard negatives come from; a model-mined run can also be fed in as ``source: run``."""

    source: str = field(default="bm25", metadata=_check(_one_of(NEGATIVE_SOURCES)))
    run: Path | None = None
    model: str | None = None
    kind: str | None = field(default=None, metadata=_check(
        lambda v: None if v is None else _one_of(MINING_KINDS)(v)))
    depth: int = field(default=100, metadata=_check(_positive))
    skip_top: int = field(default=0, metadata=_check(_non_negative))


@dataclass(frozen=True)
class DataConfig:
    """Training examples: (query, positive, hard negatives) from one qrels split."""

    collection: str
    split: str = "train"
    validation_fraction: float = field(default=0.05, metadata=_check(_fraction))
    seed: int = 42
    num_negatives: int = field(default=1, metadata=_check(_non_negative))
    positives: str = field(default="all", metadata=_check(_one_of(POSITIVE_MODES)))
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    query_max_length: int = field(default=32, metadata=_check(_positive))
    passage_max_length: int = field(default=128, metadata=_check(_positive))


@dataclass(frozen=True)
class FlopsWeight:
    """FLOPS regulariser weights; SPLADE regularises queries harder than documents."""

    query: float = field(default=0.0, metadata=_check(_non_negative))
    passage: float = field(default=0.0, metadata=_check(_non_negative))


@dataclass(frozen=True)
class TrainingConfig:
    """The optimisation loop."""

    learning_rate: float = field(metadata=_check(_positive))
    group_learning_rates: dict[str, float] = field(default_factory=dict,
                                                   metadata=_check(_learning_rates))
    epochs: int = field(default=1, metadata=_check(_positive))
    max_steps: int | None = field(default=None, metadata=_check(_positive))
    batch_size: int = field(default=16, metadata=_check(_positive))
    grad_accumulation: int = field(default=1, metadata=_check(_positive))
    weight_decay: float = field(default=0.01, metadata=_check(_non_negative))
    warmup_ratio: float = field(default=0.1, metadata=_check(_fraction))
    temperature: float = field(default=1.0, metadata=_check(_positive))
    flops_weight: FlopsWeight = field(default_factory=FlopsWeight)
    flops_warmup_ratio: float = field(default=0.0, metadata=_check(_fraction))
    max_grad_norm: float | None = field(default=1.0, metadata=_check(_positive))
    seed: int = 42
    eval_every: int | None = field(default=None, metadata=_check(_positive))
    device: str = field(default="auto", metadata=_check(_device))


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
        """Copy with command-line overrides (``output_dir``, ``epochs``, ``max_steps``, ``device``),
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

    def with_settings(self, settings: list[str]) -> TrainConfig:
        """Copy with ``dotted.field=value`` settings (values parsed as YAML), e.g.
        ``data.negatives.run=work/round1.trec``: what a second training round changes."""
        raw = self.to_dict()
        for setting in settings:
            key, sep, text = setting.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--set {setting!r}: expected FIELD=VALUE, e.g. "
                                  "data.negatives.source=run")
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
            return from_dict(raw, self.source or Path("<command line>"))
        except ConfigError as e:  # a bad value given on the command line: blame --set, not the file
            given = {s.partition("=")[0].strip(): s for s in settings}
            if e.field in given:
                problem = str(e).split(f"{e.field}: ", 1)[-1]
                raise ConfigError(f"--set {given[e.field]}: {problem}", e.field) from None
            raise


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def load_config(path: str | os.PathLike) -> TrainConfig:
    """Read and validate a recipe file."""
    path = Path(path)
    return from_dict(read_yaml(path, "recipe", ConfigError), path)


def from_dict(raw: Any, source: str | os.PathLike = "<dict>") -> TrainConfig:
    """Validate parsed YAML; every complaint names ``source`` and the dotted field."""
    source = Path(source)
    config = _build(TrainConfig, raw, "", source)
    config = dataclasses.replace(config, source=source)
    _check_across_fields(config, source)
    return config


def _fail(source: Path, where: str, problem: str) -> typing.NoReturn:
    raise ConfigError(f"{source}: {where}: {problem}" if where else f"{source}: {problem}", where)


def _build(cls: type, raw: Any, where: str, source: Path) -> Any:
    if not isinstance(raw, dict):
        _fail(source, where, f"expected a mapping, found {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
    known = {f.name for f in fields}
    for key in raw:
        if key not in known:
            _fail(source, _join(where, str(key)),
                  f"unknown field (known: {', '.join(sorted(known))})")
    kwargs = {}
    for f in fields:
        name = _join(where, f.name)
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                _fail(source, name, "missing required field")
            continue
        value = _convert(hints[f.name], raw[f.name], name, source)
        problem = f.metadata.get("check", lambda _: None)(value)
        if problem:
            _fail(source, name, f"{problem}, got {value!r}")
        kwargs[f.name] = value
    return cls(**kwargs)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _convert(hint: Any, value: Any, where: str, source: Path) -> Any:
    """Check ``value`` against the field's type hint (ints are not bools; ints are floats)."""
    args = typing.get_args(hint)
    if type(None) in args:  # Optional[X]
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    if dataclasses.is_dataclass(hint):
        if hint is FlopsWeight and _is_number(value):  # one number: the same for both sides
            value = {"query": value, "passage": value}
        return _build(hint, value, where, source)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            value = float(value)
        if _is_number(value) and math.isfinite(value):
            return float(value)
    elif hint is str or hint is Path:
        if isinstance(value, str) and value.strip():
            return hint(value)
    elif typing.get_origin(hint) is dict:
        if isinstance(value, dict):
            _, value_hint = typing.get_args(hint)
            return {str(k): v if value_hint is Any
                    else _convert(value_hint, v, f"{where}.{k}", source)
                    for k, v in value.items()}
        if value is None:
            return {}
    names = {int: "an integer", float: "a number", str: "a non-empty string",
             Path: "a non-empty path", bool: "true or false"}
    expected = names.get(hint, "a mapping")
    _fail(source, where, f"expected {expected}, found {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_across_fields(config: TrainConfig, source: Path) -> None:
    negatives = config.data.negatives
    where = "data.negatives"
    if negatives.source == "run":
        if negatives.run is None:
            _fail(source, f"{where}.run", "required when source is 'run'")
        if not negatives.run.is_file():
            _fail(source, f"{where}.run", f"run file not found: {negatives.run}")
    if negatives.source == "model":
        for name in ("model", "kind"):
            if getattr(negatives, name) is None:
                _fail(source, f"{where}.{name}", "required when source is 'model'")
    if negatives.skip_top >= negatives.depth:
        _fail(source, f"{where}.skip_top", f"must be smaller than depth ({negatives.depth}), "
                                           f"got {negatives.skip_top}")
    _check_model_args(config.model, source)


def _check_model_args(model: ModelConfig, source: Path) -> None:
    """``model.args`` must be arguments of the model (its constructor's, written once there)."""
    accepted = model_class(model.type).argument_names()
    for key in model.args:
        if key not in accepted:
            _fail(source, f"model.args.{key}", f"not an argument of the {model.type} model "
                                               f"(accepted: {', '.join(accepted) or 'none'})")
