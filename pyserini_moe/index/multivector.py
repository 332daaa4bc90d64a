"""Late-interaction (ColBERT-style) indexes: token-embedding matrices searched with MaxSim.

Pyserini and Anserini have no multi-vector retrieval, so this is ours, built on Faiss. It knows
nothing about models: a document is an ``[L, dim]`` matrix of token vectors, a query too, and
the score is MaxSim (for each query token the best dot product with any document token, summed).

On disk an index folder holds:

- ``vectors.npy``  all token vectors, float16, ``[n_tokens, dim]``, memory-mapped when searching
  (a corpus's token matrix is often larger than RAM, so it is streamed to disk while indexing);
- ``token2doc.npy`` int32 ``[n_tokens]``: the document number each token belongs to;
- ``offsets.npy``  int64 ``[n_docs + 1]``: document ``i`` owns tokens ``offsets[i]:offsets[i+1]``;
- ``docids.txt``   one docid a line, in document-number order;
- ``tokens.faiss`` a Faiss inner-product index over all token vectors (candidate generation);
- ``pyserini_moe_index.json`` which encoder built it (see :mod:`pyserini_moe.index.meta`).

With ``compression="pq{m}"`` (or ``"pq{m}x{bits}"``) the vectors, the token map and the Faiss
index give way to residual codes (``2 + m * bits / 8`` bytes a token instead of ``2 * dim``) and
PLAID-style search stages: see :mod:`pyserini_moe.index.residual`. Such a build streams: the
codec is trained on a sample taken first, the corpus's first ``train_size`` tokens (262,144 by
default, ~2,000 SciFact passages at 128 tokens), and every later token is compressed as it
arrives, in chunks of ``add_chunk``; nothing but the codes reaches the disk, and memory holds the
sample or one chunk. The number of centroids is chosen as ``default_nlist`` of the corpus's
estimated tokens: the sample's tokens per document times ``expected_docs`` (the indexer passes
the corpus's size; without it, the sample's own count, fewer centroids). A corpus smaller than
the sample is compressed at the end, its codec trained on all of it.

Search is two-stage, like ColBERT v1: every query token fetches its nearest document tokens from
Faiss, their documents are the candidates, and the candidates are re-scored with *exact* MaxSim
over all their tokens (float32 arithmetic on the stored float16 vectors).
"""

from __future__ import annotations

import math
import os
import re
from array import array
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import faiss
import numpy as np
from tqdm.auto import tqdm

from pyserini_moe.errors import UserError, library_write
from pyserini_moe.index.meta import (
    IndexMeta,
    IndexMismatchError,
    check_kind,
    check_unique_ids,
    write_meta,
)
from pyserini_moe.index.residual import (
    CODES_FILE,
    LIST_DOCS_FILE,
    LIST_OFFSETS_FILE,
    TOKEN_CENTROIDS_FILE,
    CompressedSearch,
    ResidualCodec,
    centroid_lists,
    default_nlist,
    doc_blocks,
    parse_compression,
    quiet_clustering,
    warn_few_points,
)
from pyserini_moe.io import atomic_path, load_array, reading
from pyserini_moe.runs import JAVA_INT_MAX, Run

KIND = "multivector"
VECTORS_FILE = "vectors.npy"
TOKEN2DOC_FILE = "token2doc.npy"
OFFSETS_FILE = "offsets.npy"
DOCIDS_FILE = "docids.txt"
REBUILD = "rebuild the index"
FAISS_FILE = "tokens.faiss"

#: Floor on the Faiss neighbours fetched per query token when ``candidates_per_token`` is not
#: given; the default depth is ``max(k, MIN_CANDIDATES_PER_TOKEN)``. Measured on clustered
#: synthetic ColBERT-like data (20k docs, 1.6M tokens, 128 dims, Zipfian shared vocabulary,
#: 32-token queries, flat Faiss): depth 256 recovered 98.1% of the exhaustive MaxSim top-100,
#: 512 recovered 99.9% (worst query 98%), 1024 recovered 100%.
MIN_CANDIDATES_PER_TOKEN = 512


def default_nprobe(nlist: int) -> int:
    """IVF lists probed per query token when ``--faiss-params`` does not say: ceil(sqrt(nlist)),
    the usual Faiss starting point (64 of 4,096 lists). Faiss's own default, 1, scans 1/nlist of
    the tokens and silently loses most of the candidates MaxSim needs."""
    return max(1, math.ceil(math.sqrt(nlist)))


def check_offsets(path: Path, offsets: np.ndarray, tokens: int) -> None:
    """Refuse document offsets that do not start at 0, fall anywhere, or end elsewhere than at
    the ``tokens`` token vectors: a well-formed file with such values would slice the wrong
    tokens for a document and score silently wrong. One vectorised pass, cheap at load."""
    if (offsets.ndim != 1 or offsets[0] != 0 or bool(np.any(np.diff(offsets) < 0))
            or offsets[-1] != tokens):
        raise IndexMismatchError(f"{path}: offsets out of order, or not from 0 to the {tokens} "
                                 "token vectors; the index is damaged: rebuild it")


def default_candidates_per_token(k: int) -> int:
    """Candidate depth for a top-``k`` search: at least ``k`` and at least 512 (see above)."""
    return max(k, MIN_CANDIDATES_PER_TOKEN)


_RESERVED_META = frozenset({"kind", "created_by", "dim", "num_docs", "n_docs", "n_tokens",
                            "faiss", "compression", "nlist", "bytes_per_token"})
#: Compressed indexes: centroids probed per query token, and documents kept by centroid
#: interaction for re-scoring with decoded tokens (at least; 4 x k for larger k). Measured on
#: 1,000 SciFact passages (untrained ColBERT head, pq64, top 100): keeping 400 documents found
#: 95.7% of the exact top 100, 1,000 (all) 97.9%, the codec's own limit; nprobe 4 or 8 alike.
DEFAULT_NPROBE = 4
MIN_NDOCS = 256
# Our lower-case spelling -> Faiss index_factory spelling. PQ gets "np": polysemous codebook
# training only helps Hamming pre-filtering, which we never enable, and it is many times slower.
_FACTORY_PARTS = [
    (re.compile(r"flat"), "Flat"),
    (re.compile(r"ivf(\d+)"), r"IVF\1"),
    (re.compile(r"pq(\d+(?:x\d+)?)"), r"PQ\1np"),
    (re.compile(r"hnsw(\d+)"), r"HNSW\1"),
    (re.compile(r"sq(4|6|8|fp16)"), r"SQ\1"),
]


def _faiss_index(dim: int, factory: str, spec: str) -> Any:
    """The empty Faiss token index; a spec that does not fit ``dim`` (PQ's m must divide it) is
    one error line, raised when the writer is made, before the corpus is encoded further."""
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise UserError(f"--faiss {spec} does not fit the model's {dim}-dimensional token "
                        f"vectors ({_faiss_reason(e)})") from None


def _quiet_training(index: Any, points: int, spec: str) -> None:
    """An IVF index's k-means (and its PQ's) without Faiss's line per clustering: one warning of
    ours instead, when the sample is below Faiss's advice. Flat and HNSW train nothing."""
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:
        return
    clusterings, centroids = [ivf.cp], ivf.nlist
    if getattr(ivf, "pq", None) is not None:
        clusterings.append(ivf.pq.cp)
        centroids = max(centroids, ivf.pq.ksub)
    quiet_clustering(*clusterings)
    warn_few_points(points, centroids, f"--faiss {spec}")


def _faiss_reason(error: RuntimeError) -> str:
    """The sentence of a Faiss error, without its C++ file, line and function."""
    text = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    return text.split("' failed: ")[-1] if "' failed: " in text else text.split(": ", 2)[-1]


def maxsim_numpy(q: np.ndarray, d: np.ndarray) -> float:
    """Exact MaxSim of one query ``[Lq, D]`` and one document ``[Ld, D]``, in float32."""
    sims = np.asarray(q, dtype=np.float32) @ np.asarray(d, dtype=np.float32).T
    return float(sims.max(axis=1).sum())


def faiss_factory_string(spec: str) -> str:
    """Translate ``flat`` / ``ivf{nlist},pq{m}`` / ``hnsw{M}`` (any case) to factory syntax."""
    parts = []
    for part in spec.strip().lower().split(","):
        for pattern, repl in _FACTORY_PARTS:
            if pattern.fullmatch(part):
                parts.append(pattern.sub(repl, part))
                break
        else:
            raise UserError(f"unknown Faiss index component {part!r} in {spec!r}; expected "
                            "'flat', 'ivf{nlist},pq{m}[x{bits}]', 'ivf{nlist},flat', "
                            "'hnsw{M}' or 'sq8'")
    return ",".join(parts)


class _NpyAppender:
    """A ``.npy`` file written row block by row block, so the array never sits in RAM.

    The header is written with a zero row count and rewritten on close; NumPy pads the header so
    that the row count can grow without changing its length.
    """

    def __init__(self, path: Path, dtype: np.dtype, width: int | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.width = width
        self.rows = 0
        self._file: BinaryIO = open(path, "wb")
        self._header_len = self._write_header()

    def _write_header(self) -> int:
        shape = (self.rows,) if self.width is None else (self.rows, self.width)
        self._file.seek(0)
        np.lib.format.write_array_header_1_0(self._file, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
            "shape": shape})
        return self._file.tell()

    def append(self, block: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.rows += len(block)

    def close(self) -> None:
        """Fix the row count in the header (idempotent)."""
        if self._file.closed:
            return
        end = self._file.tell()
        if self._write_header() != self._header_len:
            raise RuntimeError("npy header changed length; cannot finalise in place")
        self._file.seek(end)
        self._file.close()


class MultiVectorIndexWriter:
    """Build a multi-vector index; use as a context manager.

    Vectors are appended to disk as float16 as they arrive; the Faiss index, token map and
    metadata are written when the ``with`` block ends. Everything happens in a temporary folder
    renamed to ``index_dir`` only on success, so an exception or interrupt leaves nothing there.

    ``faiss_index`` is ``"flat"`` (exact IndexFlatIP, default), ``"ivf{nlist},pq{m}"`` or
    ``"hnsw{M}"``; trained indexes are trained on ``train_size`` randomly sampled tokens.
    ``compression="pq{m}"`` stores residual codes instead (no Faiss token index).
    """

    def __init__(self, index_dir: str | os.PathLike, dim: int, encoder_meta: dict[str, Any],
                 faiss_index: str = "flat", *, train_size: int = 262_144,
                 add_chunk: int = 131_072, seed: int = 0, progress: bool = True,
                 overwrite: bool = True, compression: str | None = None,
                 expected_docs: int | None = None) -> None:
        if dim <= 0:
            raise UserError(f"dim must be positive, got {dim}")
        if "encoder" not in encoder_meta:
            raise UserError("encoder_meta needs an 'encoder' field so searches can be checked")
        clash = _RESERVED_META & encoder_meta.keys()
        if clash:
            raise UserError(f"encoder_meta may not set reserved fields {sorted(clash)}")
        IndexMeta(kind=KIND, **encoder_meta)  # another field than IndexMeta's: TypeError, now
        self.index_dir = Path(index_dir)
        self.dim = int(dim)
        self.encoder_meta = dict(encoder_meta)
        self.faiss_index = faiss_index
        self._factory = faiss_factory_string(faiss_index)  # fail before any indexing work
        _faiss_index(self.dim, self._factory, faiss_index)  # (and fits the dimensions)
        self.compression = compression
        self._pq = parse_compression(compression, self.dim)
        if self._pq is not None and self._factory != "Flat":
            raise UserError(f"--faiss {faiss_index} has no effect on a compressed index "
                            "(its candidates come from the residual codec's centroids)")
        self.train_size = train_size
        self.add_chunk = add_chunk
        self.seed = seed
        self.progress = progress
        self.overwrite = overwrite
        self.expected_docs = expected_docs
        self._atomic: Any = None
        self._seen: set[str] = set()
        self._offsets = array("q", [0])
        # compressed builds: tokens waiting for the codec (the sample) or for their chunk
        self._pending: list[np.ndarray] = []
        self._pending_tokens = 0
        self._codec: ResidualCodec | None = None
        self._coded: tuple[_NpyAppender, _NpyAppender] | None = None  # centroid ids, codes

    def __enter__(self) -> MultiVectorIndexWriter:
        self._atomic = atomic_path(self.index_dir, directory=True, overwrite=self.overwrite)
        self._tmp: Path = self._atomic.__enter__()
        try:
            if self._pq is None:
                self._vectors = _NpyAppender(self._tmp / VECTORS_FILE, np.float16, self.dim)
                self._token2doc = _NpyAppender(self._tmp / TOKEN2DOC_FILE, np.int32)
            self._docids = open(self._tmp / DOCIDS_FILE, "w", encoding="utf-8")
        except BaseException as err:
            self._atomic.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._close_files()
            if exc is None:
                self._finish()
        except BaseException as err:
            self._close_coded()
            self._atomic.__exit__(type(err), err, err.__traceback__)
            raise
        self._close_coded()
        self._atomic.__exit__(exc_type, exc, tb)  # renames on success, removes temp otherwise

    @property
    def n_docs(self) -> int:
        return len(self._offsets) - 1

    def add(self, docid: str, vectors: np.ndarray) -> None:
        """Append one document's ``[L, dim]`` token vectors (stored as float16)."""
        if self._atomic is None:
            raise RuntimeError("use MultiVectorIndexWriter as a context manager (with ... as w)")
        docid = str(docid)
        if not docid or "\n" in docid or "\r" in docid:
            raise UserError(f"docid must be non-empty and on one line, got {docid!r}")
        if docid in self._seen:
            raise UserError(f"duplicate docid {docid!r}")
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise UserError(f"document {docid!r}: expected vectors of shape [L, {self.dim}], "
                            f"got {list(vectors.shape)}")
        if len(vectors) == 0:
            raise UserError(f"document {docid!r} has no token vectors; MaxSim is undefined")
        half = vectors.astype(np.float16)
        if not np.isfinite(half).all():
            raise UserError(f"document {docid!r}: vectors are NaN/inf or overflow float16")
        if self._pq is None:
            self._vectors.append(half)
            self._token2doc.append(np.full(len(half), self.n_docs, dtype=np.int32))
        else:
            self._take(half)
        self._docids.write(docid + "\n")
        self._seen.add(docid)
        self._offsets.append(self._offsets[-1] + len(half))

    def add_batch(self, docids: list[str], vectors: list[np.ndarray]) -> None:
        """Append several documents; ``vectors[i]`` belongs to ``docids[i]``."""
        if len(docids) != len(vectors):
            raise UserError(f"{len(docids)} docids but {len(vectors)} vector matrices")
        for docid, mat in zip(docids, vectors):
            self.add(docid, mat)

    def _close_files(self) -> None:
        if self._pq is None:
            self._vectors.close()
            self._token2doc.close()
        self._docids.close()

    def _close_coded(self) -> None:
        for appender in self._coded or ():
            appender.close()

    # -- compressed builds: sample first, then compress as the tokens arrive ----------------
    def _take(self, tokens: np.ndarray) -> None:
        self._pending.append(tokens)
        self._pending_tokens += len(tokens)
        if self._codec is None and self._pending_tokens >= self.train_size:
            self._start_codec()
        elif self._codec is not None and self._pending_tokens >= self.add_chunk:
            self._flush()

    def _start_codec(self) -> None:
        """Train the codec on the tokens taken so far (the sample), then compress them."""
        sample = np.concatenate(self._pending).astype(np.float32)
        per_doc = len(sample) / max(1, self.n_docs)
        estimated = len(sample) if self.expected_docs is None else max(
            len(sample), round(per_doc * self.expected_docs))
        self._codec = ResidualCodec.train(sample, default_nlist(estimated), self._pq, self.seed)
        self._coded = (_NpyAppender(self._tmp / TOKEN_CENTROIDS_FILE, np.uint16),
                       _NpyAppender(self._tmp / CODES_FILE, np.uint8, self._codec.pq.code_size))
        self._flush()

    def _flush(self) -> None:
        if self._pending:
            cids, codes = self._codec.encode(np.concatenate(self._pending))
            self._coded[0].append(cids)
            self._coded[1].append(codes)
        self._pending, self._pending_tokens = [], 0

    def _finish(self) -> None:
        """Write offsets, build the Faiss index over the on-disk tokens, and record metadata."""
        if self.n_docs == 0:
            raise UserError(f"no documents were added; refusing to write an empty index at "
                            f"{self.index_dir}")
        offsets = np.frombuffer(self._offsets, dtype=np.int64)
        np.save(self._tmp / OFFSETS_FILE, offsets)
        if self._pq is not None:
            self._finish_compressed(offsets)
            return
        tokens = np.load(self._tmp / VECTORS_FILE, mmap_mode="r")
        index = _faiss_index(self.dim, self._factory, self.faiss_index)
        if not index.is_trained:
            sample = self._sample(tokens)
            _quiet_training(index, len(sample), self.faiss_index)
            try:
                index.train(sample)
            except RuntimeError as e:  # Faiss: fewer training points than lists or codes
                raise UserError(f"--faiss {self.faiss_index} cannot be trained on this index's "
                                f"{len(sample)} token vectors ({_faiss_reason(e)}): use fewer "
                                "IVF lists (about sqrt of the token count) or 'flat'") from None
        for start in tqdm(range(0, len(tokens), self.add_chunk), desc="faiss add", unit="chunk",
                          disable=not self.progress):
            index.add(np.asarray(tokens[start:start + self.add_chunk], dtype=np.float32))
        with library_write(self._tmp / FAISS_FILE):
            faiss.write_index(index, str(self._tmp / FAISS_FILE))
        write_meta(self._tmp, KIND, dim=self.dim, num_docs=self.n_docs, n_tokens=len(tokens),
                   faiss=self.faiss_index, **self.encoder_meta)

    def _sample(self, tokens: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        n = min(self.train_size, len(tokens))
        return np.asarray(tokens[np.sort(rng.choice(len(tokens), size=n, replace=False))],
                          dtype=np.float32)

    def _finish_compressed(self, offsets: np.ndarray) -> None:
        """The last chunk's codes (or, for a corpus smaller than the sample, the codec and all
        the codes), the centroids' document lists and the codec (see :mod:`.residual`)."""
        if self._codec is None:
            self._start_codec()
        self._flush()
        self._close_coded()
        nlist = len(self._codec.centroids)
        list_offsets, list_docs = centroid_lists(
            np.load(self._tmp / TOKEN_CENTROIDS_FILE, mmap_mode="r"), offsets, nlist)
        np.save(self._tmp / LIST_OFFSETS_FILE, list_offsets)
        np.save(self._tmp / LIST_DOCS_FILE, list_docs)
        self._codec.save(self._tmp)
        write_meta(self._tmp, KIND, dim=self.dim, num_docs=self.n_docs,
                   n_tokens=int(offsets[-1]),
                   faiss=None, compression=self.compression, nlist=nlist,
                   bytes_per_token=self._codec.bytes_per_token, **self.encoder_meta)


class MultiVectorIndex:
    """Search a multi-vector index: Faiss candidates, then exact MaxSim re-scoring.

    The token matrix is memory-mapped, so only the candidates' tokens are read. ``faiss_params``
    is passed to Faiss's ParameterSpace, e.g. ``"nprobe=32"`` (IVF) or ``"efSearch=256"`` (HNSW).
    Where it does not set them, an IVF index probes :func:`default_nprobe` lists and an HNSW index
    searches with efSearch at least the candidate depth (Faiss's defaults, nprobe 1 and efSearch
    16, would silently cut recall). A compressed index takes ``"nprobe=N,ndocs=N"`` instead
    (centroids probed per query token; documents kept for re-scoring, default
    :func:`default_ndocs`).
    """

    def __init__(self, index_dir: str | os.PathLike, faiss_params: str | None = None,
                 score_chunk_tokens: int = 262_144) -> None:
        self.index_dir = Path(index_dir)
        meta = check_kind(self.index_dir, KIND)
        if meta is None:
            raise IndexMismatchError(f"{self.index_dir} has no pyserini_moe_index.json; it is "
                                     "not a multivector index built by pyserini-moe")
        if meta.dim is None or meta.num_docs is None:
            raise IndexMismatchError(f"{self.index_dir}: its pyserini_moe_index.json records no "
                                     "dim or document count; the index is corrupt")
        self.meta: IndexMeta = meta
        self.dim = meta.dim
        self.offsets = load_array(self.index_dir / OFFSETS_FILE)
        with reading(self.index_dir / DOCIDS_FILE, "index's docid list", REBUILD):
            self.docids = (self.index_dir / DOCIDS_FILE).read_text(encoding="utf-8").split("\n")[:-1]
        if not len(self.docids) + 1 == len(self.offsets) == meta.num_docs + 1:
            raise IndexMismatchError(f"{self.index_dir}: docids/offsets/metadata disagree on the "
                                     "number of documents; the index is corrupt")
        check_unique_ids(self.index_dir / DOCIDS_FILE, self.docids)
        self.score_chunk_tokens = score_chunk_tokens
        self.compressed: CompressedSearch | None = None
        if meta.compression:
            self.compressed = CompressedSearch(self.index_dir, self.offsets)
            self._compressed_params = _compressed_params(faiss_params)
            check_offsets(self.index_dir / OFFSETS_FILE, self.offsets,
                          len(self.compressed.token_cids))
            return
        self.vectors = load_array(self.index_dir / VECTORS_FILE, mmap_mode="r")
        check_offsets(self.index_dir / OFFSETS_FILE, self.offsets, len(self.vectors))
        self.token2doc = load_array(self.index_dir / TOKEN2DOC_FILE, mmap_mode="r")
        with reading(self.index_dir / FAISS_FILE, "index's Faiss file", REBUILD):
            self.index = faiss.read_index(str(self.index_dir / FAISS_FILE))
        form = _index_form(self.index)
        params = _parse_params(faiss_params, f"{form} index ({meta.faiss or 'flat'})",
                               _FORM_PARAMS[form])
        ivf = _ivf(self.index)
        if ivf is not None and "nprobe" not in params:
            ivf.nprobe = default_nprobe(ivf.nlist)
        self._hnsw = getattr(self.index, "hnsw", None) if "efSearch" not in params else None
        if params:
            faiss.ParameterSpace().set_index_parameters(
                self.index, ",".join(f"{name}={value}" for name, value in params.items()))

    def query_matrix(self, q: np.ndarray) -> np.ndarray:
        """``q`` as the contiguous float32 [Lq, dim] matrix MaxSim reads, checked."""
        q = np.asarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim or len(q) == 0:
            raise UserError(f"expected query vectors of shape [Lq>0, {self.dim}], "
                            f"got {list(q.shape)}")
        return np.ascontiguousarray(q)

    def maxsim_docs(self, q: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Exact MaxSim of ``q`` against documents ``docs`` (sorted doc numbers), in float32."""
        scores = np.empty(len(docs), dtype=np.float32)
        for lo, hi, starts, lens, within in doc_blocks(self.offsets, docs,
                                                       self.score_chunk_tokens):
            total = int(lens.sum())
            if starts[-1] + lens[-1] - starts[0] == total:  # adjacent docs: one sequential read
                sims = self._similarities(q, slice(starts[0], starts[0] + total))
            else:
                sims = self._similarities(q, np.repeat(starts - within, lens) + np.arange(total))
            scores[lo:hi] = np.maximum.reduceat(sims, within, axis=1).sum(axis=0)
        return scores

    def _similarities(self, q: np.ndarray, index: np.ndarray | slice) -> np.ndarray:
        """``q`` against the token vectors at ``index`` [Lq, tokens], in float32: the stored
        vectors, or a compressed index's centroids and residual codes."""
        if self.compressed is not None:
            return self.compressed.similarities(q, index)
        return q @ np.asarray(self.vectors[index], dtype=np.float32).T

    def _compressed_candidates(self, q: np.ndarray, k: int) -> np.ndarray:
        nprobe, ndocs = self._compressed_params
        return self.compressed.candidates(q, nprobe or DEFAULT_NPROBE, ndocs or default_ndocs(k))

    def _top(self, docs: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Best ``k`` by score, ties by document number, so results are deterministic."""
        order = np.lexsort((docs, -scores))[:k]
        return [(self.docids[docs[i]], float(scores[i])) for i in order]

    def _token_search(self, q: np.ndarray, depth: int) -> np.ndarray:
        """Ids of each query token's ``depth`` nearest tokens [Lq, depth] (-1 where fewer)."""
        if self._hnsw is not None:  # efSearch below the depth returns fewer, worse neighbours
            self._hnsw.efSearch = max(self._hnsw.efSearch, depth)
        return self.index.search(q, depth)[1]

    def _candidates(self, token_ids: np.ndarray) -> np.ndarray:
        return np.unique(self.token2doc[token_ids[token_ids >= 0]])

    def search(self, query_vectors: np.ndarray, k: int = 1000,
               candidates_per_token: int | None = None) -> list[tuple[str, float]]:
        """Top-``k`` ``(docid, MaxSim)`` pairs, best first.

        Candidates are the documents of each query token's ``candidates_per_token`` nearest
        tokens (default :func:`default_candidates_per_token`); they are re-scored exactly.
        """
        q = self.query_matrix(query_vectors)
        if self.compressed is not None:
            docs = self._compressed_candidates(q, k)
        else:
            depth = candidates_per_token or default_candidates_per_token(k)
            docs = self._candidates(self._token_search(q, min(depth, self.index.ntotal)))
        return self._top(docs, self.maxsim_docs(q, docs), k)

    def exhaustive_search(self, query_vectors: np.ndarray, k: int = 1000,
                          progress: bool = False) -> list[tuple[str, float]]:
        """MaxSim against every document (verification, small corpora): exact on float16
        vectors, on the decoded tokens of a compressed index."""
        q = self.query_matrix(query_vectors)
        n_docs = len(self.docids)
        scores = np.empty(n_docs, dtype=np.float32)
        per_block = max(1, int(n_docs * self.score_chunk_tokens / max(1, self.offsets[-1])))
        for lo in tqdm(range(0, n_docs, per_block), desc="maxsim", unit="block",
                       disable=not progress):
            docs = np.arange(lo, min(lo + per_block, n_docs))
            scores[lo:lo + len(docs)] = self.maxsim_docs(q, docs)
        return self._top(np.arange(n_docs), scores, k)

    def batch_search(self, queries: dict[str, np.ndarray], k: int = 1000, threads: int = 1,
                     candidates_per_token: int | None = None, query_batch: int = 256,
                     progress: bool = True) -> Run:
        """Search many queries: one Faiss call per ``query_batch``, MaxSim on ``threads`` threads.

        Like Pyserini's ``batch_search``, ``threads`` also sets Faiss's OpenMP thread count.
        """
        if threads > 0:
            faiss.omp_set_num_threads(threads)
        qids = list(queries)
        mats = [self.query_matrix(queries[qid]) for qid in qids]
        if self.compressed is not None:
            return self._batch_compressed(qids, mats, k, threads, progress)
        run: Run = {}
        depth = min(candidates_per_token or default_candidates_per_token(k), self.index.ntotal)

        def rescore(q: np.ndarray, ids: np.ndarray) -> dict[str, float]:
            docs = self._candidates(ids)
            return dict(self._top(docs, self.maxsim_docs(q, docs), k))

        with ThreadPoolExecutor(max(1, threads)) as pool, \
                tqdm(total=len(qids), desc="multivector search", unit="q",
                     disable=not progress) as bar:
            for lo in range(0, len(qids), query_batch):
                batch = mats[lo:lo + query_batch]
                ids = self._token_search(np.concatenate(batch), depth)
                bounds = np.cumsum([0] + [len(q) for q in batch])
                hits = pool.map(rescore, batch,
                                [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
                for qid, result in zip(qids[lo:lo + query_batch], hits):
                    run[qid] = result
                    bar.update()
        return run

    def _batch_compressed(self, qids: list[str], mats: list[np.ndarray], k: int, threads: int,
                          progress: bool) -> Run:
        def one(q: np.ndarray) -> dict[str, float]:
            docs = self._compressed_candidates(q, k)
            return dict(self._top(docs, self.maxsim_docs(q, docs), k))

        with ThreadPoolExecutor(max(1, threads)) as pool, \
                tqdm(pool.map(one, mats), total=len(qids), desc="multivector search", unit="q",
                     disable=not progress) as results:
            return dict(zip(qids, results))


def default_ndocs(k: int) -> int:
    """Documents a compressed index re-scores for a top-``k`` search: 4k, at least 256."""
    return max(4 * k, MIN_NDOCS)


def _compressed_params(params: str | None) -> tuple[int | None, int | None]:
    """``"nprobe=N,ndocs=N"`` (either, any order) -> (nprobe, ndocs); None where not given."""
    found = _parse_params(params, "compressed multivector index", ("nprobe", "ndocs"))
    return found.get("nprobe"), found.get("ndocs")


#: The search parameters each form of token index takes (Faiss ParameterSpace names), every one a
#: count of at least 1. Faiss's own error for another form's name was a 33-line traceback, and it
#: took efSearch=nan, -7 or 0 without a word and returned a fraction of the hits.
_FORM_PARAMS: dict[str, tuple[str, ...]] = {"IVF": ("nprobe",), "HNSW": ("efSearch",),
                                            "flat": ()}


def _index_form(index: Any) -> str:
    """``IVF``, ``HNSW`` or ``flat`` (an exhaustive index, plain or scalar-quantised)."""
    if _ivf(index) is not None:
        return "IVF"
    return "HNSW" if getattr(index, "hnsw", None) is not None else "flat"


def _parse_params(params: str | None, form: str, names: tuple[str, ...]) -> dict[str, int]:
    """``"name=N,..."`` -> ``{name: N}``, checked before anything reaches Faiss: a name ``form``
    does not take, a value that is not a positive integer, or a name given twice is one line
    naming ``form`` and what it takes."""
    takes = (" and ".join(f"{n}=N" for n in names) + " (positive integers)" if names
             else "no parameters (it compares every token)")
    found: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in (params or "").split(","))):
        name, equals, value = (text.strip() for text in part.partition("="))
        if name not in names or name in found:
            reason = "is given twice" if name in found else "is not one of its parameters"
            raise UserError(f"--faiss-params {params!r}: {name!r} {reason}: this {form} takes "
                            f"{takes}")
        if not equals or not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= JAVA_INT_MAX:
            raise UserError(f"--faiss-params {params!r}: {name} must be a positive integer up "
                            f"to {JAVA_INT_MAX}, got {value!r}: this {form} takes {takes}")
        found[name] = int(value)
    return found


def _ivf(index: Any) -> Any:
    """The IVF part of a Faiss index (IVF-PQ, IVF-Flat), or None."""
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:  # not an IVF index
        return None
