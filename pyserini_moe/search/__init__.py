"""Searchers over our indexes; ``python -m pyserini_moe.search`` is the command line."""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "SEARCH_PART": "dispatch",
    "SearchSettings": "dispatch",
    "TopicSearcher": "dispatch",
    "held_query_cuts": "dispatch",
    "open_any": "dispatch",
    "search_topics": "dispatch",
    "SEARCHERS": "encoded",
    "ExpertFusionSearcher": "experts",
    "came_sum": "fusion",
    "FUSIONS": "fusion",
    "hybrid_fusion": "hybrid",
    "Hit": "base",
    "Searcher": "base",
})
