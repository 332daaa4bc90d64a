"""``--hits`` beyond the documents an index holds is capped there for every searcher: Faiss sized
its result arrays by the hits asked for (1e8 hits on 5 documents took 4.3 GB); a depth asked
for explicitly is said once."""

from __future__ import annotations

import pytest
import torch

from pyserini_moe.search.dispatch import SearchSettings, TopicSearcher

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def dense(tiny_bert, tiny_corpus, tmp_path_factory):
    import pyserini_moe as pm
    from pyserini_moe.modeling import SiameseBiEncoder

    root = tmp_path_factory.mktemp("hits")
    torch.manual_seed(0)
    model = SiameseBiEncoder.from_backbone(tiny_bert, device="cpu").save(root / "m")
    return pm.build_index("dense", corpus=tiny_corpus, encoder=model, index=root / "dense")


def test_huge_hits_are_capped_at_the_index_size_and_said_once(dense) -> None:
    searcher = TopicSearcher(SearchSettings(retriever="dense", index=str(dense), hits=10**8,
                                            quiet=True))
    assert searcher.num_docs == 30
    outcome = searcher.search({"q1": "what is dense retrieval", "q2": "cat sat"})
    assert all(len(hits) == 30 for hits in outcome.run.values())
    said = [n for n in outcome.notices if "holds 30 documents" in n]
    assert len(said) == 1 and "--hits 100000000" in said[0]


def test_the_default_depth_is_capped_without_a_word(dense) -> None:
    outcome = TopicSearcher(SearchSettings(retriever="dense", index=str(dense), quiet=True)
                            ).search({"q1": "what is dense retrieval"})
    assert len(outcome.run["q1"]) == 30 and not outcome.notices
