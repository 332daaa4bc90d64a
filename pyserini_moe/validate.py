"""One validator for everything a user configures: training recipes, pre-training arguments and
the regression files' numbers. A configuration is a (nested) dataclass; :func:`build_dataclass`
checks a parsed mapping against its type hints and each field's ``check`` metadata, and every
complaint is a :class:`ConfigError` naming the source and the dotted field path
(``encoders/x.yaml: training.learning_rate: must be > 0, got -1.0``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError


class ConfigError(UserError):
    """A recipe problem; the message names the file and the field (``field``: its dotted path)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# YAML 1.1 (PyYAML) reads 2e-5 and 1E4 as strings: a number needs a dot and a signed exponent
# there. Recipes are written by people who expect YAML 1.2 / Python, so these are numbers too.
FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


Check = Callable[[Any], str | None]  # returns a complaint, or None when the value is fine


def positive(value: Any) -> str | None:
    """> 0 and finite (infinity passes ``> 0``; NaN fails it)."""
    if value is None or 0 < value < math.inf:
        return None
    return "must be > 0" if not value > 0 else "must be finite"


def non_negative(value: Any) -> str | None:
    """>= 0 and finite."""
    if value is None or 0 <= value < math.inf:
        return None
    return "must be >= 0" if not value >= 0 else "must be finite"


# Upper bounds of a model's sizes: far above any retriever's (vectors of 128-4,096, 2-64 experts)
# and below what a typo reaches (1e14), which would otherwise be an allocation traceback or a
# build that runs until killed.
MAX_WIDTH = 65_536
MAX_EXPERTS = 1_024


def size_up_to(limit: int) -> Check:
    """A count or width with a bound past which a value is a typo (one that allocates, or that
    is counted through): > 0 and at most ``limit``."""
    return lambda value: positive(value) or (None if value is None or value <= limit
                                             else f"must be <= {limit:,}")


def seed_range(value: int) -> str | None:
    """A random seed numpy takes (``np.random.seed``: 0 <= seed < 2**32)."""
    return None if 0 <= value < 2**32 else "must be in [0, 2**32)"


def fraction(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1)"


def one_of(choices: tuple[str, ...]) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


def check(test: Check) -> dict[str, Check]:
    """Field metadata: the value check run after the type check."""
    return {"check": test}


def check_fields(obj: Any, source: str | Path) -> None:
    """Run every field's ``check`` on a dataclass built in code (not parsed), e.g. from command
    line flags: the same complaints, with ``source`` naming where the values came from."""
    for f in dataclasses.fields(obj):
        problem = f.metadata.get("check", lambda _: None)(getattr(obj, f.name))
        if problem:
            fail(Path(source), f.name, f"{problem}, got {getattr(obj, f.name)!r}")


def closed_fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else "must be in [0, 1]"


def open_fraction(value: float) -> str | None:
    return None if 0 < value < 1 else "must be in (0, 1)"


def fail(source: Path | str, where: str, problem: str) -> typing.NoReturn:
    """One ``ConfigError``: "source: where: problem" (an empty source or place is left out)."""
    place = ": ".join(str(part) for part in (source, where) if part)
    raise ConfigError(f"{place}: {problem}" if place else problem, where)


def build_dataclass(cls: type, raw: Any, where: str, source: Path | str) -> Any:
    if not isinstance(raw, dict):
        fail(source, where, f"expected a mapping, found {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
    known = {f.name for f in fields}
    for key in raw:
        if key not in known:
            fail(source, join(where, str(key)),
                  f"unknown field (known: {', '.join(sorted(known))})")
    kwargs = {}
    for f in fields:
        name = join(where, f.name)
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                fail(source, name, "missing required field")
            continue
        value = convert(hints[f.name], raw[f.name], name, source)
        problem = f.metadata.get("check", lambda _: None)(value)
        if problem:
            fail(source, name, f"{problem}, got {value!r}")
        kwargs[f.name] = value
    return cls(**kwargs)


def join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def convert(hint: Any, value: Any, where: str, source: Path | str) -> Any:
    """Check ``value`` against the field's type hint (ints are not bools; ints are floats)."""
    args = typing.get_args(hint)
    if type(None) in args:  # Optional[X]
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    if dataclasses.is_dataclass(hint):
        if is_number(value) and hasattr(hint, "expand_number"):  # e.g. one weight, both sides
            value = hint.expand_number(value)
        return build_dataclass(hint, value, where, source)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)  # numpy's integers too
    elif hint is float:
        if isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()):
            value = float(value)
        if is_number(value) and math.isfinite(value):
            return float(value)
    elif hint is str or hint is Path:
        if isinstance(value, str) and value.strip():
            return hint(value)
    elif typing.get_origin(hint) is tuple:  # tuple[X, ...] from a list
        if isinstance(value, (list, tuple)):
            (item_hint, _) = typing.get_args(hint)
            return tuple(convert(item_hint, v, f"{where}[{i}]", source) for i, v in enumerate(value))
    elif typing.get_origin(hint) is dict:
        if isinstance(value, dict):
            _, value_hint = typing.get_args(hint)
            return {str(k): v if value_hint is Any
                    else convert(value_hint, v, f"{where}.{k}", source)
                    for k, v in value.items()}
        if value is None:
            return {}
    names = {int: "an integer", float: "a number", str: "a non-empty string",
             Path: "a non-empty path", bool: "true or false"}
    expected = "a list" if typing.get_origin(hint) is tuple else names.get(hint, "a mapping")
    fail(source, where, f"expected {expected}, found {value!r}")


def check_types(settings: Any) -> None:
    """Each plain field (int, float, bool or str, or None where allowed) of the frozen dataclass
    ``settings`` holds its type, as a recipe's would (:func:`convert`; a number written as text
    becomes the number): settings built in Python rather than by a command's parser
    (``open_searcher(alpha="1.0")``, ``build_index(batch_size=2.5)``) are checked as the
    parser checks them. Said with the field's flag, ``--batch-size``. Only the type: the
    settings' own checks say what a value of the right type may not be (infinite, empty)."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):
        hint, value = hints[f.name], getattr(settings, f.name)
        options = typing.get_args(hint)
        if type(None) in options and len(options) == 2:
            if value is None:
                continue
            hint = next(a for a in options if a is not type(None))
        flag = "--" + f.name.replace("_", "-")
        if hint is float and is_number(value):
            object.__setattr__(settings, f.name, float(value))  # finite or not: its own check
        elif hint is str and not isinstance(value, str):
            fail("", flag, f"expected a string, found {value!r}")  # empty or not: its own check
        elif hint in (int, float, bool):
            object.__setattr__(settings, f.name, convert(hint, value, flag, ""))


def is_number(value: Any) -> bool:
    """An int or a float, numpy's included; not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
