"""CoT-MoTE's embedding analysis: how far apart queries and passages lie (cot-mote.txt section 5.3,
appendix A.1, figures 2 and 4).

For N judged (query, relevant passage) pairs, each model's dense vectors give the distance matrix
d = 1 - cos(q_i, p_j) (eq. 14). Row i of p1 = softmax(-d) is query i's distribution over the
passages (eq. 15), row j of p2 = softmax(-d^T) passage j's distribution over the queries (eq. 16).
The appendix writes the normalising sum without an axis; normalised over the whole matrix, p2
would be p1 transposed and compared cell by cell with another pair, so we normalise per row,
which keeps the query-to-passage vs passage-to-query reading of the text. Per row:
KL = sum p1 log(p1 / p2) (eq. 17) and JS = (KL(p1 || m) + KL(p2 || m)) / 2 with m = (p1 + p2) / 2
(eq. 18-19). Rows are paired across models (same pairs), so the paper's two-tailed t-tests are
paired t-tests over rows. Lower = queries and passages share more of one embedding space.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyserini_moe.analyze.common import (
    emit,
    figure,
    refuse_past_positions,
    refuse_unread_seed,
    save_png,
)
from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.data.topics import load_qrels, load_topics
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_one_file_twice

TSNE_POINTS = 300  # pairs drawn in the t-SNE plot (figure 2 / 4 show a sample too)


def divergences(queries: np.ndarray, passages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row KL and JS (eq. 14-19) of N paired query / passage vectors [N, H]."""
    if queries.shape != passages.shape or queries.ndim != 2 or len(queries) < 2:
        raise UserError(f"need >= 2 paired query and passage vectors of one shape, got "
                        f"{queries.shape} and {passages.shape}")
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True).clip(1e-12)
    p = passages / np.linalg.norm(passages, axis=1, keepdims=True).clip(1e-12)
    d = 1.0 - q @ p.T  # eq. 14
    p1, p2 = _softmax(-d), _softmax(-d.T)  # eq. 15, 16
    kl = _kl(p1, p2)  # eq. 17
    m = (p1 + p2) / 2  # eq. 18
    js = (_kl(p1, m) + _kl(p2, m)) / 2  # eq. 19
    return kl, js


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * (np.log(a) - np.log(b))).sum(axis=1)


def judged_pairs(topics: dict[str, str], qrels: dict[str, dict[str, int]], docs: dict[str, str],
                 sample: int, seed: int) -> list[tuple[str, str]]:
    """(query text, relevant passage text): each topic with its first relevant document (by id,
    so the choice is stable), then a seeded sample of ``sample`` pairs (0 = all)."""
    pairs = []
    for qid, text in topics.items():
        relevant = sorted(d for d, rel in qrels.get(qid, {}).items() if rel > 0 and d in docs)
        if relevant:
            pairs.append((text, docs[relevant[0]]))
    if sample and sample < len(pairs):
        pairs = random.Random(seed).sample(pairs, sample)
    if len(pairs) < 2:
        raise UserError("fewer than two judged (query, relevant document) pairs: check that the "
                        "topics, qrels and corpus belong together")
    return pairs


def embed(model: Any, pairs: list[tuple[str, str]], max_length: int, query_max_length: int,
          batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Dense vectors of the queries (query side) and passages (passage side) of ``pairs``."""
    from pyserini_moe.modeling.base import Side  # noqa: PLC0415 - `analyze --help` stays light

    if "dense" not in model.representations:
        raise UserError(f"a {model.model_type} model has no dense representation to analyse")
    out = []
    for side, index, length in ((Side.QUERY, 0, query_max_length),
                                (Side.PASSAGE, 1, max_length)):
        texts = [pair[index] for pair in pairs]
        out.append(np.concatenate([
            model.encode(texts[i:i + batch_size], side, length, only="dense").dense.float()
            .cpu().numpy() for i in range(0, len(texts), batch_size)]))
    return out[0], out[1]


def format_divergences(results: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """Markdown: mean (sd) KL and JS per model, paired two-tailed t-test against the first."""
    from scipy.stats import ttest_rel  # noqa: PLC0415 - `analyze --help` stays light

    names = list(results)
    base_kl, base_js = results[names[0]]
    lines = [f"| model | KL | JS | p (KL vs {names[0]}) | p (JS vs {names[0]}) |",
             "|---|---|---|---|---|"]
    for name, (kl, js) in results.items():
        if name == names[0]:
            p_kl = p_js = "-"
        else:
            p_kl = f"{ttest_rel(kl, base_kl).pvalue:.2g}"
            p_js = f"{ttest_rel(js, base_js).pvalue:.2g}"
        lines.append(f"| {name} | {kl.mean():.4f} ({kl.std():.4f}) | {js.mean():.4f} "
                     f"({js.std():.4f}) | {p_kl} | {p_js} |")
    return "\n".join(lines)


def plot_tsne(embeddings: dict[str, tuple[np.ndarray, np.ndarray]], path: str | Path,
              seed: int = 0) -> None:
    """One t-SNE panel per model, queries and passages in two colours (figures 2 and 4A)."""
    from sklearn.manifold import TSNE

    fig, axes = figure(width=4.2, height=4.2, ncols=len(embeddings))
    for ax, (name, (q, p)) in zip(axes, embeddings.items()):
        n = min(len(q), TSNE_POINTS)
        points = np.concatenate([q[:n], p[:n]])
        xy = TSNE(n_components=2, init="pca", random_state=seed,
                  perplexity=min(30.0, (2 * n - 1) / 3)).fit_transform(points)
        ax.scatter(xy[:n, 0], xy[:n, 1], s=6, alpha=0.7, label="queries")
        ax.scatter(xy[n:, 0], xy[n:, 1], s=6, alpha=0.7, label="passages")
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0].legend(loc="best", markerscale=2)
    save_png(fig, path)


@dataclass(frozen=True)
class DivergenceAnalysis:
    """What ``analyze divergence`` takes, flag for flag (see its ``--help``; it shows no
    progress, so ``--quiet`` is not among them): settings that cannot work are refused when the
    object is made, before any model is loaded."""

    model: Sequence[str]  # NAME=MODEL (or a bare path, named by its folder)
    corpus: str
    topics: str
    qrels: str
    sample: int = 0  # pairs sampled (seeded); 0 = every judged query
    seed: int = 0
    max_length: int = 256
    query_max_length: int = 64
    device: str | None = None
    output: str | None = None
    plot: str | None = None

    def __post_init__(self) -> None:
        _named(self.model)
        if self.sample < 0:
            raise UserError(f"--sample must be >= 0 (0 = all), got {self.sample}")
        if self.sample == 1:  # the divergences compare each pair with the others
            raise UserError("--sample 1 keeps fewer than two judged pairs: use --sample 2 or "
                            "more (0 = every judged query)")
        refuse_unread_seed(self.seed, {"--sample N": self.sample > 0,
                                       "--plot (t-SNE)": bool(self.plot)})


def run_divergence(analysis: DivergenceAnalysis) -> int:
    """``analyze divergence``: embed the judged pairs with each model, write the divergences
    (and the t-SNE plot)."""
    from pyserini_moe.modeling.auto import load_encoder  # noqa: PLC0415 - `analyze --help` stays light

    topics, qrels = load_topics(analysis.topics), load_qrels(analysis.qrels)
    docs = {d.id: d.contents for d in BeirCollection.load(analysis.corpus).corpus()}
    pairs = judged_pairs(topics, qrels, docs, analysis.sample, analysis.seed)
    models = {}
    for name, path in _named(analysis.model).items():
        models[name] = load_encoder(path, device=analysis.device)
        refuse_past_positions(models[name], {"--max-length": analysis.max_length,
                                             "--query-max-length": analysis.query_max_length})
    refuse_one_model_twice(models, _named(analysis.model))
    embeddings = {name: embed(model, pairs, analysis.max_length, analysis.query_max_length)
                  for name, model in models.items()}
    results = {name: divergences(q, p) for name, (q, p) in embeddings.items()}
    text = (f"Query-passage divergences (cot-mote.txt appendix A.1) over {len(pairs)} judged "
            f"pairs of {analysis.topics}; mean (sd) per row, paired t-tests:\n\n"
            f"{format_divergences(results)}\n")
    emit(text, analysis.output)
    if analysis.plot:
        plot_tsne(embeddings, analysis.plot, analysis.seed)
    return 0


def refuse_one_model_twice(models: dict[str, Any], paths: dict[str, str]) -> None:
    """Two folders holding one model (the same weights: a run whose best step was its last,
    a copy) give identical rows and a t-test against itself (p = nan), as one folder under two
    names would (:func:`_named`); they are known by their fingerprints (architecture and
    weights, as indexes record them), before any pair is embedded."""
    from pyserini_moe.modeling.folder import fingerprint  # noqa: PLC0415 - `analyze --help` stays light

    seen: dict[str, str] = {}
    for name, model in models.items():
        first = seen.setdefault(fingerprint(model), name)
        if first != name:
            raise UserError(f"--model {first}={paths[first]} and --model {name}={paths[name]} "
                            f"hold the same model (fingerprint {fingerprint(model)}): their rows "
                            "would be one and the test of one against the other p = nan; give "
                            "models that differ")


def _named(specs: Sequence[str]) -> dict[str, str]:
    """``NAME=PATH`` (or a bare path, named by its folder) -> {name: path}, names unique and
    models too: one model under two names gives a row identical to the first and a t-test
    against itself (p = nan), not a comparison."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = (name, path) if sep else (Path(spec).name, spec)
        if not name or not path:
            raise UserError(f"--model {spec!r}: expected NAME=MODEL_FOLDER")
        if name in out:
            raise UserError(f"--model name {name!r} given twice")
        out[name] = path
    refuse_one_file_twice(((f"--model {name}={path}", path) for name, path in out.items()),
                          "model")
    return out
