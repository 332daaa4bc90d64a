"""Which kinds of index read each build setting that not every kind reads: one table, from which
``python -m pyserini_moe.index`` refuses a flag no kind of its build reads (given away from its
default) and :class:`~pyserini_moe.index.encoded.BuildSettings` checks its own fields, so no
setting is silently ignored. A light module (no torch, no Faiss): a BM25 build reads it too."""

from __future__ import annotations

from pyserini_moe.representation import INDEX_KINDS

# The flags of a model's build (BM25 reads none of them).
MODEL_FLAGS = ("encoder", "encoder_option", "backend", "batch_size", "max_length",
                "tokenizer_workers", "length_bucket", "device", "precision", "pooling",
                "normalize", "query_prefix", "passage_prefix", "shard_id", "shard_num")
READERS: dict[str, tuple[str, ...]] = {
    "layout": ("bm25",),
    "threads": ("bm25", "impact"),  # Lucene's indexing threads
    **{name: tuple(INDEX_KINDS) for name in MODEL_FLAGS},
    "faiss": ("dense", "multivector"),
    "compression": ("multivector",),
    "doc_max_terms": ("impact",),
    "quantization": ("impact",),
}


def unread_problem(given: list[str], kinds: list[str], readers: dict[str, tuple[str, ...]],
                   why: dict[str, str] | None = None,
                   names: dict[str, str] | None = None) -> str | None:
    """The line refusing the ``given`` settings (dests) that none of the build's ``kinds``
    reads (``readers``: setting -> the kinds that read it), each with ``why`` where one is known
    and under its flag's name (``names``, else the dest with dashes); None when every one is
    read."""
    names, why = names or {}, why or {}
    groups: dict[tuple[tuple[str, ...], str], list[str]] = {}  # flags said together
    for name in given:
        if not set(readers[name]) & set(kinds):
            flag = f"--{names.get(name, name.replace('_', '-'))}"
            groups.setdefault((readers[name], why.get(name, "")), []).append(flag)
    if not groups:
        return None
    parts = [f"{_listed(flags)} appl{'ies' if len(flags) == 1 else 'y'} to "
             f"{_listed([k.replace('bm25', 'BM25') for k in kinds_])} indexes"
             + (f": {reason}" if reason else "")
             for (kinds_, reason), flags in groups.items()]
    count = sum(map(len, groups.values()))
    return (f"building {' + '.join(kinds)}: {'; '.join(parts)}; leave "
            f"{'it' if count == 1 else 'them'} out")


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))
