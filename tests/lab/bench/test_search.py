"""The bench's latency section end to end on a tiny model and corpus."""

from __future__ import annotations

import pytest


@pytest.mark.usefixtures("one_thread")
def test_latency_section_times_every_retriever_on_indexes_built_once(tiny_bench) -> None:
    """Every retriever is timed, CAME's three indexes come from one encoding pass, and the int8
    impact model is measured on its own index (int8 changes its vectors)."""
    result = tiny_bench("--sections", "latency")
    sections = result["sections"]
    assert {"onnx", "scaling", "approximate"}.isdisjoint(sections)
    assert {row["retriever"] for row in sections["latency"]} == {
        "bm25", "dense", "impact", "impact-q64", "impact-int8-q64", "multivector",
        "multivector-compressed", "dense+bm25", "came-fused"}
    sparsity = {row["index"].split()[0]: row for row in sections["sparsity"]}
    assert sparsity["impact"]["terms_per_query"] > 0 and sparsity["impact"]["postings"] > 0
    assert 0 < sparsity["impact-q64"]["terms_per_query"] <= 64
    assert 0 < sparsity["impact-int8-q64"]["terms_per_query"] <= 64  # on its own int8 index
    memory = {row["what"]: row for row in sections["memory and size"]}
    assert "impact-int8 index, 1000 docs" in memory
    assert "came indexes, 1000 docs" in memory  # the tiny corpus's 30, all of them, one pass
    storage = {row["index"]: row for row in sections["multivector storage"]}
    assert storage["multivector-compressed"]["vector_bytes_per_token"] == 66  # 2 + pq64
    assert storage["multivector"]["vector_bytes_per_token"] == 256  # float16 x 128
    assert all(row["bytes_per_token"] > 0 for row in storage.values())
    targets = {t["target"] for t in result["targets"]}
    assert {"multivector-compressed top-100 overlap with exact MaxSim >= 0.99",
            "impact-int8-q64 single-query latency within 2x BM25's"} <= targets
