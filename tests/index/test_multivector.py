"""Multi-vector (late-interaction) index: storage, exact MaxSim, candidate recall, atomicity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pyserini_moe.index.meta import IndexMismatchError, read_meta
from pyserini_moe.index.multivector import (
    VECTORS_FILE,
    MultiVectorIndex,
    MultiVectorIndexWriter,
    default_nprobe,
    faiss_factory_string,
    maxsim_numpy,
)

DIM = 32
ENCODER = {"encoder": "test/colbert-tiny", "max_length": 60}


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """300 docs of 20-60 tokens drawn from topic vocabularies, so neighbours mean something."""
    rng = np.random.default_rng(7)
    terms = _unit(rng.standard_normal((400, DIM)))
    topics = [rng.choice(400, 40, replace=False) for _ in range(15)]
    docs, doc_terms = {}, []
    for i in range(300):
        topic = topics[rng.integers(15)]
        chosen = rng.choice(topic, rng.integers(20, 61))
        doc_terms.append(chosen)
        docs[f"doc{i}"] = _unit(terms[chosen] + 0.3 * rng.standard_normal((len(chosen), DIM)))
    queries = {}
    for j in range(30):
        chosen = rng.choice(doc_terms[rng.integers(300)], 16)
        queries[f"q{j}"] = _unit(terms[chosen] + 0.3 * rng.standard_normal((16, DIM)))
    return docs, queries


def _build(path: Path, docs: dict[str, np.ndarray], **kwargs: object) -> Path:
    with MultiVectorIndexWriter(path, DIM, ENCODER, progress=False, **kwargs) as writer:
        ids = list(docs)
        writer.add(ids[0], docs[ids[0]])
        writer.add_batch(ids[1:], [docs[d] for d in ids[1:]])
    return path


@pytest.fixture(scope="module")
def flat_index(tmp_path_factory: pytest.TempPathFactory, corpus) -> Path:
    return _build(tmp_path_factory.mktemp("mv") / "flat", corpus[0])


def test_round_trip_and_fp16_storage(flat_index: Path, corpus) -> None:
    docs, _ = corpus
    searcher = MultiVectorIndex(flat_index)
    assert searcher.docids == list(docs)
    lengths = [len(v) for v in docs.values()]
    assert searcher.offsets.dtype == np.int64
    assert searcher.offsets.tolist() == np.concatenate(([0], np.cumsum(lengths))).tolist()
    assert isinstance(searcher.vectors, np.memmap) and searcher.vectors.dtype == np.float16
    for i, docid in enumerate(docs):
        stored = searcher.vectors[searcher.offsets[i]:searcher.offsets[i + 1]]
        np.testing.assert_array_equal(stored, docs[docid].astype(np.float16))
        assert (searcher.token2doc[searcher.offsets[i]:searcher.offsets[i + 1]] == i).all()
    n_tokens = sum(lengths)
    size = (flat_index / VECTORS_FILE).stat().st_size
    assert n_tokens * DIM * 2 <= size <= n_tokens * DIM * 2 + 256


def test_meta_records_encoder(flat_index: Path, corpus) -> None:
    meta = read_meta(flat_index)
    assert meta.kind == "multivector"
    assert meta.dim == DIM and meta.num_docs == 300 and meta.faiss == "flat"
    assert meta.n_tokens == sum(len(v) for v in corpus[0].values())
    assert meta.encoder == ENCODER["encoder"] and meta.max_length == 60


def test_exact_rescoring_equals_brute_force(flat_index: Path, corpus) -> None:
    docs, queries = corpus
    searcher = MultiVectorIndex(flat_index)
    half = {d: v.astype(np.float16) for d, v in docs.items()}
    for q in list(queries.values())[:5]:
        brute = {d: maxsim_numpy(q, v) for d, v in half.items()}
        for docid, score in searcher.exhaustive_search(q, k=300):
            assert score == pytest.approx(brute[docid], rel=1e-5, abs=1e-5)
        # pruned candidates (shallow depth) are still scored exactly
        for docid, score in searcher.search(q, k=50, candidates_per_token=4):
            assert score == pytest.approx(brute[docid], rel=1e-5, abs=1e-5)
        ranked = sorted(brute.values(), reverse=True)[:10]
        got = [s for _, s in searcher.exhaustive_search(q, k=10)]
        np.testing.assert_allclose(got, ranked, rtol=1e-5)


def test_candidate_recall_with_default_depth(flat_index: Path, corpus) -> None:
    searcher = MultiVectorIndex(flat_index)
    recalls = []
    for q in corpus[1].values():
        truth = {d for d, _ in searcher.exhaustive_search(q, k=100)}
        found = {d for d, _ in searcher.search(q, k=100)}
        recalls.append(len(truth & found) / len(truth))
    assert np.mean(recalls) >= 0.99


def test_batch_search_matches_search(flat_index: Path, corpus) -> None:
    searcher = MultiVectorIndex(flat_index)
    queries = dict(list(corpus[1].items())[:8])
    run = searcher.batch_search(queries, k=20, threads=2, query_batch=3, progress=False)
    assert list(run) == list(queries)
    for qid, q in queries.items():
        assert run[qid] == pytest.approx(dict(searcher.search(q, k=20)))


@pytest.mark.parametrize("spec", ["ivf16,pq8x4", "hnsw16"])
def test_approximate_faiss_options(tmp_path: Path, corpus, spec: str) -> None:
    index = _build(tmp_path / "approx", corpus[0], faiss_index=spec)
    assert read_meta(index).faiss == spec
    searcher = MultiVectorIndex(index, faiss_params="nprobe=4" if "ivf" in spec else None)
    hits = searcher.search(next(iter(corpus[1].values())), k=25)
    assert len(hits) == 25 and len({d for d, _ in hits}) == 25
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_ivf_and_hnsw_defaults_are_no_recall_cliff(tmp_path: Path, corpus) -> None:
    """Without --faiss-params an IVF index probes ceil(sqrt(nlist)) lists, not Faiss's 1, and an
    HNSW index searches with efSearch >= the candidate depth, not Faiss's 16; given parameters
    win."""
    import faiss

    assert [default_nprobe(n) for n in (1, 16, 4096, 4097)] == [1, 4, 64, 65]
    ivf = _build(tmp_path / "ivf", corpus[0], faiss_index="ivf16,pq8x4")
    assert faiss.extract_index_ivf(MultiVectorIndex(ivf).index).nprobe == 4
    given = MultiVectorIndex(ivf, faiss_params="nprobe=2")
    assert faiss.extract_index_ivf(given.index).nprobe == 2
    hnsw = MultiVectorIndex(_build(tmp_path / "hnsw", corpus[0], faiss_index="hnsw16"))
    hnsw.search(next(iter(corpus[1].values())), k=25, candidates_per_token=700)
    assert hnsw.index.hnsw.efSearch == 700
    fixed = MultiVectorIndex(tmp_path / "hnsw", faiss_params="efSearch=32")
    fixed.search(next(iter(corpus[1].values())), k=25, candidates_per_token=700)
    assert fixed.index.hnsw.efSearch == 32


def test_interrupted_build_leaves_nothing(tmp_path: Path, corpus) -> None:
    docs = corpus[0]
    target = tmp_path / "idx"
    with pytest.raises(KeyboardInterrupt):
        with MultiVectorIndexWriter(target, DIM, ENCODER, progress=False) as writer:
            writer.add("a", docs["doc0"])
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    # a failed rebuild keeps the previous index intact
    _build(target, {"doc1": docs["doc1"]})
    with pytest.raises(RuntimeError, match="boom"):
        with MultiVectorIndexWriter(target, DIM, ENCODER, progress=False) as writer:
            writer.add("b", docs["doc2"])
            raise RuntimeError("boom")
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]
    assert MultiVectorIndex(target).docids == ["doc1"]


def test_empty_index_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no documents"):
        with MultiVectorIndexWriter(tmp_path / "idx", DIM, ENCODER, progress=False):
            pass
    assert list(tmp_path.iterdir()) == []


def test_add_validation(tmp_path: Path) -> None:
    vecs = np.ones((3, DIM), dtype=np.float32)
    with pytest.raises(ValueError):
        with MultiVectorIndexWriter(tmp_path / "idx", DIM, ENCODER, progress=False) as writer:
            writer.add("a", vecs)
            with pytest.raises(ValueError, match="shape"):
                writer.add("b", np.ones((3, DIM + 1)))
            with pytest.raises(ValueError, match="duplicate"):
                writer.add("a", vecs)
            with pytest.raises(ValueError, match="no token vectors"):
                writer.add("c", np.ones((0, DIM)))
            with pytest.raises(ValueError, match="one line"):
                writer.add("d\ne", vecs)
            with pytest.raises(ValueError, match="docids"):
                writer.add_batch(["x", "y"], [vecs])
            raise ValueError("abort")
    with pytest.raises(ValueError, match="encoder"):
        MultiVectorIndexWriter(tmp_path / "idx", DIM, {"model": "x"})
    with pytest.raises(ValueError, match="reserved"):
        MultiVectorIndexWriter(tmp_path / "idx", DIM, {"encoder": "x", "dim": 3})


def test_query_dim_mismatch_and_kind_check(flat_index: Path, tmp_path: Path) -> None:
    searcher = MultiVectorIndex(flat_index)
    with pytest.raises(ValueError, match="shape"):
        searcher.search(np.ones((4, DIM + 1), dtype=np.float32))
    (tmp_path / "pyserini_moe_index.json").write_text(json.dumps({"kind": "dense"}))
    with pytest.raises(IndexMismatchError, match="dense"):
        MultiVectorIndex(tmp_path)


def test_factory_strings() -> None:
    assert faiss_factory_string("flat") == "Flat"
    assert faiss_factory_string("ivf1024,pq16") == "IVF1024,PQ16np"
    assert faiss_factory_string("IVF16,PQ8x4") == "IVF16,PQ8x4np"
    assert faiss_factory_string("HNSW32") == "HNSW32"
    with pytest.raises(ValueError, match="unknown"):
        faiss_factory_string("lsh")
