"""Residual compression of token vectors for multi-vector indexes (PLAID's idea, Faiss's parts).

A token vector is stored as the number of its nearest k-means centroid plus a product-quantised
residual (``m`` codes of ``bits`` bits, 8 unless ``pq{m}x{bits}`` says otherwise): ``2 + m * bits
/ 8`` bytes where float16 needs ``2 * dim`` (256 at 128 dimensions). Search then runs in PLAID's
stages, in :class:`CompressedSearch`:

1. candidates: the documents with a token in one of each query token's ``nprobe`` best
   centroids (an inverted list centroid -> documents, built at indexing time);
2. centroid interaction: every candidate scored by MaxSim with each of its tokens replaced by
   its centroid (one ``[Lq, nlist]`` product, no decoding), keeping the best ``ndocs``;
3. re-scoring: MaxSim of those with their decoded tokens (centroid + residual).

The k-means and the product quantiser are Faiss's; what is ours is the layout and the stages.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import faiss
import numpy as np

from pyserini_moe.errors import UserError
from pyserini_moe.io import load_array, reading

CENTROIDS_FILE = "centroids.npy"
PQ_FILE = "residual.pq"
TOKEN_CENTROIDS_FILE = "token_centroids.npy"
CODES_FILE = "codes.npy"
LIST_OFFSETS_FILE = "centroid_offsets.npy"
LIST_DOCS_FILE = "centroid_docs.npy"
_SPEC = re.compile(r"pq(\d+)(?:x(\d+))?")
DEFAULT_BITS = 8
MAX_BITS = 16  # Faiss's ProductQuantizer packs codes of up to 16 bits
# Faiss's k-means advises this many training points a centroid, and prints a line to stderr for
# every clustering below it (one per PQ sub-quantiser: 17 lines for one build, --quiet or not)
POINTS_PER_CENTROID = 39

log = logging.getLogger(__name__)


def quiet_clustering(*clusterings: faiss.ClusteringParameters) -> None:
    """Faiss's own below-advice line off for these clusterings (it changes nothing else: the
    parameter only gates that line); :func:`warn_few_points` says it once instead."""
    for cp in clusterings:
        cp.min_points_per_centroid = 1


def warn_few_points(points: int, centroids: int, what: str) -> None:
    """One warning, ours, where Faiss would print one per clustering."""
    if points < POINTS_PER_CENTROID * centroids:
        log.warning("%s trains %d centroids on %d token vectors (Faiss advises %d): the "
                    "compression may be coarse on an index this small", what, centroids, points,
                    POINTS_PER_CENTROID * centroids)


class Compression(NamedTuple):
    """A ``pq{m}x{bits}`` setting: ``m`` sub-vectors, each a code of ``bits`` bits."""

    m: int
    bits: int = DEFAULT_BITS


def parse_compression(spec: str | None, dim: int) -> Compression | None:
    """``none`` / None -> None; ``pq{m}`` or ``pq{m}x{bits}`` -> (m, bits), m dividing ``dim``.

    More bits a sub-vector is the cheaper way to a finer codec: 2 ** bits centroids in each
    sub-space cut the quantisation error where more, shorter sub-vectors (a larger m) must split
    the dimensions."""
    if spec is None or spec.lower() == "none":
        return None
    match = _SPEC.fullmatch(spec.lower())
    m = int(match[1]) if match else 0
    bits = int(match[2] or DEFAULT_BITS) if match else 0
    if not 0 < m <= dim or dim % m or not DEFAULT_BITS <= bits <= MAX_BITS:
        raise UserError(f"--compression {spec!r}: expected 'none', 'pq{{m}}' or 'pq{{m}}x{{bits}}' "
                        f"with m dividing the {dim} dimensions and bits in {DEFAULT_BITS}-"
                        f"{MAX_BITS} (e.g. pq32, pq64, pq64x12)")
    return Compression(m, bits)


def default_nlist(n_tokens: int) -> int:
    """Centroids for ``n_tokens``: the power of two nearest 4 * sqrt(n), at least 16 and at most
    65,536 (token centroid numbers are stored as uint16). PLAID takes 16 * sqrt(n); a quarter of
    that keeps k-means on one CPU core to seconds for a 5k-document collection."""
    return int(min(65_536, max(16, 2 ** round(math.log2(4 * math.sqrt(max(1, n_tokens)))))))


class ResidualCodec:
    """Nearest centroid + product-quantised residual, ``m`` sub-vectors of ``bits`` bits."""

    def __init__(self, centroids: np.ndarray, pq: faiss.ProductQuantizer) -> None:
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.pq = pq
        self._assign = faiss.IndexFlatL2(self.centroids.shape[1])
        self._assign.add(self.centroids)

    @classmethod
    def train(cls, sample: np.ndarray, nlist: int, compression: Compression,
              seed: int = 0) -> ResidualCodec:
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        m, bits = compression
        if len(sample) < 2 ** bits:  # each sub-quantiser has 2 ** bits centroids to train
            raise UserError(f"--compression pq{m}x{bits} needs at least {2 ** bits} token "
                            f"vectors to train its codec; this index has {len(sample)}: use "
                            "fewer bits or build it uncompressed")
        nlist = min(nlist, len(sample))
        warn_few_points(len(sample), max(nlist, 2 ** bits), f"--compression pq{m}x{bits}")
        kmeans = faiss.Kmeans(sample.shape[1], nlist, niter=20, seed=seed,
                              max_points_per_centroid=256, min_points_per_centroid=1)
        kmeans.train(sample)
        codec = cls(kmeans.centroids, faiss.ProductQuantizer(sample.shape[1], m, bits))
        quiet_clustering(codec.pq.cp)
        cids = codec.assign(sample)
        codec.pq.train(np.ascontiguousarray(sample - codec.centroids[cids]))
        return codec

    @property
    def bytes_per_token(self) -> int:
        return 2 + self.pq.code_size

    def assign(self, x: np.ndarray) -> np.ndarray:
        return self._assign.search(np.ascontiguousarray(x, dtype=np.float32), 1)[1][:, 0]

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``x`` [n, dim] -> (centroid numbers [n] uint16, residual codes [n, code bytes]
        uint8, ``m * bits / 8`` bytes a token, packed by Faiss)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        cids = self.assign(x)
        codes = self.pq.compute_codes(np.ascontiguousarray(x - self.centroids[cids]))
        return cids.astype(np.uint16), codes

    def decode(self, cids: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return self.centroids[np.asarray(cids, dtype=np.int64)] + \
            self.pq.decode(np.ascontiguousarray(codes))

    def save(self, folder: Path) -> None:
        np.save(folder / CENTROIDS_FILE, self.centroids)
        faiss.write_ProductQuantizer(self.pq, str(folder / PQ_FILE))

    @classmethod
    def load(cls, folder: Path) -> ResidualCodec:
        with reading(folder / PQ_FILE, "index's product quantiser", "rebuild the index"):
            pq = faiss.read_ProductQuantizer(str(folder / PQ_FILE))
        return cls(load_array(folder / CENTROIDS_FILE), pq)


def centroid_lists(token_cids: np.ndarray, offsets: np.ndarray,
                   nlist: int) -> tuple[np.ndarray, np.ndarray]:
    """The inverted lists: for each centroid, the sorted numbers of the documents with a token
    assigned to it, as (list offsets [nlist + 1] int64, documents int32)."""
    docs = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    pairs = np.unique(np.asarray(token_cids, dtype=np.int64) * (len(offsets) - 1) + docs)
    cids, list_docs = np.divmod(pairs, len(offsets) - 1)
    list_offsets = np.searchsorted(cids, np.arange(nlist + 1)).astype(np.int64)
    return list_offsets, list_docs.astype(np.int32)


def doc_blocks(offsets: np.ndarray, docs: np.ndarray, chunk_tokens: int
               ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Consecutive blocks ``docs[lo:hi]`` of at most ``chunk_tokens`` tokens (one document at
    least), as (lo, hi, each document's first token, its length, its first column in the
    block): what keeps a [Lq, tokens] MaxSim block bounded."""
    lengths = offsets[docs + 1] - offsets[docs]
    ends = np.cumsum(lengths)
    lo = 0
    while lo < len(docs):
        done = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, done + chunk_tokens, "right")))
        lens = lengths[lo:hi]
        yield lo, hi, offsets[docs[lo:hi]], lens, np.concatenate(([0], np.cumsum(lens)[:-1]))
        lo = hi


class CompressedSearch:
    """The search stages over one compressed index's files (see the module docstring)."""

    def __init__(self, folder: Path, offsets: np.ndarray) -> None:
        self.codec = ResidualCodec.load(folder)
        self.offsets = offsets
        self.token_cids = load_array(folder / TOKEN_CENTROIDS_FILE, mmap_mode="r")
        self.codes = load_array(folder / CODES_FILE, mmap_mode="r")
        self.list_offsets = load_array(folder / LIST_OFFSETS_FILE)
        self.list_docs = load_array(folder / LIST_DOCS_FILE, mmap_mode="r")

    def tokens(self, index: np.ndarray | slice) -> np.ndarray:
        """Decoded float32 token vectors at ``index`` (a slice or token numbers)."""
        return self.codec.decode(self.token_cids[index], self.codes[index])

    def similarities(self, q: np.ndarray, index: np.ndarray | slice) -> np.ndarray:
        """``q @ tokens(index).T`` [Lq, tokens] without decoding the centroids: a token is its
        centroid plus its residual, so its score is the query's centroid score (one [Lq, nlist]
        product, then a gather) plus the score of the decoded residual. Materialising the
        centroid vectors cost as much as decoding the residuals."""
        cids = np.asarray(self.token_cids[index], dtype=np.int64)
        residuals = self.codec.pq.decode(np.ascontiguousarray(self.codes[index]))
        return (q @ self.codec.centroids.T)[:, cids] + q @ residuals.T

    def candidates(self, q: np.ndarray, nprobe: int, ndocs: int) -> np.ndarray:
        """Stages 1-2: the (sorted) numbers of the best ``ndocs`` documents by centroid
        interaction among those in the query tokens' ``nprobe`` best centroids."""
        scores = q @ self.codec.centroids.T  # [Lq, nlist]
        nprobe = min(nprobe, scores.shape[1])
        probed = np.unique(np.argpartition(-scores, nprobe - 1, axis=1)[:, :nprobe])
        docs = np.unique(np.concatenate(
            [self.list_docs[self.list_offsets[c]:self.list_offsets[c + 1]] for c in probed]))
        if len(docs) <= ndocs:
            return docs
        approx = self._centroid_maxsim(scores, docs)
        keep = np.argpartition(-approx, ndocs - 1)[:ndocs]
        return np.sort(docs[keep])

    def _centroid_maxsim(self, scores: np.ndarray, docs: np.ndarray,
                         chunk_tokens: int = 262_144) -> np.ndarray:
        """MaxSim of the query with each document's tokens replaced by their centroids, for
        blocks of documents of at most ``chunk_tokens`` tokens (a common centroid can make the
        candidates most of the corpus: the [Lq, tokens] block stays bounded)."""
        out = np.empty(len(docs), dtype=np.float32)
        for lo, hi, starts, lens, within in doc_blocks(self.offsets, docs, chunk_tokens):
            token_ids = np.repeat(starts - within, lens) + np.arange(int(lens.sum()))
            sims = scores[:, np.asarray(self.token_cids[token_ids], dtype=np.int64)]
            out[lo:hi] = np.maximum.reduceat(sims, within, axis=1).sum(axis=0)
        return out
