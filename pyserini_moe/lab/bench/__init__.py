"""``python -m pyserini_moe.lab.bench``: speed, memory and size, each comparison measured side by side
in one run and reported as a ratio, with the project's targets marked met / not met.

Sections (all on the shared corpora; models are untrained instances built from ``--backbone``,
since speed and memory do not depend on training):

* encoding: documents/s of every registered model type against the plain backbone (a Siamese
  bi-encoder), interleaved repeats, best of them; MoE models the rest of the project has or
  adds are picked up from the model registry;
* onnx: PyTorch vs onnxruntime fp32 vs int8 (exports in their own processes), throughput and the
  nDCG@10 each gives on SciFact test (full corpus);
* latency: single-query latency (p50 / p95, encode + search) and batched throughput of BM25,
  dense, impact, multi-vector, dense + BM25 hybrid and CAME's fused search, on the first
  ``--latency-docs`` documents of the corpus; multi-vector candidate overlap with exact MaxSim;
* memory and size: peak resident memory of every index build and search process, index sizes;
* scaling: index time, peak memory, size and single-query latency of BM25, dense, impact and
  compressed multi-vector at ``--scaling-sizes`` documents (1k and 5k; 20k, the local
  collections together, and 100k opt-in; points of earlier runs join with ``--scaling-from``), a
  fixed plus per-document cost fitted to each and projected to MS MARCO's 8.8M passages;
* approximate: HNSW recall@100 against the flat dense index, IVF-PQ multi-vector overlap with
  exact MaxSim.

Every index and timing encodes ``--max-length`` document tokens (128, as the local regressions).
Writes ``bench.json`` and ``bench.md`` into ``--output-dir`` and prints the Markdown.
"""
