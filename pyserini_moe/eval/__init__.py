"""Evaluation: trec_eval-compatible metrics via ranx (:mod:`.metrics`), and its command line.

``python -m pyserini_moe.eval --run RUN --qrels scifact:test`` prints nDCG@10, recall@100/1000,
MRR@10 and MAP; several runs are compared with paired significance tests against a baseline.
Kept import-free so that ``--help`` stays instant; ranx and the JVM load only when needed.
"""
