"""What each kind of output folder this toolkit writes holds, and when one may be replaced.

``--overwrite`` (and a writer replacing its own output: a trainer's ``best/``) deletes a whole
folder, so a folder is replaced only when all it holds is what one kind of output writes: an
index (by the kind its metadata records), a model, an ONNX export, encoded queries, a training
checkpoint or run, a pre-training output, a JsonCollection. Each kind's files are listed here,
beside their writer's name; every artefact the toolkit builds is checked against its entry
(tests/test_damaged_artefacts.py), so a writer that adds a file is told to declare it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

# atomic_path's temporaries and replaced folders: ``.<name>.tmp-<pid>-<random>``, ``.<name>.old-<pid>``
LEFTOVER = re.compile(r"\.(.+)\.(?:tmp|old)-(\d+)(?:-.*)?")


def _is_folder(entry: Path) -> bool:
    """A folder, not a symbolic link to one (replacing a link deletes the link, not its target)."""
    return entry.is_dir() and not entry.is_symlink()


@dataclasses.dataclass(frozen=True)
class _Contents:
    """What one folder this toolkit writes holds: files by name or name pattern, and sub-folders
    by name pattern, each with contents of its own. A sub-folder is judged by what it holds, not
    by its name: a user's files put in an index's ``doc_vectors/`` or a pre-training's
    ``model/`` were once deleted with it."""

    files: frozenset[str] = frozenset()
    pattern: str = r"(?!)"         # file names that vary (Lucene segments, graphs)
    folders: tuple[tuple[str, _Contents], ...] = ()  # (name pattern, what such a folder holds)

    def foreign(self, folder: Path) -> list[Path]:
        """Everything in ``folder`` (at any depth) its writer does not write: a file of another
        name, a sub-folder of another name (whole), or what is foreign inside a known one."""
        found: list[Path] = []
        for entry in sorted(folder.iterdir()):
            if self._leftover(entry.name):
                continue  # a killed writer's temporary of one of its parts: swept with it
            if _is_folder(entry):
                found += self._foreign_in(entry)
            elif not self._writes_file(entry.name):
                found.append(entry)
        return found

    def _foreign_in(self, sub: Path) -> list[Path]:
        """A sub-folder of one of this folder's names: what is foreign inside it; of another
        name: all of it (named once, as the user put it there)."""
        inner = next((c for name, c in self.folders if re.fullmatch(name, sub.name)), None)
        return [sub] if inner is None else inner.foreign(sub)

    def _writes_file(self, name: str) -> bool:
        """Whether a file of this name is one this folder's writer writes."""
        return name in self.files or re.fullmatch(self.pattern, name) is not None

    def _leftover(self, name: str) -> bool:
        """Whether ``name`` is what :func:`atomic_path` leaves of a part of this folder when its
        writer is killed (``.best.tmp-PID-xyz``, ``.last.old-PID``): the trainer writes best/ and
        last/ that way inside its output, so a killed training must not make its own folder
        "foreign" to ``--overwrite``."""
        part = LEFTOVER.fullmatch(name)
        return part is not None and (self._writes_file(part.group(1)) or any(
            re.fullmatch(pattern, part.group(1)) for pattern, _ in self.folders))


@dataclasses.dataclass(frozen=True)
class _OutputKind(_Contents):
    """A kind of folder this toolkit writes: told by a marker (a file, or a folder only it
    writes), and made of nothing but what it writes, so replacing one deletes nothing else."""

    what: str = ""                 # for messages: "an index"
    markers: tuple[str, ...] = ()  # the first is the one a writer of this kind names it by

    def _writes_file(self, name: str) -> bool:
        """Its markers too: the files that tell the kind are among those it writes."""
        return name in self.markers or super()._writes_file(name)

    def foreign(self, folder: Path) -> list[Path]:
        own = self.recorded(folder)
        if own is not None:  # judged by the folder's own record, markers still its own
            return _Contents.foreign(dataclasses.replace(
                self, files=own.files, pattern=own.pattern, folders=own.folders), folder)
        return super().foreign(folder)

    def holds(self, folder: Path) -> bool:
        """Whether ``folder`` is an output of this kind, by its markers."""
        return any((folder / marker).exists() for marker in self.markers)

    def recorded(self, folder: Path) -> _Contents | None:
        """What this folder's own record (its marker file) says it holds, when the kind keeps
        one; None: whatever any output of the kind may hold."""
        return None

    def _record(self, folder: Path) -> dict[str, Any] | None:
        """The first readable marker file of ``folder`` as a JSON object, if any."""
        for marker in self.markers:
            try:
                data = json.loads((folder / marker).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return None


# What a tokenizer's save_pretrained writes (sentencepiece and BPE names included).
_TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                              "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json",
                              "spiece.model", "sentencepiece.bpe.model"})

# Lucene's own file names, not any ``_name.ext`` (a user's ``_notes.txt`` in an index is not a
# segment): ``_<segment>[_<generation>]`` then a codec's extension, the per-field
# formats' ones (postings, doc values, vectors) after their ``_<Format>_<n>`` suffix.
_LUCENE_FILES = (r"_[0-9a-z]+(_[0-9a-z]+)?"
                 r"(\.(si|cfs|cfe|fnm|fdt|fdx|fdm|nvd|nvm|tvd|tvx|tvm|kdd|kdi|kdm|dii|dim|liv)"
                 r"|_[A-Z][A-Za-z0-9]*_[0-9]+\.(doc|pos|pay|tim|tip|tmd|psm|dvd|dvm|vec|vem|vex"
                 r"|veq|vemq|vemf))"
                 r"|(pending_)?segments_[0-9a-z]+")

# An impact index's doc_vectors/ (index/doc_vectors.py).
_DOC_VECTORS = _Contents(files=frozenset({"docids.txt", "vocab.json", "indptr.i64", "terms.i32",
                                          "weights.i32"}))

_LUCENE = _Contents(files=frozenset({"write.lock", "segments.gen"}), pattern=_LUCENE_FILES)

# What an index of each kind (its metadata's ``kind``) is made of: a user's ``vectors.npy`` in a
# dense index is not the index's, though a multi-vector index writes one (so it is kept).
_INDEX_FILES = {
    "bm25": _LUCENE,
    "impact": dataclasses.replace(_LUCENE, folders=(("doc_vectors", _DOC_VECTORS),)),
    "impact-shard": _Contents(files=frozenset({"vectors.jsonl"})),
    "dense": _Contents(files=frozenset({"docid", "index"})),
    "multivector": _Contents(files=frozenset({
        "docids.txt", "tokens.faiss", "residual.pq", "vectors.npy", "token2doc.npy",
        "offsets.npy", "centroids.npy", "token_centroids.npy", "codes.npy",
        "centroid_offsets.npy", "centroid_docs.npy"})),
}


@dataclasses.dataclass(frozen=True)
class _IndexKind(_OutputKind):
    """An index: what it may hold depends on the kind its metadata records; an index whose kind
    cannot be read (an older metadata file) may hold what any kind of index writes."""

    def recorded(self, folder: Path) -> _Contents | None:
        kind = (self._record(folder) or {}).get("kind")
        return _INDEX_FILES.get(kind) if isinstance(kind, str) else None

    def holds(self, folder: Path) -> bool:
        """The legacy marker ``pyserini_moe.json`` is a model's marker too: it names an index
        only where it is not a model's (a model's records its ``model_type``)."""
        if (folder / self.markers[0]).exists():
            return True
        return (folder / self.markers[1]).exists() and \
            "model_type" not in (self._record(folder) or {})


_INDEX = _IndexKind(what="an index",
                    markers=("pyserini_moe_index.json", "pyserini_moe.json"),  # then its legacy
                    files=frozenset().union(*(c.files for c in _INDEX_FILES.values())),
                    pattern=_LUCENE_FILES, folders=(("doc_vectors", _DOC_VECTORS),))


@dataclasses.dataclass(frozen=True)
class _ExportKind(_OutputKind):
    """An ONNX export: the files its ``pyserini_moe_onnx.json`` says it wrote (a user's
    ``notes.onnx`` or ``merges.txt`` put in it is not the export's); an export written before
    that record holds the graphs its ``files`` names and any tokenizer's files."""

    def recorded(self, folder: Path) -> _Contents | None:
        record = self._record(folder) or {}
        written, graphs = record.get("written"), record.get("files")
        if isinstance(written, list):
            return _Contents(files=frozenset(map(str, written)))
        if isinstance(graphs, dict):  # an export from before "written": its graphs by name
            return _Contents(files=_TOKENIZER_FILES | set(map(str, graphs.values())))
        return None


_ONNX_EXPORT = _ExportKind(what="an ONNX export", markers=("pyserini_moe_onnx.json",),
                           files=_TOKENIZER_FILES, pattern=r".+\.onnx")

_BACKBONE_CONFIG = _Contents(files=frozenset({"config.json"}))  # DPR's passage/, 1_Pooling/

# A saved model (modeling/folder.py's save), its export cache onnx/<fp32|int8...>/ included.
_MODEL = _OutputKind(what="a model", markers=("pyserini_moe.json",),
                     files=_TOKENIZER_FILES | {"config.json", "README.md",
                                               "pyserini_moe.safetensors", "model.safetensors",
                                               "model.safetensors.index.json",
                                               "modules.json", "sentence_bert_config.json",
                                               "config_sentence_transformers.json"},
                     folders=(("passage", _BACKBONE_CONFIG), ("1_Pooling", _BACKBONE_CONFIG),
                              ("2_Normalize", _Contents()), ("onnx", _Contents(
                                  folders=((".+", _ONNX_EXPORT),)))))

_CHECKPOINT = _OutputKind(what="a training checkpoint", markers=("state.pt",),
                          files=frozenset({"progress.json"}))

# train/trainer.py's output folder: recipe and logs, the models (init/ is --init-only's), the
# checkpoint, snapshots/step-N/ (with analyze checkpoints' evaluation.json cache), and mining/'s
# index when a model mined the negatives.
_TRAINING_RUN = _OutputKind(
    what="a training run",
    markers=("recipe.yaml", "train_log.jsonl", "train_summary.json", "negatives.trec", "init"),
    files=frozenset({"dev_topics.tsv", "dev_qrels.txt"}),
    folders=(("best|last|init", _MODEL), ("checkpoint", _CHECKPOINT),
             ("snapshots", _Contents(files=frozenset({"evaluation.json"}),
                                     folders=((r"step-\d+", _MODEL),))),
             ("mining", _Contents(folders=((r"mining-\w+-index", _INDEX),)))))

# Every folder --overwrite (or a writer replacing its own output: a trainer's best/ and
# checkpoint/) may replace, and what each is made of. A folder the toolkit reads but does not
# write whole (a BEIR collection, a Hugging Face model, a Pyserini index) matches none of them.
_OUTPUT_KINDS = (
    _INDEX,
    _MODEL,
    _ONNX_EXPORT,
    _OutputKind(what="encoded queries", markers=("embedding.pkl",)),
    _CHECKPOINT,
    _OutputKind(what="a pre-training output", markers=("pretrain_args.json",),
                files=frozenset({"pretrain_log.jsonl"}), folders=(("model", _MODEL),)),
    # data.export's JsonCollection (BM25 indexing's input): replaced only by another of its kind
    _OutputKind(what="a JsonCollection", markers=("docs.jsonl",)),
    # never replaced whole (a new training replaces its parts): named so that an index or
    # export written over one is refused as such, and a training's own check knows its files
    _TRAINING_RUN,
)


def _kind_of(folder: Path) -> _OutputKind | None:
    """The kind of output all of whose files ``folder`` holds (None: a folder of other files)."""
    names = {e.name for e in folder.iterdir()}
    return next((kind for kind in _OUTPUT_KINDS
                 if names & set(kind.markers) and not kind.foreign(folder)), None)


def output_kind(folder: Path, named_only: bool = False) -> str | None:
    """What one of this toolkit's outputs ``folder`` is ("an index", "a model", "a training
    run", ...), told by its marker files; None for any other folder or a missing one. For
    commands that write many files into a folder they are given (``regress --work-dir``), which
    must not be one of these. ``named_only``: by the markers named after the toolkit only
    (``pyserini_moe*.json``: an index, a model, an export), for a folder above the one given,
    which may hold a user's own ``recipe.yaml`` or ``docs.jsonl``."""
    if not folder.is_dir():
        return None
    return next((kind.what for kind in _OUTPUT_KINDS if kind.holds(folder) and (
        not named_only or any(m.startswith("pyserini_moe") and (folder / m).exists()
                              for m in kind.markers))), None)


def marker_of(folder: Path) -> str:
    """The marker of the kind of output ``folder`` (a replacement just written) is: the first
    of its kind's markers, which every writer of the kind writes; "" when it holds none."""
    names = {entry.name for entry in folder.iterdir()}
    return next((kind.markers[0] for kind in _OUTPUT_KINDS if kind.markers[0] in names), "")


def refuse_foreign_folder(folder: Path, marker: str | None = None) -> None:
    """Replacing a folder deletes everything in it: ``--index indexes --overwrite`` (a typo for
    ``indexes/scifact``) must not delete every index, nor ``--overwrite`` a user's notes put in
    an index, or a collection or model named by mistake. A folder is replaced only when empty or
    when all it holds is what one kind of output writes; that kind must be the replacement's
    where it is known (``marker``: the file its kind is named by, e.g. ``embedding.pkl``;
    ``atomic_path`` knows it once the replacement is written), so an index never replaces a
    model."""
    entries = sorted(folder.iterdir())
    if not entries:
        return
    kinds = [k for k in _OUTPUT_KINDS if marker is None or k.markers[0] == marker]
    if marker is not None:
        _refuse_another_kind(folder, entries, kinds)
    held = [k for k in kinds if any(e.name in k.markers for e in entries)]
    foreign = min((k.foreign(folder) for k in held), key=len, default=entries)
    if foreign:
        _refuse_two_kinds(folder, {e.name for e in entries})
        raise FileExistsError(f"{folder} holds files this toolkit did not write "
                              f"{_examples(foreign, folder)}: --overwrite replaces only a folder "
                              "it wrote (an index, a model, an export) holding nothing else, or "
                              "an empty one; move them out or name another folder")


def _refuse_two_kinds(folder: Path, names: set[str]) -> None:
    """A folder holding two kinds of output (an index and encoded queries written into it) is
    not replaced, and the reason is that mix, not files "this toolkit did not write"."""
    mixed = [kind.what for kind in _OUTPUT_KINDS if kind.markers[0] in names]
    if len(mixed) > 1:
        raise FileExistsError(f"{folder} holds {' and '.join(mixed)} together: --overwrite "
                              "replaces a folder of one kind of output only; move one out or "
                              "name another folder")


def refuse_to_rebuild(folder: Path, overwrite: bool, marker: str) -> None:
    """Before any work: an existing output without ``overwrite`` (``--overwrite``), or a folder
    that --overwrite may not replace (:func:`refuse_foreign_folder`: not of ``marker``'s kind, or
    holding other files), refused now rather than after the build."""
    if not folder.exists():
        return
    if not folder.is_dir():  # --overwrite would not help: it replaces a folder
        raise FileExistsError(f"{folder} is a file, not a folder: name a folder for the output")
    if not overwrite:
        raise FileExistsError(f"{folder} already exists; pass --overwrite to rebuild it")
    if not folder.is_symlink():
        refuse_foreign_folder(folder, marker)


def _refuse_another_kind(folder: Path, entries: list[Path], kinds: list[_OutputKind]) -> None:
    """The replacement's kind (``kinds``: it alone, or none for an output of no kind) known: a
    folder that is another kind of output (a model named as ``--index``) is not replaced. (One
    holding no toolkit output at all is a folder of other files, which the caller refuses.)"""
    wanted = kinds[0].what if kinds else "what this writes"
    other = _kind_of(folder)
    if other is not None and other not in kinds:
        raise FileExistsError(f"{folder} is {other.what}, not {wanted}: --overwrite replaces "
                              "only a folder of the kind it writes, or an empty one; name "
                              "another folder")
    names = {e.name for e in entries}
    if not any(names & set(k.markers) for k in kinds) and any(
            names & set(k.markers) for k in _OUTPUT_KINDS):  # output of another kind, and more
        raise FileExistsError(f"{folder} is not {wanted}: it holds other files "
                              f"{_examples(entries, folder)}; --overwrite replaces only a folder "
                              "of the kind it writes, or an empty one; name another folder")


def _examples(entries: list[Path], folder: Path) -> str:
    """``(e.g. notes.txt), also model/sub/, x.txt and 2 more``: up to three entries, by their
    path in ``folder`` (a file deep in a sub-folder is named where it is), a folder with a slash
    (the first alone in the brackets, as the messages named one before)."""
    names = [str(e.relative_to(folder)) + ("/" if e.is_dir() else "") for e in entries]
    also = f", also {', '.join(names[1:3])}" if len(names) > 1 else ""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"(e.g. {names[0]}){also}{more}"
