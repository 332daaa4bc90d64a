"""Index builders (``python -m pyserini_moe.index``) and the metadata every index carries."""
