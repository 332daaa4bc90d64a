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

from pyserini_moe._lazy import lazy_names

__version__ = "0.1.0"

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "load_model": "api", "build_index": "api", "open_searcher": "api", "evaluate": "api",
    "Searcher": "api", "Hit": "api", "write_trec_run": "runs", "read_trec_run": "runs",
    "Side": "modeling.side"})
