"""Index builders (``python -m pyserini_moe.index``) and the metadata every index carries."""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "BuildSettings": "encoded",
    "build_indexes": "encoded",
    "read_meta": "meta",
    "IndexMeta": "meta",
    "build_bm25_index": "lucene",
})
