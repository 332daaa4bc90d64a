"""One vocabulary for what a model produces and the index that stores it, importable without
torch (the command lines build their choices from it before any model loads)."""

from __future__ import annotations

from enum import StrEnum


class Representation(StrEnum):
    """What a model produces (a field of :class:`Encoded`), and the kind of index that stores
    it: one name per idea, the retrieval layer's index kinds derive from it."""

    DENSE = "dense"    # one vector per text -> a Faiss index
    SPARSE = "sparse"  # vocabulary-sized term weights -> a Lucene impact index
    MULTI = "multi"    # one vector per token -> our multi-vector index (MaxSim)

    @property
    def index_kind(self) -> str:
        return _INDEX_KIND[self]

    @classmethod
    def of_index_kind(cls, kind: str) -> Representation:
        return next(r for r in cls if r.index_kind == kind)


_INDEX_KIND = {Representation.DENSE: "dense", Representation.SPARSE: "impact",
               Representation.MULTI: "multivector"}
REPRESENTATIONS = tuple(Representation)
INDEX_KINDS = tuple(r.index_kind for r in Representation)  # dense, impact, multivector

# The file every index folder records itself in (which kind, which encoder): its name is part of
# the vocabulary, read by the model loader, the corpus reader and the index layer alike.
INDEX_META_FILE = "pyserini_moe_index.json"

# CAME's three experts (section 3.2), each one representation of the model.
CAME_EXPERTS = {"lexical": Representation.SPARSE, "local": Representation.MULTI,
                "global": Representation.DENSE}
