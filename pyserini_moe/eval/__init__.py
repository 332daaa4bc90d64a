"""Evaluation: trec_eval-compatible metrics via ranx (:mod:`.metrics`), and its command line.

``python -m pyserini_moe.eval --run RUN --qrels scifact:test`` prints nDCG@10, recall@100/1000,
MRR@10 and MAP; several runs are compared with paired significance tests against a baseline.
Kept import-free so that ``--help`` stays instant; ranx and the JVM load only when needed.
"""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "answer_accuracy": "metrics",
    "evaluate": "metrics",
    "evaluate_per_query": "metrics",
    "format_table": "metrics",
    "mean_values": "metrics",
    "parse_metric": "metrics",
    "check_coverage": "metrics",
    "read_per_query": "per_query",
    "write_per_query": "per_query",
    "EQUIVALENCE_MARGIN": "seeds",
    "SeedComparison": "seeds",
    "SeedSummary": "seeds",
    "TOLERANCE_RULE": "seeds",
    "compare_matched": "seeds",
    "equivalence_verdict": "seeds",
    "holm": "seeds",
    "no_worse_verdict": "seeds",
    "tolerance_from_spread": "seeds",
})
