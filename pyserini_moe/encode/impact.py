"""Impact (learned sparse) representations, searched by Pyserini's ``LuceneImpactSearcher``.

Lucene stores impacts as integers: a weight of 0.4 would silently become 0. Both sides therefore
quantise explicitly with the same factor (``round(w * factor)``, terms rounding to 0 dropped),
and the factor is recorded in the index so queries always match their documents.

Queries keep at most ``max_terms`` terms: Anserini's ``SimpleImpactSearcher`` turns a query into
one Lucene clause per term, and Lucene refuses more than ``IndexSearcher.getMaxClauseCount()``
(1024 in Anserini 1.7.1, which never raises it). A lightly trained SPLADE emits thousands of
query terms; without the cap every query fails inside Lucene.
"""

from __future__ import annotations

import torch

from pyserini_moe.encode.common import PassageEncoder
from pyserini_moe.errors import UserError
from pyserini_moe.modeling.base import Encoded, Representation, TextEncoder
from pyserini_moe.runs import JAVA_INT_MAX

DEFAULT_QUANTIZATION = 100
DEFAULT_QUERY_MAX_TERMS = 1024  # Lucene's default max clause count, checked by ImpactSearcher


def quantize(weights: torch.Tensor, vocab: list[str], factor: int,
             max_terms: int | None = None) -> list[dict[str, int]]:
    """[B, V] non-negative weights -> one ``{token: int weight}`` per row, zeros dropped.

    With ``max_terms``, each row keeps its ``max_terms`` largest quantised weights; equal weights
    are kept in vocabulary order, so a query always yields the same terms.
    """
    q = torch.round(weights.float() * factor).cpu()
    if q.numel() and not float(q.max()) <= JAVA_INT_MAX:  # Lucene keeps each impact in a Java int
        raise UserError(f"--quantization {factor}: a term weight of {float(weights.max()):.4g} "
                        f"becomes {float(q.max()):.4g}, more than Lucene's int holds "
                        f"({JAVA_INT_MAX}); use a smaller factor")
    totals = q.sum(dim=-1) if q.numel() else q
    if totals.numel() and not float(totals.max()) <= JAVA_INT_MAX:  # Lucene's field length
        raise UserError(f"--quantization {factor}: a text's quantised term weights add up to "
                        f"{float(totals.max()):.4g}, more than Lucene's int holds for a field's "
                        f"length ({JAVA_INT_MAX}); use a smaller factor")
    q = q.to(torch.int64)
    out = []
    for row in q:
        idx = torch.nonzero(row > 0).flatten()
        terms = list(zip(idx.tolist(), row[idx].tolist()))  # in vocabulary order
        if max_terms is not None and len(terms) > max_terms:
            terms = sorted(terms, key=lambda t: -t[1])[:max_terms]  # stable sort: ties by id
        out.append({vocab[i]: w for i, w in terms})
    return out


def dequantize(vector: dict[str, int], factor: int) -> dict[str, float]:
    return {t: w / factor for t, w in vector.items()}


class Impact:
    representation = Representation.SPARSE

    def _init_impact(self, quantization: int) -> None:
        if not 1 <= quantization <= JAVA_INT_MAX:
            raise UserError(f"quantization factor must be from 1 to {JAVA_INT_MAX} (a Java int), "
                            f"got {quantization}")
        self.quantization = quantization
        tokenizer = self.model.tokenizer
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        # Lucene's pre-tokenized analyzer splits on whitespace: a token containing it would break.
        self.vocab = [t.replace(" ", "_") for t in vocab]

    def convert(self, out: Encoded) -> list[dict[str, int]]:
        return quantize(out.sparse, self.vocab, self.quantization)


class ImpactPassageEncoder(Impact, PassageEncoder):
    """Passages -> ``{token: int}`` vectors for a ``JsonVectorCollection``; with ``max_terms``,
    each keeps its heaviest ``max_terms`` terms (static pruning of the index)."""

    def __init__(self, model: TextEncoder | str, device: str | None = None,
                 max_length: int | None = None, quantization: int = DEFAULT_QUANTIZATION,
                 max_terms: int | None = None) -> None:
        super().__init__(model, device, max_length)
        self._init_impact(quantization)
        if max_terms is not None and max_terms < 1:
            raise UserError("--doc-max-terms must be >= 1")
        self.max_terms = max_terms

    def convert(self, out: Encoded) -> list[dict[str, int]]:
        return quantize(out.sparse, self.vocab, self.quantization, self.max_terms)
