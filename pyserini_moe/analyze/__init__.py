"""Analyses of Mixture-of-Experts retrievers, one module per system, each adding its subcommands
to ``python -m pyserini_moe.analyze`` (:mod:`pyserini_moe.cli.analyze`):

* :mod:`~pyserini_moe.analyze.taser` ``routing``: expert shares per side and specialised block;
* :mod:`~pyserini_moe.analyze.sbmoe` ``experts`` (SB-MoE table III) and ``expert-count``
  (figure 2);
* :mod:`~pyserini_moe.analyze.cotmote` ``divergence``: KL / JS between query and passage
  embeddings, t-SNE;
* :mod:`~pyserini_moe.analyze.came` ``came``: CAME's experts vs fusion, RBO overlap, figure 4's
  case study.
"""

from pyserini_moe._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "EXPERTS": "came",
    "emit": "common",
    "figure": "common",
    "save_png": "common",
})
