"""Compressed multi-vector indexes (``compression="pq{m}"``): residual codes, PLAID-style stages,
and how close their rankings stay to exact MaxSim on the stored float16 vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import read_meta
from pyserini_moe.index.multivector import (
    FAISS_FILE,
    VECTORS_FILE,
    MultiVectorIndex,
    MultiVectorIndexWriter,
    maxsim_numpy,
)
from pyserini_moe.index.residual import (
    Compression,
    ResidualCodec,
    centroid_lists,
    default_nlist,
    parse_compression,
)

from .test_multivector import DIM, ENCODER, _build, corpus  # noqa: F401 - the fixture


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory, corpus) -> dict[str, Path]:  # noqa: F811
    root = tmp_path_factory.mktemp("residual")
    return {"exact": _build(root / "exact", corpus[0]),
            "pq32": _build(root / "pq32", corpus[0], compression="pq32")}


def test_codes_replace_the_vectors(indexes, corpus) -> None:  # noqa: F811
    folder = indexes["pq32"]
    meta = read_meta(folder)
    assert meta.compression == "pq32" and meta.bytes_per_token == 34
    assert meta.n_tokens == sum(len(v) for v in corpus[0].values())
    assert not (folder / VECTORS_FILE).exists() and not (folder / FAISS_FILE).exists()
    codes = np.load(folder / "codes.npy")
    assert codes.shape == (meta.n_tokens, 32) and codes.dtype == np.uint8
    index = MultiVectorIndex(folder)  # decoded tokens are close to the originals
    doc = index.docids.index("doc5")
    decoded = index.compressed.tokens(slice(int(index.offsets[doc]), int(index.offsets[doc + 1])))
    cosine = (decoded * corpus[0]["doc5"]).sum(1) / np.linalg.norm(decoded, axis=1)
    assert cosine.min() > 0.9


def test_rankings_stay_close_to_exact_maxsim(indexes, corpus) -> None:  # noqa: F811
    exact, compressed = MultiVectorIndex(indexes["exact"]), MultiVectorIndex(indexes["pq32"])
    overlaps = []
    for q in corpus[1].values():
        want = [d for d, _ in exact.exhaustive_search(q, k=10)]
        got = compressed.search(q, k=10)
        overlaps.append(len(set(want) & {d for d, _ in got}) / 10)
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
    assert np.mean(overlaps) >= 0.95  # 0.98 measured (pq16: 0.86, pq8: 0.65)


def test_scores_are_maxsim_of_the_decoded_tokens(indexes, corpus) -> None:  # noqa: F811
    index = MultiVectorIndex(indexes["pq32"])
    q = next(iter(corpus[1].values()))
    for docid, score in index.search(q, k=5):
        doc = index.docids.index(docid)
        tokens = index.compressed.tokens(slice(int(index.offsets[doc]), int(index.offsets[doc + 1])))
        assert score == pytest.approx(maxsim_numpy(q, tokens), rel=1e-5)
    batch = index.batch_search({"a": q}, k=5, progress=False)["a"]
    assert batch == dict(index.search(q, k=5))
    scattered = np.array([7, 0, 3, int(index.offsets[-1]) - 1])  # centroid scores + residuals
    np.testing.assert_allclose(index.compressed.similarities(q, scattered),
                               q @ index.compressed.tokens(scattered).T, rtol=1e-5, atol=1e-5)


def test_stage_parameters(indexes, corpus) -> None:  # noqa: F811
    q = next(iter(corpus[1].values()))
    wide = MultiVectorIndex(indexes["pq32"], faiss_params="nprobe=64,ndocs=300")
    every = MultiVectorIndex(indexes["pq32"]).exhaustive_search(q, k=10)
    assert wide.search(q, k=10) == every  # all centroids, every document re-scored
    with pytest.raises(UserError, match="nprobe=N and ndocs=N"):
        MultiVectorIndex(indexes["pq32"], faiss_params="efSearch=4")


def test_centroid_lists_and_sizes() -> None:
    offsets = np.array([0, 3, 5, 6])  # docs of 3, 2 and 1 tokens
    list_offsets, docs = centroid_lists(np.array([2, 0, 2, 1, 1, 2]), offsets, nlist=4)
    assert list_offsets.tolist() == [0, 1, 2, 4, 4]
    assert docs.tolist() == [0, 1, 0, 2]  # centroid 0: doc 0; 1: doc 1; 2: docs 0 and 2
    assert default_nlist(1_300_000) == 4096 and default_nlist(10) == 16
    codec = ResidualCodec.train(np.random.default_rng(0).standard_normal((512, 8)), 4,
                                Compression(2))
    assert codec.bytes_per_token == 4


def test_more_bits_a_code_make_a_finer_codec_in_packed_bytes() -> None:
    sample = np.random.default_rng(0).standard_normal((8192, 16)).astype(np.float32)
    errors, sizes = {}, {}
    for bits in (8, 12):
        codec = ResidualCodec.train(sample, 16, Compression(8, bits))
        cids, codes = codec.encode(sample[:500])
        assert codes.dtype == np.uint8 and codes.shape == (500, 8 * bits // 8)
        decoded = codec.decode(cids, codes)
        errors[bits] = float(((decoded - sample[:500]) ** 2).sum() / (sample[:500] ** 2).sum())
        sizes[bits] = codec.bytes_per_token
    assert sizes == {8: 2 + 8, 12: 2 + 12}
    assert errors[12] < 0.5 * errors[8]
    with pytest.raises(UserError, match="needs at least 4096 token vectors"):
        ResidualCodec.train(sample[:1000], 16, Compression(8, 12))


def test_bad_compression_settings(tmp_path: Path, corpus) -> None:  # noqa: F811
    assert parse_compression(None, DIM) is None and parse_compression("none", DIM) is None
    assert parse_compression("PQ8", DIM) == Compression(8, 8)
    assert parse_compression("pq8x12", DIM) == Compression(8, 12)
    for spec in ("pq5", "pq0", "pq64", "zip", "pq8x4", "pq8x17", "pq8x"):
        with pytest.raises(UserError, match="--compression"):
            parse_compression(spec, DIM)
    with pytest.raises(UserError, match="no effect on a compressed index"):
        MultiVectorIndexWriter(tmp_path / "x", DIM, ENCODER, faiss_index="hnsw8",
                               compression="pq8")


def test_centroid_interaction_in_blocks_and_small_corpora(indexes, corpus, tmp_path) -> None:  # noqa: F811
    search = MultiVectorIndex(indexes["pq32"]).compressed
    q = next(iter(corpus[1].values()))
    scores = q @ search.codec.centroids.T
    docs = np.arange(len(search.offsets) - 1)
    np.testing.assert_allclose(search._centroid_maxsim(scores, docs, chunk_tokens=50),
                               search._centroid_maxsim(scores, docs), rtol=1e-6)
    few = {"a": corpus[0]["doc1"], "b": corpus[0]["doc2"]}  # ~80 tokens: too few to train on
    with pytest.raises(UserError, match="at least 256 token vectors"):
        _build(tmp_path / "few", few, compression="pq8")
    assert not (tmp_path / "few").exists()


def test_a_compressed_build_streams(corpus, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    """Issue 36: the codec is trained on the first ``train_size`` tokens, every later token is
    compressed in chunks as it arrives; no float16 vector reaches the disk and memory holds at
    most the sample or a chunk (plus one document); the rankings stay those of exact MaxSim."""
    from pyserini_moe.index import multivector

    docs, queries = corpus
    opened, most = [], [0]
    appender = multivector._NpyAppender.__init__
    monkeypatch.setattr(multivector._NpyAppender, "__init__",
                        lambda self, path, *a: opened.append(path.name) or appender(self, path, *a))
    take = MultiVectorIndexWriter._take

    def watched(self, tokens):
        take(self, tokens)
        most[0] = max(most[0], self._pending_tokens)
    monkeypatch.setattr(MultiVectorIndexWriter, "_take", watched)
    total = sum(len(v) for v in docs.values())
    sample, chunk = total // 4, total // 10
    folder = _build(tmp_path / "streamed", docs, compression="pq32", train_size=sample,
                    add_chunk=chunk, expected_docs=len(docs))
    assert VECTORS_FILE not in opened and "token2doc.npy" not in opened
    longest = max(len(v) for v in docs.values())
    assert most[0] < max(sample, chunk) + longest
    meta = read_meta(folder)
    assert meta.n_tokens == total
    assert meta.nlist == min(default_nlist(total), sample)  # estimated from the sample
    exact, streamed = MultiVectorIndex(_build(tmp_path / "exact", docs)), MultiVectorIndex(folder)
    overlaps = [len({d for d, _ in exact.exhaustive_search(q, k=10)}
                    & {d for d, _ in streamed.search(q, k=10)}) / 10 for q in queries.values()]
    assert np.mean(overlaps) >= 0.9
