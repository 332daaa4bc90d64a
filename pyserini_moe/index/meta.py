"""The ``pyserini_moe_index.json`` file that says which encoder built an index and how.

Searching checks it, so a mismatched index/encoder pair is an error rather than silently bad
results. Indexes built elsewhere (plain Pyserini) have no such file and are searched as they are.
Its name differs from a model folder's ``pyserini_moe.json``, so neither is mistaken for the
other; older indexes wrote ``pyserini_moe.json`` (with a ``kind``) and are still read.

:class:`IndexMeta` is the only reader and writer of the file: every other module reads its typed
attributes, never the JSON keys. The JSON keeps the names and values earlier versions wrote, with
two changes: a field without a value (None) is left out rather than written as ``null``, and
multi-vector indexes record their document count as ``num_docs``, like every other kind
(older multi-vector indexes wrote ``n_docs``; both are read). A key this version does
not know (written by a newer one) is ignored; a known key holding the wrong type is one error
line naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyserini_moe import __version__
from pyserini_moe.errors import UserError
from pyserini_moe.io import read_json
from pyserini_moe.representation import INDEX_META_FILE

META_FILE = INDEX_META_FILE
LEGACY_META_FILE = "pyserini_moe.json"  # what older indexes wrote
CREATED_BY = f"pyserini-moe {__version__}"
# Older multi-vector indexes wrote their document count under this name.
_LEGACY_NUM_DOCS = "n_docs"


class IndexMismatchError(UserError):
    """The index was built for another retriever or encoder than the one searching it."""


@dataclasses.dataclass(frozen=True)
class IndexMeta:
    """What an index folder records about itself (``pyserini_moe_index.json``), one typed field
    per key any index writes; a field an index of that kind does not record is None."""

    # --- every kind --------------------------------------------------------------------------
    #: ``bm25``, ``dense``, ``impact``, ``multivector``, or ``impact-shard`` (a shard's vectors).
    kind: str
    #: ``pyserini-moe <version>`` that wrote the file (:meth:`write` stamps it).
    created_by: str | None = None
    #: Documents in the index (older multi-vector indexes: ``n_docs``).
    num_docs: int | None = None
    #: The collection's name (a BEIR name, or the corpus folder's / file's name).
    collection: str | None = None
    #: ``{"path", "documents", "sha256"}``: the corpus the index (or the shard: a slice of it) was
    #: built from; searching indexes together and merging shards compare the digest.
    corpus: dict[str, Any] | None = None

    # --- indexes built from a model (dense, impact, multivector) -----------------------------
    #: The model that encoded the documents: a backbone name or a model folder's absolute path.
    encoder: str | None = None
    #: The model's fingerprint (architecture + weights); a query encoder must match it.
    encoder_fingerprint: str | None = None
    model_type: str | None = None
    #: Encode-time options (SB-MoE's ``{"inference": "all"}``); queries are encoded alike.
    encoder_options: dict[str, Any] | None = None
    #: fp32 | fp16 | bf16, what the documents were encoded at.
    precision: str | None = None
    #: Passage length in tokens.
    max_length: int | None = None
    #: Query length in tokens search cuts queries at unless told otherwise: the one the encoder
    #: was trained at (its recipe's ``data.query_max_length``), else its positions. Older
    #: indexes record none: search then reads the model's own length.
    query_max_length: int | None = None
    #: How a backbone was used zero-shot (pooling, normalize, query / passage prefixes).
    zero_shot: dict[str, Any] | None = None

    # --- dense and multivector ---------------------------------------------------------------
    dim: int | None = None
    #: The Faiss index: ``flat`` / ``hnsw[M]`` (dense), ``flat`` / ``ivf{n},pq{m}`` / ``hnsw[M]``
    #: (multivector; None when compressed).
    faiss: str | None = None

    # --- impact ------------------------------------------------------------------------------
    #: Weights are stored as round(w * quantization); queries are quantised alike.
    quantization: int | None = None
    #: Each passage keeps its heaviest terms only (None: all).
    doc_max_terms: int | None = None
    #: Mean stored terms per passage.
    terms_per_doc: float | None = None

    # --- multivector -------------------------------------------------------------------------
    n_tokens: int | None = None
    #: ``pq{m}`` / ``pq{m}x{bits}`` residual codes (see :mod:`pyserini_moe.index.residual`).
    compression: str | None = None
    #: Centroids of a compressed index.
    nlist: int | None = None
    #: Bytes a compressed token takes.
    bytes_per_token: int | None = None

    # --- shards (``--shard-id`` / ``--shard-num``) --------------------------------------------
    #: ``{"id", "num", "start", "stop"}``: which slice of the corpus the shard holds.
    shard: dict[str, int] | None = None

    # --- bm25 --------------------------------------------------------------------------------
    #: The collection's resolved folder.
    source: str | None = None
    #: ``flat`` or ``multifield`` (Pyserini's BEIR layouts).
    layout: str | None = None
    #: What the ``contents`` field holds (``title + ' ' + text`` or ``text``).
    contents: str | None = None
    #: The Lucene fields (``["contents"]``, ``["contents", "title"]``).
    fields: list[str] | None = None

    # --- never written -----------------------------------------------------------------------
    #: A dense index built elsewhere (plain Pyserini), searched with the encoder given: nothing
    #: recorded to check the pairing against. Made by the searcher, not read from a file.
    foreign: bool = False

    @property
    def kind_phrase(self) -> str:
        """``a dense index``, ``an impact index``: the kind in a sentence."""
        return f"{'an' if self.kind[:1] in 'aeiou' else 'a'} {self.kind} index"

    def __post_init__(self) -> None:
        problem = _type_problem({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if problem:
            raise TypeError(f"IndexMeta: {problem}")

    @classmethod
    def from_json(cls, data: Any, path: str | os.PathLike | None = None) -> IndexMeta:
        """The metadata in ``data`` (the file's parsed JSON): a legacy ``n_docs`` reads as
        ``num_docs``, keys this version does not know are ignored, and a known key of the wrong
        type (or a file that is not an object with a ``kind``) is one :class:`UserError` naming
        ``path``."""
        where = f"{path}: " if path is not None else ""
        if not isinstance(data, dict) or "kind" not in data:
            raise UserError(f"{where}the index metadata is damaged (not a JSON object with a "
                            "'kind'); write it again (rebuild the index)")
        known = {f.name for f in dataclasses.fields(cls)} - {"foreign"}
        values = {k: v for k, v in data.items() if k in known}
        if _LEGACY_NUM_DOCS in data and "num_docs" not in data:
            values["num_docs"] = data[_LEGACY_NUM_DOCS]
        problem = _type_problem(values) or _value_problem(values)
        if problem:
            raise UserError(f"{where}the index metadata is damaged ({problem}); write it again "
                            "(rebuild the index)")
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object: fields without a value (None) are left out, and so is
        ``foreign`` (a searcher's note, never a file's)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "foreign" and getattr(self, f.name) is not None}

    def write(self, folder: str | os.PathLike) -> Path:
        """Write ``pyserini_moe_index.json`` into ``folder``, stamped as written by this version;
        returns its path."""
        if self.foreign:
            raise ValueError("the metadata of an index built elsewhere is not written")
        path = Path(folder) / META_FILE
        data = dataclasses.replace(self, created_by=CREATED_BY).to_json()
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return path


def write_meta(index_dir: str | os.PathLike, kind: str, **fields: Any) -> Path:
    """Record ``kind`` (bm25, dense, impact, multivector) and build details (:class:`IndexMeta`'s
    fields; another name is a ``TypeError``) in the index folder."""
    return IndexMeta(kind=kind, **fields).write(index_dir)


def meta_path(index_dir: str | os.PathLike) -> Path:
    """The metadata file of ``index_dir`` an error about a recorded value names: this version's
    name, or the legacy one where only that exists."""
    legacy = Path(index_dir) / LEGACY_META_FILE
    path = Path(index_dir) / META_FILE
    return legacy if legacy.is_file() and not path.is_file() else path


def read_meta(index_dir: str | os.PathLike) -> IndexMeta | None:
    """The index's metadata, or None for an index not built by pyserini-moe."""
    path = Path(index_dir) / META_FILE
    if path.is_file():
        return IndexMeta.from_json(read_json(path, "index metadata"), path)
    legacy = Path(index_dir) / LEGACY_META_FILE
    if legacy.is_file():
        data = read_json(legacy, "index metadata")
        if not isinstance(data, dict) or "kind" not in data:
            return None  # a model folder, not an index
        return IndexMeta.from_json(data, legacy)
    return None


# What each kind of index is made of (glob patterns), and the kinds those files can be: a kind
# edited by hand in the metadata is told from the folder's files before a searcher of that kind
# loads the encoder and blames the model.
_KIND_FILES = (("dense", ("index", "docid"), ("dense",)),
               ("multivector", ("offsets.npy", "docids.txt"), ("multivector",)),
               ("Lucene", ("segments_*",), ("bm25", "impact")))


def _refuse_kind_the_files_deny(index_dir: Path, meta: IndexMeta) -> None:
    """One line naming the metadata when the folder's files make up another kind of index."""
    for held, patterns, kinds in _KIND_FILES:
        if all(any(index_dir.glob(p)) for p in patterns) and meta.kind not in kinds:
            name = META_FILE if (index_dir / META_FILE).is_file() else LEGACY_META_FILE
            raise IndexMismatchError(
                f"{index_dir}: its index metadata ({name}) says kind {meta.kind!r}, but the "
                f"folder holds a {held} index; the metadata was edited or damaged: restore it "
                "or rebuild the index")


def check_kind(index_dir: str | os.PathLike, kind: str) -> IndexMeta | None:
    """Fail clearly when an index of another kind is given to a ``kind`` searcher, or when the
    metadata's kind is not what the folder's files are."""
    meta = read_meta(index_dir)
    if meta is None:
        return None
    _refuse_kind_the_files_deny(Path(index_dir), meta)
    if meta.kind != kind:
        raise IndexMismatchError(
            f"{index_dir} is {meta.kind_phrase}; the {kind!r} retriever cannot search it")
    return meta


# --- type checks of the fields -----------------------------------------------------------------

_HINTS = typing.get_type_hints(IndexMeta)


def _type_problem(values: dict[str, Any]) -> str | None:
    """What is wrong with the types of ``values`` (field name -> value), or None."""
    for name, value in values.items():
        hint = _HINTS[name]
        if not _fits(value, hint):
            return (f"{name!r} must be {_hint_name(hint)}, got {type(value).__name__} "
                    f"{_short(value)}")
    return None


# Fields that, when recorded, are at least 1: ``query_max_length`` -5 failed in the tokenizer with
# a traceback, 0 was read as "no limit" under a warning that queries are cut; a quantization of 0
# was refused without naming the metadata.
_POSITIVE = ("query_max_length", "max_length", "dim", "quantization")
# What an index records as ``precision``: modeling.device.PRECISIONS' names, and int8 for an ONNX
# int8 export (tests/index/test_meta.py holds the two lists together).
RECORDED_PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def _value_problem(values: dict[str, Any]) -> str | None:
    """What is wrong with the values of ``values`` (types already checked), or None."""
    for name in _POSITIVE:
        value = values.get(name)
        if value is not None and value < 1:
            return f"{name!r} must be >= 1 or absent, got {value!r}"
    if values.get("precision") not in (None, *RECORDED_PRECISIONS):
        return (f"'precision' must be one of {', '.join(RECORDED_PRECISIONS)}, got "
                f"{values['precision']!r}")
    return None


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` (one level deep: a dict's or list's own type, a
    list's items; ``int`` is not ``bool``, ``float`` takes an ``int``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True  # Any


def _hint_name(hint: Any) -> str:
    """``int``, ``str | None``, ``dict[str, Any] | None``: the type as the class spells it."""
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_unique_ids(path: Path, ids: Sequence[str],
                     damaged: str = "the index is damaged: rebuild it") -> None:
    """Refuse an index's id list (one id a line, as read from ``path``) holding an id twice:
    readers map each id to one row, so a repeat would silently hide a document from a search, or
    fail deep in a re-scoring that looks an id up. ``damaged``: what it means and what to do. One
    set, the usual case; the repeat's lines are found only when there is one."""
    if len(set(ids)) == len(ids):
        return
    first: dict[str, int] = {}
    for line, docid in enumerate(ids, start=1):
        if docid in first:
            raise IndexMismatchError(f"{path}: id {docid!r} repeated (lines {first[docid]} and "
                                     f"{line}); {damaged}")
        first[docid] = line
