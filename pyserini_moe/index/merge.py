"""Join the shards of a sharded encoding into one index.

Encoding is what costs; it splits across processes or machines with
``python -m pyserini_moe.index ... --shard-id I --shard-num N`` (contiguous, equal slices of the
corpus, as Pyserini's encoder does). Merging is cheap and checks that the shards belong together:
same kind, same encoder (fingerprint and encode-time options), same corpus (its content digest,
not only its name: ``/a/scifact`` and ``/b/scifact`` are refused) and document length, and every
shard id of ``N`` exactly once. The result is the index a single process would build:

* dense: the shards' vectors (read back from Faiss) in shard order, in a new index of the shards'
  Faiss type;
* multivector: every document's token vectors appended in shard order, and the Faiss token index
  built once over all of them;
* impact: the shards hold quantised vectors only; Lucene (Anserini's IndexCollection, with
  ``--threads``) indexes all their files at once.

Examples::

    for i in 0 1 2 3; do
      python -m pyserini_moe.index --retriever dense --corpus scifact --encoder work/m/best \\
          --shard-id $i --shard-num 4 --index idx/shard$i &
    done; wait
    python -m pyserini_moe.merge --shards idx/shard0 idx/shard1 idx/shard2 idx/shard3 \\
        --index idx/scifact-dense
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import faiss

from pyserini_moe.errors import UserError, library_write
from pyserini_moe.index.encoded import IMPACT_SHARD, IMPACT_VECTORS, faiss_index, lucene_impact_index
from pyserini_moe.index.meta import (
    META_FILE,
    IndexMeta,
    IndexMismatchError,
    check_unique_ids,
    read_meta,
)
from pyserini_moe.index.multivector import MultiVectorIndex, MultiVectorIndexWriter
from pyserini_moe.io import atomic_path, reading
from pyserini_moe.outputs import refuse_to_rebuild

# Fields every shard must agree on (besides the encoder fingerprint and options).
_SAME = ("kind", "collection", "max_length", "faiss", "quantization", "dim", "model_type",
         "doc_max_terms", "precision")
# Fields of a shard's metadata that describe the shard, not the merged index (cleared in it).
_PER_SHARD = {"created_by": None, "shard": None, "num_docs": None, "n_tokens": None,
              "terms_per_doc": None}


def check_shards(shards: list[str | os.PathLike]) -> list[tuple[Path, IndexMeta]]:
    """(folder, metadata) of each shard in shard-id order, after checking they form one whole."""
    found = []
    for folder in shards:
        if not Path(folder).exists():
            raise FileNotFoundError(f"shard {folder} does not exist")
        meta = read_meta(folder)
        if meta is None or meta.shard is None:
            raise IndexMismatchError(f"{folder} is not an index shard (built with --shard-id / "
                                     "--shard-num by python -m pyserini_moe.index)")
        found.append((Path(folder), meta))
    first = found[0][1]
    for folder, meta in found[1:]:
        for field in ("encoder_fingerprint", "encoder_options", *_SAME):
            if field == "collection" and first.corpus and meta.corpus:
                continue  # the corpus identity decides (a copy under another folder name)
            ours, theirs = getattr(first, field), getattr(meta, field)
            if theirs != ours:
                raise IndexMismatchError(f"{folder} and {found[0][0]} differ in {field} "
                                         f"({theirs!r} vs {ours!r}): they are "
                                         "not shards of one encoding")
    _check_one_corpus(found)
    num = first.shard["num"]
    for folder, meta in found[1:]:
        if meta.shard["num"] != num:
            raise IndexMismatchError(f"{folder} is shard {meta.shard['id']} of "
                                     f"{meta.shard['num']}, {found[0][0]} shard "
                                     f"{first.shard['id']} of {num}: shards of different "
                                     "splits")
    ids = sorted(meta.shard["id"] for _, meta in found)
    if ids != list(range(num)):
        raise IndexMismatchError(f"the shards must be ids 0..{num - 1} of {num}, each once; got "
                                 f"ids {ids}")
    return sorted(found, key=lambda item: item[1].shard["id"])


def _check_one_corpus(found: list[tuple[Path, IndexMeta]]) -> None:
    """Shards of two corpora that share a folder name (``/a/scifact``, ``/b/scifact``) agree on
    ``collection``; the corpus identity a shard records (document count, content digest) tells
    them apart. The path is not compared: shards encoded on two machines read one corpus from two
    places. Shards written before the identity was recorded lack it and are not compared."""
    first_folder, first = found[0]
    for folder, meta in found[1:]:
        theirs, ours = meta.corpus, first.corpus
        if theirs is None or ours is None:
            continue
        if (theirs.get("documents"), theirs.get("sha256")) != (ours.get("documents"),
                                                             ours.get("sha256")):
            # the digest is of the files' bytes: a gzipped copy of one corpus differs too
            packed = (" (or one copy of the corpus is gzipped and the other not: the digest is of "
                      "the files' bytes; encode every shard from the same files)"
                      if theirs.get("documents") == ours.get("documents") else "")
            raise IndexMismatchError(f"{folder} and {first_folder} were encoded from different "
                                     f"corpora ({_corpus(theirs)} vs {_corpus(ours)}): not shards "
                                     f"of one encoding{packed}")


def _corpus(identity: dict[str, Any]) -> str:
    """A recorded corpus identity in a few words: path, documents, digest prefix."""
    return (f"{identity.get('path')}: {identity.get('documents')} documents, sha256 "
            f"{str(identity.get('sha256'))[:12]}")


def merge(shards: list[str | os.PathLike], index_dir: str | os.PathLike, threads: int = 1,
          overwrite: bool = False, progress: bool = True) -> Path:
    """Merge ``shards`` into ``index_dir`` (written atomically); returns it."""
    index_dir = Path(index_dir)
    refuse_to_rebuild(index_dir, overwrite, META_FILE)
    ordered = check_shards(shards)
    kind = ordered[0][1].kind
    common = dataclasses.replace(ordered[0][1], **_PER_SHARD)
    if kind == "dense":
        _merge_dense(ordered, index_dir, common, overwrite)
    elif kind == "multivector":
        _merge_multivector(ordered, index_dir, common, progress, overwrite)
    elif kind == IMPACT_SHARD:
        _merge_impact(ordered, index_dir, common, threads, overwrite)
    else:
        raise IndexMismatchError(f"cannot merge {kind!r} shards")
    return index_dir


def _merge_dense(ordered: list[tuple[Path, IndexMeta]], index_dir: Path,
                 common: IndexMeta, overwrite: bool) -> None:

    merged = faiss_index(common.dim, common.faiss)
    with atomic_path(index_dir, directory=True, overwrite=overwrite) as out, \
            open(out / "docid", "w") as ids:
        for folder, meta in ordered:
            with reading(folder / "index", "shard's Faiss index", "encode the shard again"):
                shard = faiss.read_index(str(folder / "index"))
            with reading(folder / "docid", "shard's docid list", "encode the shard again"):
                docids = (folder / "docid").read_text(encoding="utf-8")
            _check_count(folder / "docid", docids.count("\n"), meta, shard.ntotal)
            # each line as Pyserini's FaissSearcher will read it from the merged index
            check_unique_ids(folder / "docid", [line.rstrip() for line in docids.split("\n")[:-1]],
                             "the shard is damaged: encode it again")
            merged.add(shard.reconstruct_n(0, shard.ntotal))
            ids.write(docids)
        ids.flush()
        with library_write(out / "index"):
            faiss.write_index(merged, str(out / "index"))
        dataclasses.replace(common, num_docs=merged.ntotal).write(out)


def _merge_multivector(ordered: list[tuple[Path, IndexMeta]], index_dir: Path,
                       common: IndexMeta, progress: bool, overwrite: bool) -> None:

    # the writer records kind, dim, faiss and the counts itself; the rest as the shards did
    encoder_meta = {k: v for k, v in common.to_json().items() if k not in ("kind", "dim", "faiss")}
    with MultiVectorIndexWriter(index_dir, common.dim, encoder_meta,
                                faiss_index=common.faiss, progress=progress,
                                overwrite=overwrite) as writer:
        for folder, _ in ordered:
            shard = MultiVectorIndex(folder)
            for i, docid in enumerate(shard.docids):
                writer.add(docid, shard.vectors[shard.offsets[i]:shard.offsets[i + 1]])


def _merge_impact(ordered: list[tuple[Path, IndexMeta]], index_dir: Path,
                  common: IndexMeta, threads: int, overwrite: bool) -> None:

    for folder, meta in ordered:  # before Lucene reads them: a shard that lost a line
        vectors = folder / IMPACT_VECTORS
        with vectors.open("rb") as lines:
            _check_count(vectors, sum(1 for line in lines if line.strip()), meta)
    with tempfile.TemporaryDirectory(prefix="pyserini-moe-shards-") as tmp:
        for folder, meta in ordered:  # one input folder holding every shard's vector file
            os.symlink((folder / IMPACT_VECTORS).resolve(),
                       Path(tmp) / f"vectors-{meta.shard['id']:05d}.jsonl")
        with atomic_path(index_dir, directory=True, overwrite=overwrite) as out:
            postings = lucene_impact_index(tmp, out, threads)
            num_docs = sum(m.num_docs for _, m in ordered)
            dataclasses.replace(common, kind="impact", num_docs=num_docs,
                                terms_per_doc=round(postings / max(1, num_docs), 1)).write(out)


def _check_count(path: Path, found: int, meta: IndexMeta, vectors: int | None = None) -> None:
    """A shard's documents counted in ``path`` against its metadata's ``num_docs`` (and its
    Faiss vectors): a shard that lost a line (an interrupted copy) would merge into an index
    whose records disagree with it, found only when it is searched."""
    expected = {meta.num_docs, vectors} - {None}
    if expected and expected != {found}:
        said = " and ".join(f"{n}" for n in sorted(expected))
        raise UserError(f"{path}: {found} documents, but the shard records {said}: the shard "
                        "is damaged (an interrupted copy?); rebuild it")


if __name__ == "__main__":  # the door moved: library modules import no command
    raise SystemExit("python -m pyserini_moe.index.merge is now python -m pyserini_moe.merge (same "
                     "arguments)")
