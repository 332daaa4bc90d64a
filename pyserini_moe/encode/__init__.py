"""Pyserini ``DocumentEncoder``/``QueryEncoder`` adapters around our models.

Thin on purpose: they pick the representation (dense, impact, multi-vector), tell the model which
side it encodes (MoE routers need it), and convert tensors to what Pyserini's indexers and
searchers take. Importing this package imports pyserini, so it bootstraps the JVM first.
"""

from pyserini_moe import _java

_java.bootstrap()

from pyserini_moe.encode.dense import DenseDocumentEncoder, DenseQueryEncoder  # noqa: E402
from pyserini_moe.encode.impact import ImpactDocumentEncoder, ImpactQueryEncoder  # noqa: E402
from pyserini_moe.encode.multivector import MultiVectorDocumentEncoder, MultiVectorQueryEncoder  # noqa: E402

__all__ = ["DenseDocumentEncoder", "DenseQueryEncoder", "ImpactDocumentEncoder",
           "ImpactQueryEncoder", "MultiVectorDocumentEncoder", "MultiVectorQueryEncoder"]
