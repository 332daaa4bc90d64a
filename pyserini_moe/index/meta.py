"""The ``pyserini_moe_index.json`` file that says which encoder built an index and how.

Searching checks it, so a mismatched index/encoder pair is an error rather than silently bad
results. Indexes built elsewhere (plain Pyserini) have no such file and are searched as they are.
Its name differs from a model folder's ``pyserini_moe.json``, so neither is mistaken for the
other; indexes built before 2026-11-25 wrote ``pyserini_moe.json`` (with a ``kind``) and still
read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyserini_moe import __version__
from pyserini_moe.errors import UserError
from pyserini_moe.io import read_json
from pyserini_moe.representation import INDEX_META_FILE

META_FILE = INDEX_META_FILE
LEGACY_META_FILE = "pyserini_moe.json"  # indexes built before 2026-11-25


class IndexMismatchError(UserError):
    """The index was built for another retriever or encoder than the one searching it."""


def write_meta(index_dir: str | os.PathLike, kind: str, **fields: Any) -> Path:
    """Record ``kind`` (bm25, dense, impact, multivector) and build details in the index folder."""
    path = Path(index_dir) / META_FILE
    meta = {"kind": kind, "created_by": f"pyserini-moe {__version__}", **fields}
    path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path


def read_meta(index_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The index's metadata, or None for an index not built by pyserini-moe."""
    path = Path(index_dir) / META_FILE
    if path.is_file():
        return read_json(path, "index metadata")
    legacy = Path(index_dir) / LEGACY_META_FILE
    if legacy.is_file():
        meta = read_json(legacy, "index metadata")
        return meta if "kind" in meta else None  # a model folder, not an index
    return None


def check_kind(index_dir: str | os.PathLike, kind: str) -> dict[str, Any] | None:
    """Fail clearly when an index of another kind is given to a ``kind`` searcher."""
    meta = read_meta(index_dir)
    if meta is not None and meta.get("kind") != kind:
        raise IndexMismatchError(
            f"{index_dir} is a {meta.get('kind')!r} index; the {kind!r} retriever cannot search it"
        )
    return meta
