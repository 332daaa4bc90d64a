"""Pyserini ``DocumentEncoder``/``QueryEncoder`` adapters around our models.

They pick the representation (dense, impact, multi-vector), tell the model which side it encodes
(MoE routers need it), and convert tensors to what Pyserini's indexers and searchers take.
Importing this package has no side effects: the adapters (:mod:`.adapters`) import Pyserini, and
with it the JVM, on first use of one of their names; encoding passages for a dense or
multi-vector index (``*PassageEncoder`` in :mod:`.dense`, :mod:`.multivector`) needs no Java.
"""

from __future__ import annotations

from pyserini_moe._lazy import lazy_names

#: The query encoders' logger, and the attribute of its cut-queries warning's record that holds
#: the query length: a command words that warning its own way (one line for all of a fused
#: search's experts, or all of analyze checkpoints' snapshots) without parsing its text.
QUERY_ENCODER_LOG = "pyserini_moe.encode.adapters"
QUERIES_CUT_AT = "queries_cut_at"

# The adapters import Pyserini, and with it the JVM, when one of their names is first used.
__all__, __getattr__, __dir__ = lazy_names(__name__, {
    **dict.fromkeys(["DenseDocumentEncoder", "DenseQueryEncoder", "ImpactDocumentEncoder",
                     "ImpactQueryEncoder", "MultiVectorDocumentEncoder",
                     "MultiVectorQueryEncoder"], "adapters"),
    "encode_stream": "pipeline",
})
