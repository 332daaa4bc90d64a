"""A model's own arguments, declared once: one frozen dataclass per model.

Its fields and defaults are what a recipe's ``model.args`` may set, what ``from_backbone`` and the
constructor take as keywords and what ``pyserini_moe.json`` saves; each field's ``check``
metadata and the class's ``check`` hold every rule, run when an instance is made. So the
constructor, ``from_backbone``, ``RetrievalModel.argument_names`` and the recipe check all read
one list, and a value that breaks a rule is refused in one line wherever it was given.

The checks are ``validate.py``'s, the recipes' own (type hints, then each field's check), with one
difference: a value is kept as given when it equals its checked form (an integer where a float is
declared stays an integer), because the saved arguments enter every index's fingerprint and a
model saved before must keep the one its indexes recorded.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from pyserini_moe.validate import ConfigError, convert, fail


@dataclasses.dataclass(frozen=True)
class ModelArgs:
    """The base of every model's arguments (a model without any has none)."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is f.default or (type(value) is type(f.default) and value == f.default):
                continue  # the declared default is right by definition ("" prefixes, None)
            checked = convert(hints[f.name], value, f.name, "")
            problem = f.metadata.get("check", lambda _: None)(checked)
            if problem:
                fail("", f.name, f"{problem}, got {checked!r}")
            if checked != value:  # a list for a tuple, "1e-3" for a float: keep the checked form
                self.resolve(f.name, checked)
        self.check()

    def check(self) -> None:
        """Rules across fields, and defaults that depend on another field (``resolve``)."""

    def resolve(self, name: str, value: Any) -> None:
        """Set a field while the instance is made (it is frozen afterwards)."""
        object.__setattr__(self, name, value)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def parse(cls, args: Mapping[str, Any], model_type: str) -> ModelArgs:
        """``args`` (keywords, a recipe's ``model.args``, a saved folder's) as this class, or one
        ``ConfigError`` line that names the model type and the argument."""
        unknown = sorted(set(args) - set(cls.names()))
        if unknown:
            raise ConfigError(f"{model_type} models have no argument {', '.join(unknown)} "
                              f"(they have: {', '.join(cls.names()) or 'none'})", unknown[0])
        try:
            return cls(**args)
        except ConfigError as e:
            raise ConfigError(f"{model_type} model argument {e}", e.field) from None

    def saved(self) -> dict[str, Any]:
        """What ``pyserini_moe.json`` records (JSON: tuples as lists)."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}
