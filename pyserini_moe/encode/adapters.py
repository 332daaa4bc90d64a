"""Pyserini's ``DocumentEncoder`` / ``QueryEncoder`` over our models, one pair per representation.

Thin on purpose: each is the representation's conversion (:mod:`.dense`, :mod:`.impact`,
:mod:`.multivector`) on Pyserini's base class, so Pyserini's indexers and searchers take it.
Importing this module imports Pyserini, so it bootstraps the JVM first; our own indexer encodes
passages through the Pyserini-free ``*PassageEncoder`` classes instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pyserini_moe import _java

_java.bootstrap()

from pyserini.encode import DocumentEncoder, QueryEncoder  # noqa: E402

from pyserini_moe.encode import QUERIES_CUT_AT  # noqa: E402
from pyserini_moe.encode.common import ModelAdapter, first_non_finite  # noqa: E402
from pyserini_moe.encode.dense import Dense, DensePassageEncoder  # noqa: E402
from pyserini_moe.encode.impact import (  # noqa: E402
    DEFAULT_QUANTIZATION,
    DEFAULT_QUERY_MAX_TERMS,
    Impact,
    ImpactPassageEncoder,
    quantize,
)
from pyserini_moe.encode.multivector import MultiVector, MultiVectorPassageEncoder  # noqa: E402
from pyserini_moe.encode.pipeline import encode_stream  # noqa: E402
from pyserini_moe.errors import UserError  # noqa: E402
from pyserini_moe.modeling.base import Encoded, Side, TextEncoder  # noqa: E402

log = logging.getLogger(__name__)


class ModelQueryEncoder(ModelAdapter, QueryEncoder):
    """Pyserini ``QueryEncoder`` over the query side of a model; ``encode_batch`` lets Pyserini's
    searchers encode a batch of queries at once. Without ``max_length`` queries are cut where
    the model was trained to cut them, as in ``search`` and sentence-transformers."""

    side = Side.QUERY

    def __init__(self, model: TextEncoder | str, device: str | None = None,
                 max_length: int | None = None) -> None:
        QueryEncoder.__init__(self)
        self._init_model(model, device, max_length)
        self.has_model = True
        self.queries_cut = 0  # queries longer than max_length so far (their tail is not read)

    def encode(self, query: str, **kwargs: Any) -> Any:
        return self.encode_batch([query])[0]

    def encode_batch(self, queries: list[str]) -> Any:
        queries = list(queries)
        self._count_cut(queries)
        return self._finish(queries, self.model.encode(queries, Side.QUERY, self.max_length,
                                                       only=self.representation))

    def encode_batches(self, batches: Iterable[list[str]]) -> Iterator[Any]:
        """:meth:`encode_batch` of each batch, in order, the next batches tokenized in the
        background while the model encodes (``encode_stream``: the same vectors bit for bit)."""
        batches = [list(b) for b in batches]
        # counted up front, so the warning comes before the encoding (the stream's thread
        # tokenizes with a copy of the tokenizer: this unpadded call cannot reach its batches)
        for queries in batches:
            self._count_cut(queries)
        stream = encode_stream(self.model, batches, Side.QUERY, self.max_length,
                               only=self.representation)
        for queries, out in stream:
            yield self._finish(queries, out)

    def _finish(self, queries: list[str], out: Encoded) -> Any:
        """What a batch's encoding leaves to do, encoded alone or streamed: refuse broken
        vectors, convert to Pyserini's form."""
        self._refuse_non_finite(out, queries)
        return self.convert(out)

    def _refuse_non_finite(self, out: Encoded, queries: list[str]) -> None:
        """A query side with broken weights encoded NaN: the search wrote an empty run and
        exited 0, and ``encode_queries`` wrote NaN vectors (the indexer checks passages)."""
        row = first_non_finite(out, [self.representation])
        if row is not None:
            raise UserError(f"query {queries[row][:60]!r} encodes to NaN or infinite values (the "
                            "model's weights are broken: a diverged training?)")

    def _count_cut(self, queries: list[str]) -> None:
        """Say (once per encoder, then keep counting) when a query is longer than max_length."""
        # one token past the cut tells a cut query (counting the whole of a 200k-character query
        # was slow, and transformers warned of its length beside this notice)
        lengths = self.model.tokenizer(queries, truncation=True,
                                       max_length=self.max_length + 1)["input_ids"]
        cut = sum(len(ids) > self.max_length for ids in lengths)
        if cut and not self.queries_cut:
            log.warning("queries longer than %d tokens are cut (--query-max-length); the first "
                        "batch has %d", self.max_length, cut,
                        extra={QUERIES_CUT_AT: self.max_length})
        self.queries_cut += cut


class PrecomputedQueryEncoder(QueryEncoder):
    """Queries encoded ahead of time (``search --encoded-queries``), looked up by their text as
    Pyserini's own ``QueryEncoder`` and ``CachedDataQueryEncoder`` do: no model is loaded."""

    def __init__(self, vectors: dict[str, Any], source: str, dense: bool) -> None:
        QueryEncoder.__init__(self)
        self.vectors, self.source, self.dense = vectors, source, dense

    def encode(self, query: str, **kwargs: Any) -> Any:
        try:
            return self.vectors[query.strip()]
        except KeyError:
            raise UserError(f"{self.source} holds no encoding of the query {query[:60]!r}: encode "
                            "these topics with `python -m pyserini_moe.encode_queries`") from None

    def encode_batch(self, queries: list[str]) -> Any:

        vectors = [self.encode(query) for query in queries]
        return np.stack(vectors) if self.dense else vectors


class DenseDocumentEncoder(DensePassageEncoder, DocumentEncoder):
    """Passages -> float32 [B, H] for Pyserini's Faiss indexer."""


class DenseQueryEncoder(Dense, ModelQueryEncoder):
    """Queries -> float32 vectors for ``FaissSearcher``."""


class ImpactDocumentEncoder(ImpactPassageEncoder, DocumentEncoder):
    """Passages -> ``{token: int}`` vectors for a ``JsonVectorCollection``."""


class ImpactQueryEncoder(Impact, ModelQueryEncoder):
    """Queries -> ``{token: int}``, the form ``LuceneImpactSearcher`` sends to Lucene; at most
    ``max_terms`` terms (the heaviest) per query, so Lucene accepts every query."""

    def __init__(self, model: TextEncoder | str, device: str | None = None,
                 max_length: int | None = None, quantization: int = DEFAULT_QUANTIZATION,
                 max_terms: int = DEFAULT_QUERY_MAX_TERMS) -> None:
        super().__init__(model, device, max_length)
        self._init_impact(quantization)
        if max_terms < 1:
            raise UserError("max_terms must be >= 1")
        self.max_terms = max_terms
        self.queries = self.terms = 0  # encoded so far: what a search reports as terms per query

    def encode_batch(self, queries: list[str]) -> list[dict[str, int]]:
        """One query at a time, so a query has one encoding wherever it is encoded: padding a
        batch changes a weight's last bits, and quantising can round such a weight the other
        way (``encode_queries`` and ``search`` once differed by one unit so). Pyserini's
        ``LuceneImpactSearcher`` encodes one query at a time too."""
        one = super().encode_batch  # (a comprehension has no zero-argument super())
        return [vector for query in queries for vector in one([query])]

    def encode_batches(self, batches: Iterable[list[str]]) -> Iterator[list[dict[str, int]]]:
        """:meth:`encode_batch` of each batch: one query at a time too, streamed."""
        batches = [list(b) for b in batches]
        singles = super().encode_batches([query] for b in batches for query in b)
        for queries in batches:
            yield [next(singles)[0] for _ in queries]

    def convert(self, out: Encoded) -> list[dict[str, int]]:
        vectors = quantize(out.sparse, self.vocab, self.quantization, self.max_terms)
        self.queries += len(vectors)
        self.terms += sum(map(len, vectors))
        return vectors


class MultiVectorDocumentEncoder(MultiVectorPassageEncoder, DocumentEncoder):
    """Passages -> list of [L_i, D] token matrices."""


class MultiVectorQueryEncoder(MultiVector, ModelQueryEncoder):
    """Queries -> [L_q, D] token matrices."""
