"""A multi-vector index's ``--faiss-params`` (:mod:`pyserini_moe.index.multivector`):
parameters of another index form, and values that are not positive integers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyserini_moe.errors import UserError
from pyserini_moe.index.multivector import MultiVectorIndex, MultiVectorIndexWriter

pytestmark = pytest.mark.usefixtures("one_thread")

DIM = 8


# --- multi-vector --faiss-params ------------------------------------------------------------------


@pytest.fixture(scope="module")
def mv(tmp_path_factory) -> dict[str, Path]:
    """Tiny multi-vector indexes of each Faiss form (random token vectors)."""
    root = tmp_path_factory.mktemp("mv")
    rng = np.random.default_rng(0)
    docs = {f"d{i}": rng.standard_normal((12, DIM)).astype(np.float32) for i in range(60)}
    indexes = {}
    for spec in ("flat", "hnsw8", "ivf4,flat"):
        with MultiVectorIndexWriter(root / spec, DIM, {"encoder": "test"}, faiss_index=spec,
                                    progress=False) as writer:
            writer.add_batch(list(docs), list(docs.values()))
        indexes[spec] = root / spec
    return indexes


@pytest.mark.parametrize(("spec", "params", "said"), [
    ("hnsw8", "nprobe=4", r"'nprobe' is not one of its parameters: this HNSW index \(hnsw8\) "
                          r"takes efSearch=N"),
    ("ivf4,flat", "efSearch=64", r"'efSearch' is not one .*IVF index \(ivf4,flat\) takes "
                                 r"nprobe=N"),
    ("flat", "nprobe=4", r"this flat index \(flat\) takes no parameters"),
    ("hnsw8", "efSearch=8,efSearch=9", "'efSearch' is given twice"),
])
def test_a_parameter_of_another_index_form_is_one_line(mv, spec, params, said) -> None:
    with pytest.raises(UserError, match=said):
        MultiVectorIndex(mv[spec], faiss_params=params)


@pytest.mark.parametrize("value", ["nan", "-7", "0", "1.5", "", "inf", "99999999999"])
def test_a_faiss_value_that_is_not_a_positive_integer_is_refused(mv, value) -> None:
    with pytest.raises(UserError, match=rf"efSearch must be a positive integer .*got '{value}'"):
        MultiVectorIndex(mv["hnsw8"], faiss_params=f"efSearch={value}")
    with pytest.raises(UserError, match=rf"nprobe must be a positive integer .*got '{value}'"):
        MultiVectorIndex(mv["ivf4,flat"], faiss_params=f"nprobe={value}")


def test_valid_faiss_parameters_work_as_before(mv) -> None:
    import faiss

    q = np.random.default_rng(1).standard_normal((4, DIM)).astype(np.float32)
    given = MultiVectorIndex(mv["hnsw8"], faiss_params="efSearch=20")
    given.search(q, k=5, candidates_per_token=300)
    assert given.index.hnsw.efSearch == 20  # the user's value is kept, not raised
    default = MultiVectorIndex(mv["hnsw8"])
    default.search(q, k=5, candidates_per_token=300)
    assert default.index.hnsw.efSearch == 300  # Faiss's 16 is raised to the candidate depth
    assert faiss.extract_index_ivf(
        MultiVectorIndex(mv["ivf4,flat"], faiss_params="nprobe=3").index).nprobe == 3
    assert faiss.extract_index_ivf(MultiVectorIndex(mv["ivf4,flat"]).index).nprobe == 2
    assert len(MultiVectorIndex(mv["flat"], faiss_params="").search(q, k=5)) == 5


# --- a small index's k-means: one warning of ours, none of Faiss's lines ---------------------------


@pytest.mark.parametrize("kwargs", [{"faiss_index": "ivf4,pq4x4"}, {"compression": "pq4"}])
def test_a_small_sample_is_one_warning_not_a_line_per_clustering(tmp_path, capfd, caplog,
                                                                 kwargs) -> None:
    import logging

    rng = np.random.default_rng(1)
    docs = {f"d{i}": rng.standard_normal((12, DIM)).astype(np.float32) for i in range(30)}
    with caplog.at_level(logging.WARNING):
        with MultiVectorIndexWriter(tmp_path / "x", DIM, {"encoder": "test"}, progress=False,
                                    **kwargs) as writer:
            writer.add_batch(list(docs), list(docs.values()))
    assert "WARNING clustering" not in capfd.readouterr().err
    said = [r.getMessage() for r in caplog.records if "Faiss advises" in r.getMessage()]
    assert len(said) == 1 and "on 360 token vectors" in said[0]
