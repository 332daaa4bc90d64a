"""A package's public names, each loaded from its module on first use.

The packages export what the command layer, the lab and users may import
(``from pyserini_moe.search import SearchSettings``) without importing torch, Faiss or the JVM
when the package is: ``python -m pyserini_moe.<command> --help`` stays fast, and the modules
behind the names remain free to move.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> tuple[list[str], Callable[[str], Any],
                                                             Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``, whose public names are
    ``where``'s keys, each defined in the module its value names (relative to the package)."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return sorted(where), __getattr__, __dir__
