"""pyserini-moe: Mixture-of-Experts retrievers as first-class Pyserini encoders.

The Python API (see docs/python.md)::

    import pyserini_moe as pm
    model = pm.load_model("models/taser-detr/last")
    pm.build_index("dense", corpus="scifact", encoder="models/taser-detr/last",
                   index="indexes/taser-detr")
    hits = pm.open_searcher("indexes/taser-detr").search("what causes anemia?", k=10)

Its names are loaded on first use, so ``python -m pyserini_moe.<command> --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it
_API = {"load_model": "api", "build_index": "api", "open_searcher": "api", "evaluate": "api",
        "Searcher": "api", "Hit": "api", "write_trec_run": "runs", "read_trec_run": "runs",
        "Side": "modeling.side"}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'pyserini_moe' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pyserini_moe.{_API[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
