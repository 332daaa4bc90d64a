"""Searchers over our indexes; ``python -m pyserini_moe.search`` is the command line."""
