"""Topics encoded ahead of time, in the forms Pyserini's own command lines read, so a model of
ours can be searched with ``python -m pyserini.search.faiss --encoded-queries`` (dense) or
``python -m pyserini.search.lucene --impact --encoder <file>.jsonl`` (impact) and give the runs
``python -m pyserini_moe.search`` gives:

* dense: a folder with ``embedding.pkl``, a pandas DataFrame of columns ``text`` and
  ``embedding`` (Pyserini's ``QueryEncoder`` looks each query up by its text);
* impact: a JSON-lines file of ``{"id", "contents", "vector": {token: weight}}``, Pyserini's
  ``CachedDataQueryEncoder`` form, with the weights quantised as the index's documents were.

The query encoder is the one the index records, checked against it as a search checks it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path
from pyserini_moe.search.encoded import open_searcher

KINDS = ("dense", "impact")
EMBEDDING_FILE = "embedding.pkl"


def encode_queries(index: str | os.PathLike, kind: str, topics: dict[str, str],
                   output: str | os.PathLike, encoder: str | None = None,
                   device: str | None = None, query_max_length: int | None = None,
                   batch_size: int = 64, overwrite: bool = False,
                   precision: str = "fp32") -> Path:
    """Encode ``topics`` with the query encoder of ``index`` into ``output`` (atomically)."""
    if kind not in KINDS:
        raise UserError(f"Pyserini reads pre-encoded queries for dense and impact indexes, not "
                        f"{kind!r}")
    output = Path(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} already exists; pass --overwrite to replace it")
    searcher = open_searcher(kind, index, encoder, device, query_max_length,
                             precision=precision)
    qids = list(topics)
    vectors = []
    for start in range(0, len(qids), batch_size):
        texts = [topics[q] for q in qids[start:start + batch_size]]
        vectors.extend(searcher.query_encoder.encode_batch(texts))
    if kind == "dense":
        import pandas as pd  # noqa: PLC0415

        frame = pd.DataFrame({"text": [topics[q] for q in qids],
                              "embedding": [v.astype("float32") for v in vectors]})
        with atomic_path(output, directory=True, overwrite=overwrite) as tmp:
            frame.to_pickle(tmp / EMBEDDING_FILE)
    else:
        with atomic_path(output, overwrite=overwrite) as tmp, tmp.open("w") as f:
            for qid, vector in zip(qids, vectors):
                f.write(json.dumps({"id": qid, "contents": topics[qid], "vector": vector}) + "\n")
    return output
