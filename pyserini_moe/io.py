"""Atomic outputs (write to a temporary sibling, rename into place only on success) and reads
that name the file they fail on. What an output folder may hold is :mod:`pyserini_moe.outputs`."""

from __future__ import annotations

import contextlib
import glob
import gzip
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml

from pyserini_moe.errors import DataFormatError, UserError, raise_if_terminated
from pyserini_moe.outputs import LEFTOVER, marker_of, refuse_foreign_folder
from pyserini_moe.paths import shared_data_root


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, directory: bool = False,
                overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it to ``target`` if the block succeeds.

    A crash or exception leaves ``target`` untouched (a previous version survives) and removes the
    temporary, so nothing half-written ever sits at ``target``.
    """
    target = Path(target)
    _check_target(target, directory=directory, overwrite=overwrite)
    created = _missing_parents(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead_writers(target)
    prefix = f".{target.name}.tmp-{os.getpid()}-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        raise_if_terminated()  # a SIGTERM whose exception a finaliser swallowed: not committed
        _usual_modes(tmp)
        # Checked again: another writer may have created the target (or a directory stood up in
        # its place) while this one worked.
        _check_target(target, directory=directory, overwrite=overwrite, replacement=tmp)
        if target.is_dir() and not target.is_symlink():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException as e:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        for folder in created:  # the folders made for the target, if nothing else went in
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(e, OSError) and e.errno is not None and e.filename is not None:
            named = _as_target(Path(e.filename), tmp, target)
            if named is not None:  # said of the output the user named, not of its temporary
                raise OSError(e.errno, e.strerror, str(named)) from e
        raise


def _as_target(path: Path, tmp: Path, target: Path) -> Path | None:
    """``path`` inside the temporary ``tmp`` as the same place in ``target`` (None if outside)."""
    try:
        return target / path.relative_to(tmp) if path != tmp else target
    except ValueError:
        return None


def _missing_parents(target: Path) -> list[Path]:
    """The folders above ``target`` that do not exist yet, deepest first."""
    missing = []
    for folder in target.absolute().parents:
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _usual_modes(tmp: Path) -> None:
    """Give ``tmp`` and everything in it at least what a plain ``open()`` / ``mkdir()`` would
    (0644 / 0755 under umask 022): mkstemp and mkdtemp create owner-only entries, and so does a
    writer that saves through a temporary of its own (safetensors' ``save_file``: weights came
    out 0600, unreadable to the group that shares the models). Set after the block, since such a
    writer replaces the file it was given."""
    umask = _umask()
    for path in _tree(tmp):
        if path.is_symlink():
            continue
        usual = (0o777 if path.is_dir() else 0o666) & ~umask
        path.chmod(stat.S_IMODE(path.stat().st_mode) | usual)


def _tree(top: Path) -> Iterator[Path]:
    """``top`` and, for a folder, everything under it (symbolic links are not followed)."""
    yield top
    if top.is_dir() and not top.is_symlink():
        for folder, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                yield Path(folder) / name


# What a rename over the output path would replace besides a file or folder: the link itself
# (its target keeps the old content, the link becomes a file) or a system's node (/dev/null).
GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip stream

_SPECIAL_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                  (stat.S_ISSOCK, "a socket"))


def same_file_key(path: str) -> str:
    """What tells one input from another: an existing file's resolved path (``a.trec``,
    ``./a.trec`` and a link to it are one), else the value as written (a name)."""
    file = Path(path).expanduser()
    return str(file.resolve()) if file.exists() else path


def refuse_one_file_twice(places: Iterable[tuple[str, str]], what: str = "run file") -> None:
    """``places``: (the flag and value as given, the file). One input in two places (``a.trec``
    and ``./a.trec``, a link, two patterns matching one file) would count twice: a run fused
    at double weight, a system compared with itself (p = 1), a corpus's examples doubled. A
    value that is no file (a collection's name) is compared as written."""
    seen: dict[str, str] = {}
    for given, path in places:
        key = same_file_key(path)
        if key in seen:
            same = (f"{given} is given twice" if seen[key] == given
                    else f"{seen[key]} and {given} are one {what}")
            raise UserError(f"{same}: give each once")
        seen[key] = given


def refuse_special_output(target: str | os.PathLike) -> None:
    """An output replaces only a regular file (or, for folder outputs, a folder): a symbolic
    link, device node, FIFO or socket at ``target`` is refused (as root, ``--output /dev/null``
    would otherwise replace the system's /dev/null with a run file)."""
    try:
        mode = os.lstat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), None)
    if kind is not None:
        raise UserError(f"{target} is {kind}: an output replaces only a regular file or folder; "
                        "name another path")


def refuse_input_as_output(outputs: list[str | None], inputs: list[str | None]) -> None:
    """An output that is one of the command's inputs, a folder holding one, or a path inside an
    input folder (``--output <index>/docid``) would replace (with ``--overwrite``: delete) what
    the command reads: refused before any work, as is an output path that is a symbolic link or a
    device node (see :func:`refuse_special_output`). Inputs that are names
    rather than local paths (``scifact``, a hub model) cannot be hit. Outputs are compared
    with each other too: two that are one path (however spelled) or one inside the other would
    overwrite each other."""
    given = [(path, str(p)) for p in inputs if p and (path := _local_input(str(p)))]
    written: list[tuple[Path, str]] = []
    for out in outputs:
        if not out:
            continue
        refuse_special_output(out)
        refuse_unwritable_output(out)
        target = Path(out).resolve()
        for path, name in given:
            if what := _clash(target, path, name):
                raise UserError(f"{out} {what} of this command: writing it would replace what "
                                "is being read; name another output")
        for path, name in written:
            if what := _clash(target, path, name):
                what = what.replace("also an input", f"also the output {name}")
                raise UserError(f"{out} {what.replace('the input', 'the output')} of this "
                                "command: one would overwrite the other; give each output its "
                                "own path")
        written.append((target, str(out)))


def refuse_unwritable_output(out: str | os.PathLike) -> None:
    """An output goes through a temporary beside it (and a training folder is written into): a
    folder this process cannot write was found only when the work was done (a whole search).
    Checked with ``os.access``, so root is refused only on a read-only file system. A file where
    a parent folder should be (``run.trec/x.trec``) is named as such: ``os.access`` refuses it
    too, and would blame permissions."""
    target = Path(out).absolute()
    folders = [target] if target.is_dir() else []
    folders.append(next(p for p in target.parents if p.exists()))  # the writer creates the rest
    if not folders[-1].is_dir():
        raise UserError(f"{out}: {folders[-1]} is a file, not a folder; name another output")
    for folder in folders:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"{out}: the folder {folder} cannot be written by this user; name "
                            "another output or make the folder writable")


def _clash(target: Path, path: Path, name: str) -> str | None:
    """How the output ``target`` would hit the input ``path`` (both resolved), or None."""
    if path == target:
        return "is also an input"
    if target in path.parents:
        return f"holds the input {name}"
    if path in target.parents:
        return f"is inside the input {name}"
    return None


def _local_input(value: str) -> Path | None:
    """The local file or folder an input names, resolved: a path, the collection folder of
    ``FOLDER:SPLIT`` (topics and qrels as ``data/scifact:test``), or a collection of the shared
    data folder named bare (``scifact``, ``scifact:test``); None for other names (a hub model)."""
    data = shared_data_root()
    for candidate in (value, value.rpartition(":")[0]):
        if not candidate:
            continue
        if Path(candidate).exists():
            return Path(candidate).resolve()
        if data is not None and "/" not in candidate and (data / candidate).is_dir():
            return (data / candidate).resolve()
    return None


def _check_target(target: Path, *, directory: bool, overwrite: bool,
                  replacement: Path | None = None) -> None:
    """Refuse what would lose data: replacing a directory by a file (``--output runs/`` must not
    delete ``runs/``), a file by a directory, anything but a file or folder, anything at all
    without ``overwrite``, or a folder holding what its ``replacement`` (once written) does not
    write."""
    refuse_special_output(target)
    if directory and target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} is a file, not a directory: name a new or existing folder")
    if not directory and target.is_dir():
        raise IsADirectoryError(f"{target} is a directory: name a file to write")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists (pass overwrite to replace it)")
    if directory and target.is_dir() and not target.is_symlink():
        refuse_foreign_folder(target, None if replacement is None else marker_of(replacement))


def _sweep_dead_writers(target: Path) -> None:
    """Remove what a killed writer of ``target`` left (SIGKILL runs no cleanup): temporaries and
    replaced-folder leftovers named with a process id that no longer runs. A live writer's are
    kept, so two writers never delete each other's work."""
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*"):
        match = LEFTOVER.fullmatch(leftover.name)
        if match and match.group(1) == target.name and not process_alive(int(match.group(2))):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def sha256_of_files(paths: Iterable[str | os.PathLike]) -> str:
    """SHA-256 of the files' bytes, read in order, one MiB at a time (for one file, what
    ``sha256sum`` prints): a corpus's identity, or whether two inputs are one file's copies."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse a JSON file this package wrote; a damaged one is one message naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: the {what} is damaged (not valid JSON: {e}); write it again "
                        "(rebuild or retrain)") from None


@contextlib.contextmanager
def reading(path: str | os.PathLike, what: str, fix: str,
            errors: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """A library's failure to read ``path`` (Faiss's RuntimeError, a parser's ValueError, text
    that is not UTF-8, and the library's own ``errors``: onnxruntime's) as one message naming
    the file: these come from a missing or damaged file, not from a fault of ours. ``fix``: what
    to do, e.g. "rebuild the index"."""
    path = Path(path)
    try:
        yield
    except (RuntimeError, ValueError, EOFError, OSError, *errors) as e:
        if not path.exists():
            raise UserError(f"{path}: the {what} is missing; {fix}") from None
        if isinstance(e, OSError) and e.errno is not None:
            raise  # the disk or the permissions: said as such by the command
        reason = " ".join(str(e).split())[-160:] or type(e).__name__
        raise UserError(f"{path}: the {what} is damaged ({reason}); {fix}") from None


# A file whose contents a safe load refused: never run, never loaded.
SAFE_LOAD_REFUSAL = "not loaded: it holds code or objects a safe load refuses"


def refused_by_safe_load(error: BaseException) -> bool:
    """Whether torch's weights-only load refused a file for what it holds (a global, i.e. code,
    or an object it may not build) rather than for damage: the two get different messages, and
    torch's own advice (``weights_only=False``, which would run the file) is never passed on."""
    text = str(error)
    return isinstance(error, pickle.UnpicklingError) and ("GLOBAL" in text
                                                          or "add_safe_globals" in text)


def load_array(path: Path, mmap_mode: str | None = None) -> Any:
    """``np.load`` of an index's ``.npy`` file: a pickle or object array in its place (numpy
    refuses it without ``allow_pickle``) or a damaged file is one message naming the file."""

    try:
        return np.load(path, mmap_mode=mmap_mode)
    except (ValueError, EOFError) as e:
        raise _unreadable_array(path, str(e)) from None


def _unreadable_array(path: Path, text: str) -> UserError:
    """Objects (an object array, or a pickle: protocol 2+ starts with byte 0x80) or damage
    (numpy calls any other non-array file "pickled" too); numpy's advice, ``allow_pickle=True``,
    which would run a pickle, is never passed on."""
    with open(path, "rb") as f:
        pickled = "pickled" in text and f.read(1) == b"\x80"
    if pickled or "Object arrays" in text or "Python objects" in text:
        return UserError(f"{path}: {SAFE_LOAD_REFUSAL}; rebuild the index")
    reason = "not a NumPy array file" if "pickled" in text else (text.splitlines() or ["empty"])[0]
    return UserError(f"{path}: the index file is damaged ({reason}); rebuild the index")


# What a pandas DataFrame of query texts and float vectors needs to be rebuilt from a pickle
# (Pyserini's encoded queries: embedding.pkl), under pandas 1.x-3.x and NumPy 1.x-2.x; a pickle
# that names anything else (a function that runs code) is refused before it is called.
_DATAFRAME_GLOBALS = frozenset({
    ("builtins", "slice"),
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("pandas", "DataFrame"), ("pandas", "Index"), ("pandas", "RangeIndex"),
    ("pandas", "StringDtype"), ("pandas.core.frame", "DataFrame"),
    ("pandas.core.indexes.base", "_new_Index"), ("pandas.core.indexes.base", "Index"),
    ("pandas.core.indexes.range", "RangeIndex"),
    ("pandas.core.internals.managers", "BlockManager"),
    ("pandas.core.internals.blocks", "new_block"), ("pandas._libs.internals", "_unpickle_block"),
    ("pandas.arrays", "ArrowStringArray"), ("pandas.core.arrays.string_", "StringDtype"),
    ("pandas.core.arrays.string_arrow", "ArrowStringArray"),
    ("pyarrow.lib", "_restore_array"), ("pyarrow.lib", "py_buffer"),
    ("pyarrow.lib", "type_for_alias"),
})


class _Refused(pickle.UnpicklingError):
    """The pickle names a global outside the allowed ones (raised before it is called)."""


def _validated_arrow_array(data: tuple) -> Any:
    """``pyarrow.lib._restore_array`` for a pickle from elsewhere: pandas 3 pickles its string
    columns as Arrow arrays, whose offsets pyarrow trusts; a crafted offset past the data made
    the process read out of bounds (SIGSEGV). The array is rebuilt from its buffers and checked
    in full (every offset inside its data) before anything reads it; nested arrays, which such a
    table has none of, are refused."""
    import pyarrow as pa  # noqa: PLC0415 - only a pandas-3 pickle needs it

    if not isinstance(data, tuple) or len(data) != 7:
        raise _Refused("an Arrow array in a form this reader does not know")
    arrow_type, length, null_count, offset, buffers, children, dictionary = data
    if children or dictionary is not None:
        raise _Refused("a nested Arrow array, which a table of query texts does not need")
    array = pa.Array.from_buffers(arrow_type, length, list(buffers), null_count=null_count,
                                  offset=offset)
    array.validate(full=True)  # ArrowInvalid (a ValueError) for offsets outside the data
    return array


# Globals replaced by a checked form when a pickle names them.
_CHECKED_GLOBALS = {("pyarrow.lib", "_restore_array"): _validated_arrow_array}


class _DataFrameUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _DATAFRAME_GLOBALS:
            raise _Refused(f"it names {module}.{name}, which a table of query vectors does not "
                           "need")
        return _CHECKED_GLOBALS.get((module, name)) or super().find_class(module, name)


def read_dataframe_pickle(path: Path) -> Any:
    """A pandas DataFrame pickle (Pyserini's ``embedding.pkl``), loaded by an unpickler that
    builds only what such a table is made of: a pickle that would run anything else is one
    error line naming the file, and is never run."""
    try:
        with open(path, "rb") as f:
            frame = _DataFrameUnpickler(f).load()
    except _Refused as e:
        raise UserError(f"{path}: {SAFE_LOAD_REFUSAL} ({e})") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError) as e:
        raise UserError(f"{path}: not a readable pickle of a table ({type(e).__name__}: "
                        f"{(str(e).splitlines() or [''])[0]})") from None
    return frame


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping: YAML keeps the last
    one in silence, so a block pasted twice in a recipe would quietly replace the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:  # the keys as written (a merge key's may repeat them)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            if (key_node.tag, key_node.value) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key_node.value!r} is written twice in one mapping",
                    key_node.start_mark)
            seen.add((key_node.tag, key_node.value))
        return super().construct_mapping(node, deep=deep)


# The most values a YAML file may expand to, its aliases followed: the largest paper file has a
# few thousand; nested aliases (the "billion laughs") reach billions from a few lines, and any
# message or check that walks the values would exhaust memory.
MAX_YAML_NODES = 100_000


def _expanded_size(node: yaml.Node, seen: dict[int, int]) -> int:
    """How many values ``node`` stands for with every alias expanded, counted without expanding
    (each shared node once, memoised), so the count itself is cheap."""
    key = id(node)
    if key in seen:
        return seen[key]
    seen[key] = 1  # a node that contains itself counts once
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, seen) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, seen) + _expanded_size(v, seen) for k, v in node.value)
    else:
        size = 1
    seen[key] = min(size, 10 * MAX_YAML_NODES)  # no huge integers from a deep bomb
    return seen[key]


def read_yaml(path: str | os.PathLike, what: str, error: type[ValueError]) -> object:
    """Parse a YAML file; a missing file, bad YAML or a key written twice in one mapping is one
    message naming ``what`` and the path."""

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a {what}: name the YAML file")
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        loader = _UniqueKeyLoader(path.read_text(encoding="utf-8"))
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            size = _expanded_size(node, {})
            if size > MAX_YAML_NODES:
                raise error(f"{path}: its aliases expand to more than {MAX_YAML_NODES:,} "
                            f"values: not a {what} but a way to exhaust memory")
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {_yaml_problem(e)}") from None
    except UnicodeDecodeError as e:
        if path.read_bytes()[:2] == GZIP_MAGIC:
            raise error(f"{path}: gzip-compressed: gunzip the {what}") from None
        raise error(f"{path}: not UTF-8 text (byte {e.start}); save the {what} as UTF-8") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what is wrong and where (its own text quotes the source over
    several lines)."""
    if not isinstance(e, yaml.MarkedYAMLError) or e.problem is None:
        return " ".join(str(e).split())
    where = f"line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}" \
        if e.problem_mark is not None else ""
    context = f" ({e.context} at line {e.context_mark.line + 1})" \
        if e.context and e.context_mark is not None else ""
    return f"{where}: {e.problem}{context}" if where else f"{e.problem}{context}"


# --------------------------------------------------------------------------- line-level readers


def is_stream(path: Path) -> bool:
    """A pipe or a character device (``<(command)``, ``/dev/stdin``): readable once only."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


@contextlib.contextmanager
def read_once(path: Path) -> Iterator[Path]:
    """``path`` as a regular file: a pipe (``--topics <(grep ...)``) is copied once into a
    temporary file, since the readers look at a file's first line before they read it all;
    a regular file is yielded as it is."""
    if not is_stream(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="pyserini-moe-stream-") as folder:
        copy = Path(folder) / path.name
        with open(path, "rb") as source, open(copy, "wb") as target:
            shutil.copyfileobj(source, target)
        yield copy


@contextlib.contextmanager
def open_text_output(tmp: Path, target: Path) -> Iterator[IO[str]]:
    """UTF-8 text into ``tmp`` (an :func:`atomic_path` temporary), gzipped when
    ``target``'s name ends in ``.gz``: every reader here decompresses by that suffix
    (:func:`open_binary`), so plain text under a ``.gz`` name was a file the
    toolkit wrote and then refused. The gzip header names ``target``, not the temporary."""
    if not target.name.endswith(".gz"):
        with tmp.open("w", encoding="utf-8") as f:
            yield f
        return
    with tmp.open("wb") as raw, gzip.GzipFile(target.name, "wb", fileobj=raw) as packed, \
            io.TextIOWrapper(packed, encoding="utf-8") as f:
        yield f


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading, gunzipping it when its name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return path.open("rb")


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line without its newline)`` for each non-blank UTF-8 line.

    Lines are decoded one by one (a text-mode reader decodes in blocks and would blame the wrong
    line), and undecodable bytes or a broken gzip stream become a :class:`DataFormatError` at the
    line where they occur. A UTF-8 byte-order mark at the start is ignored.
    """
    lineno = 0
    handle = open_binary(path)  # a missing file raises FileNotFoundError, not a format error
    with handle:
        try:
            for lineno, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    # a gzip stream under a name without .gz: say so, not where UTF-8 broke
                    gzipped = lineno == 1 and raw.startswith(GZIP_MAGIC)
                    why = ("gzip-compressed: name it with .gz, or gunzip it" if gzipped else
                           f"not valid UTF-8 ({e.reason} at byte {e.start})")
                    raise DataFormatError(path, why, lineno) from e
                if line.strip():
                    yield lineno, line
        except (OSError, EOFError, zlib.error) as e:
            raise DataFormatError(path, f"unreadable or truncated file ({e})", lineno + 1) from e


# A JSON escape of a UTF-16 surrogate (``\ud800``): alone, it decodes to half a character.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_record(path: str | os.PathLike, lineno: int | None, text: str) -> Any:
    """One JSON value of a data file (a JSON-lines line), or one line naming file and line: the
    JSON malformed, or a string holding half of a UTF-16 surrogate pair (a lone ``\\ud800``
    escape), which no tokenizer, Lucene or UTF-8 writer takes (a traceback deep in indexing or
    search). Lines without a surrogate escape are not checked again."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(path, f"malformed JSON ({e.msg} at column {e.colno})",
                              e.lineno if lineno is None else lineno) from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise DataFormatError(path, f"holds {e.object[e.start]!r}, half of a UTF-16 surrogate "
                                        "pair (a lone \\uXXXX escape), not a character: fix the "
                                        "file's encoding", lineno) from None
    return value


def check_path(value: object, what: str, kind: str = "file") -> Path:
    """A path argument of the Python API: a string or path naming something (``""`` would be the
    current folder, ``b"x"`` or ``None`` would be their spelling), else one line naming it."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        given = repr(value) if isinstance(value, (str, bytes)) or value is None \
            else f"(a {type(value).__name__})"  # a model's or a table's repr runs to KBs
        raise UserError(f"{what} {given}: give a {kind} path (a string or pathlib.Path)")
    return Path(value)

