"""Retrieval models. Importing this package registers every model type, so that
:func:`~pyserini_moe.modeling.folder.load_model` can rebuild any saved folder by its type name.
"""

from pyserini_moe._lazy import lazy_names

# Importing each model's module registers its type.
from pyserini_moe.modeling import (  # noqa: F401
    biencoder,
    came,
    colbert,
    cotmote,
    sbmoe,
    splade,
    taser,
)

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "CameEncoder": "came", "ColbertEncoder": "colbert", "CotMoteEncoder": "cotmote",
    "DprBiEncoder": "biencoder", "Encoded": "base", "RetrievalModel": "base",
    "SbMoeEncoder": "sbmoe", "Side": "side", "SiameseBiEncoder": "biencoder",
    "SpladeEncoder": "splade", "TaserEncoder": "taser", "TextEncoder": "base",
    "load_model": "folder", "is_saved_model": "folder", "fingerprint": "folder",
    "model_types": "registry", "model_class": "registry", "load_encoder": "auto",
    "load_backbone": "backbone", "load_config": "backbone", "load_tokenizer": "backbone",
    "packaged_minilm": "backbone", "resolve_backbone": "backbone",
})
