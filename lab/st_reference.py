"""Independent dense reference: sentence-transformers' own ``encode`` + exact cosine search.

Shares no code with pyserini_moe's encoders or Faiss indexes (only the data loader and the run
writer), so agreement with ``python -m pyserini_moe.search --retriever dense`` checks our pipeline.

    python lab/st_reference.py --corpus scifact --topics scifact:test --output ref.trec
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--model", default=None, help="default: the packaged all-MiniLM-L6-v2")
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from pyserini_moe.data import BeirCollection, load_topics
    from pyserini_moe.modeling import packaged_minilm
    from pyserini_moe.runs import write_trec_run

    model = SentenceTransformer(args.model or str(packaged_minilm()), device="cpu")
    docs = list(BeirCollection.load(args.corpus).corpus())
    topics = load_topics(args.topics)
    d = model.encode([x.contents for x in docs], batch_size=args.batch_size,
                     normalize_embeddings=True, show_progress_bar=True)
    q = model.encode(list(topics.values()), batch_size=args.batch_size, normalize_embeddings=True)
    scores = q @ d.T
    k = min(args.hits, len(docs))
    run = {}
    for qid, row in zip(topics, scores):
        top = np.argsort(-row, kind="stable")[:k]
        run[qid] = {docs[i].id: float(row[i]) for i in top}
    write_trec_run(run, args.output, tag="st-reference")


if __name__ == "__main__":
    main()
