"""Lucene indexes built with Pyserini's own indexer (Anserini ``IndexCollection``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pyserini_moe import _java
from pyserini_moe.data.corpus import corpus_identity, open_corpus
from pyserini_moe.data.export import write_json_collection
from pyserini_moe.errors import UserError
from pyserini_moe.index.meta import META_FILE, write_meta
from pyserini_moe.io import atomic_path
from pyserini_moe.outputs import refuse_to_rebuild


class IndexingError(UserError):
    """Anserini refused or failed to build the index."""


_PATH_FLAGS = ("-input", "-index")  # IndexCollection's flags whose value is a path


def run_index_collection(args: list[str]) -> None:
    """Call Anserini's ``IndexCollection`` in this process (what ``pyserini.index.lucene`` does)."""
    _java.bootstrap()
    # pyserini.pyclass sets the classpath, then starts the JVM; importing jnius first would
    # start it without Anserini's classes.
    # isort: off
    from pyserini.pyclass import autoclass
    from jnius import JavaException
    # isort: on

    # absolute: the JVM resolves a relative path against the folder the process started in,
    # not the one it is in now (a notebook's os.chdir)
    args = [str(Path(value).absolute()) if flag in _PATH_FLAGS else value
            for flag, value in zip(["", *args], args)]
    try:
        autoclass("io.anserini.index.IndexCollection").main(args)
    except JavaException as e:
        raise IndexingError(f"Anserini IndexCollection failed: {e.innermessage or e}") from None
    # IndexCollection returns normally when it refuses its arguments (it prints "Error: ..."):
    # an index without a segments file is that refusal, not an index
    index = Path(args[args.index("-index") + 1])
    if not any(index.glob("segments_*")):
        raise IndexingError(f"Anserini IndexCollection wrote no index to {index} (its reason is "
                            "printed above)")


#: What ``contents`` holds in each BM25 index layout (recorded in the index), and the Lucene
#: fields besides it. Pyserini's BEIR indexes come in both: ``beir-v1.0.0-<name>.flat`` and
#: ``.multifield`` (searched with ``--fields contents=1.0 title=1.0``).
LAYOUTS = {"flat": ("title + ' ' + text", ()), "multifield": ("text", ("title",))}


def build_bm25_index(corpus: str, index_dir: str | os.PathLike, threads: int = 1,
                     overwrite: bool = False, layout: str = "flat") -> Path:
    """Index ``corpus`` (a collection name or BEIR folder) for BM25, in Pyserini's BEIR ``layout``.

    ``flat``: contents = title + " " + text, one field; ``multifield``: contents = text and the
    title in a ``title`` field of its own. These are how Pyserini's BEIR flat and multifield
    indexes are built, so BM25 (k1=0.9, b=0.4) reproduces their published numbers. The index is
    written to a temporary folder and renamed at the end.
    """
    if layout not in LAYOUTS:
        raise UserError(f"unknown BM25 index layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    contents, fields = LAYOUTS[layout]
    index_dir = Path(index_dir)
    refuse_to_rebuild(index_dir, overwrite, META_FILE)
    collection = open_corpus(corpus)
    with tempfile.TemporaryDirectory(prefix="pyserini-moe-json-") as tmp:
        json_dir = Path(tmp) / "collection"
        write_json_collection(collection.corpus(), json_dir, multifield=layout == "multifield")
        with atomic_path(index_dir, directory=True, overwrite=overwrite) as out:
            run_index_collection([
                "-collection", "JsonCollection", "-input", str(json_dir), "-index", str(out),
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
                "-storePositions", "-storeDocvectors", "-storeRaw", "-quiet",
                *(["-fields", *fields] if fields else []),
            ])
            write_meta(out, "bm25", collection=collection.name, source=str(collection.root),
                       num_docs=collection.num_docs(), corpus=corpus_identity(collection),
                       layout=layout, contents=contents, fields=["contents", *fields])
    return index_dir
