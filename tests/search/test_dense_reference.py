"""Our dense pipeline (adapters -> Faiss index -> Pyserini FaissSearcher) against an independent
reference: sentence-transformers' own ``encode`` and exact cosine search, on a SciFact subset."""

import json
import os

import numpy as np
import pytest

from pyserini_moe.paths import shared_data_root

pytestmark = pytest.mark.skipif(shared_data_root() is None, reason="needs ../shared/data")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    """40 SciFact test queries, their relevant documents and 200 others (seeded)."""
    from pyserini_moe.data.beir import BeirCollection

    scifact = BeirCollection.load("scifact")
    qrels = scifact.qrels("test")
    qids = sorted(qrels)[:40]
    relevant = {d for q in qids for d in qrels[q]}
    docs = list(scifact.corpus())
    rng = np.random.default_rng(0)
    others = [docs[i] for i in rng.permutation(len(docs)) if docs[i].id not in relevant][:200]
    keep = [d for d in docs if d.id in relevant] + others
    root = tmp_path_factory.mktemp("scifact-subset")
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n" for d in keep))
    queries = scifact.queries()
    (root / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in qids))
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{s}\n" for q in qids for d, s in qrels[q].items()))
    return root


def test_minilm_dense_matches_sentence_transformers(subset, tmp_path):
    from sentence_transformers import SentenceTransformer

    from pyserini_moe.data.beir import BeirCollection
    from pyserini_moe.data.topics import load_qrels, load_topics
    from pyserini_moe.eval.metrics import evaluate
    from pyserini_moe.index import __main__ as index_cli
    from pyserini_moe.modeling.backbone import packaged_minilm
    from pyserini_moe.runs import read_trec_run
    from pyserini_moe.search import __main__ as search_cli

    index, out = tmp_path / "index", tmp_path / "run.trec"
    assert index_cli.main(["--retriever", "dense", "--corpus", str(subset), "--index", str(index),
                           "--encoder", "all-minilm-l6-v2", "--device", "cpu", "--quiet"]) == 0
    assert search_cli.main(["--retriever", "dense", "--index", str(index), "--topics",
                            f"{subset}:test", "--output", str(out), "--hits", "100",
                            "--device", "cpu", "--quiet"]) == 0
    ours = read_trec_run(out)

    model = SentenceTransformer(str(packaged_minilm()), device="cpu")
    docs = list(BeirCollection.load(str(subset)).corpus())
    topics = load_topics(f"{subset}:test")
    d = model.encode([x.contents for x in docs], normalize_embeddings=True)
    q = model.encode(list(topics.values()), normalize_embeddings=True)
    scores = q @ d.T
    reference = {qid: {docs[i].id: float(row[i]) for i in np.argsort(-row)[:100]}
                 for qid, row in zip(topics, scores)}

    qrels = load_qrels(f"{subset}:test")
    a = evaluate(ours, qrels, ["ndcg@10", "recall@100"])
    b = evaluate(reference, qrels, ["ndcg@10", "recall@100"])
    assert a["ndcg@10"] == pytest.approx(b["ndcg@10"], abs=1e-3)
    assert a["recall@100"] == pytest.approx(b["recall@100"], abs=1e-3)
    for qid in list(topics)[:10]:  # same top-10 and scores, not just the same metric
        assert list(ours[qid])[:10] == list(reference[qid])[:10]
        np.testing.assert_allclose(list(ours[qid].values())[:10],
                                   list(reference[qid].values())[:10], atol=1e-4)
