"""The registry of model types: ``@register`` makes a class loadable by its ``model_type``, the
name a saved folder records (``pyserini_moe.json``), so that a folder rebuilds its architecture
without knowing the class's module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyserini_moe.errors import UserError

if TYPE_CHECKING:
    from pyserini_moe.modeling.base import RetrievalModel

_REGISTRY: dict[str, type[RetrievalModel]] = {}


def register(cls: type[RetrievalModel]) -> type[RetrievalModel]:
    """Class decorator: make ``cls`` loadable by its ``model_type``."""
    if cls.model_type in _REGISTRY:
        raise ValueError(f"model type {cls.model_type!r} registered twice")
    _REGISTRY[cls.model_type] = cls
    return cls


def model_types() -> list[str]:
    """Every registered model type, sorted (what a recipe's ``model.type`` may name)."""
    return sorted(_REGISTRY)


def model_class(model_type: str) -> type[RetrievalModel]:
    """The registered class of ``model_type`` (e.g. ``siamese`` -> SiameseBiEncoder)."""

    if model_type not in _REGISTRY:
        raise UserError(f"unknown model type {model_type!r}; known: {model_types()}")
    return _REGISTRY[model_type]


