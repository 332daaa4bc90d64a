"""The bench's encoding section end to end on tiny models: every model against its backbone and
the peer libraries on the same weights."""

from __future__ import annotations

import pytest


@pytest.mark.usefixtures("one_thread")
def test_encoding_section_compares_every_model_with_its_backbone(tiny_bench, capsys) -> None:
    result = tiny_bench("--sections", "encoding")
    rows = {row["model"]: row for row in result["sections"]["encoding"]}
    assert {"siamese", "taser", "cotmote", "sbmoe", "came"} <= set(rows)
    assert rows["siamese"]["vs_backbone"] == 1.0 and all(r["docs_per_s"] > 0 for r in rows.values())
    assert {t["target"].split()[0] for t in result["targets"]} == {"taser", "cotmote", "sbmoe",
                                                                   "came", "our"}
    # the peer: sentence-transformers' own encode on the same (Siamese) weights
    assert rows["sentence-transformers"]["docs_per_s"] > 0
    assert rows["sparse-encoder"]["docs_per_s"] > 0
    assert {"our plain bi-encoder encodes at >= 1.0x sentence-transformers' encode",
            "our SPLADE encodes at >= 1.0x sentence-transformers' SparseEncoder"} <= {
        t["target"] for t in result["targets"]}
    peers = {row["peer"]: row for row in result["sections"]["peers"]}
    # the same weights through the peer library: the same vectors
    assert peers["sentence-transformers"]["cosine"] > 0.9999
    assert peers["sparse-encoder"]["cosine"] > 0.9999
    # several representations: each alone too, against the plain model of its kind
    assert rows["cotmote:sparse"]["vs_plain_model"].endswith("(splade)")
    assert rows["came:multi"]["vs_plain_model"].endswith("(colbert)")
    assert {"cotmote (dense) encodes at >= 0.9x siamese", "cotmote (sparse) encodes at >= 0.9x "
            "splade", "came encodes at >= 0.55x its backbone"} <= {t["target"]
                                                                   for t in result["targets"]}
    assert "## targets" in capsys.readouterr().out
