"""Atomic outputs: write to a temporary sibling, rename into place only on success."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, directory: bool = False,
                overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it to ``target`` if the block succeeds.

    A crash or exception leaves ``target`` untouched (a previous version survives) and removes the
    temporary, so nothing half-written ever sits at ``target``.
    """
    target = Path(target)
    _check_target(target, directory=directory, overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead_writers(target)
    prefix = f".{target.name}.tmp-{os.getpid()}-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    # mkstemp / mkdtemp create owner-only entries; the output gets what a plain open() would give
    tmp.chmod((0o777 if directory else 0o666) & ~_umask())
    try:
        yield tmp
        # Checked again: another writer may have created the target (or a directory stood up in
        # its place) while this one worked.
        _check_target(target, directory=directory, overwrite=overwrite)
        if target.is_dir() and not target.is_symlink():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


# What a rename over the output path would replace besides a file or folder: the link itself
# (its target keeps the old content, the link becomes a file) or a system's node (/dev/null).
_SPECIAL_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                  (stat.S_ISSOCK, "a socket"))


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


def _check_target(target: Path, *, directory: bool, overwrite: bool) -> None:
    """Refuse what would lose data: replacing a directory by a file (``--output runs/`` must not
    delete ``runs/``), a file by a directory, anything but a file or folder, or anything at all
    without ``overwrite``."""
    refuse_special_output(target)
    if directory and target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} is a file, not a directory: name a new or existing folder")
    if not directory and target.is_dir():
        raise IsADirectoryError(f"{target} is a directory: name a file to write")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists (pass overwrite to replace it)")


def _sweep_dead_writers(target: Path) -> None:
    """Remove what a killed writer of ``target`` left (SIGKILL runs no cleanup): temporaries and
    replaced-folder leftovers named with a process id that no longer runs. A live writer's are
    kept, so two writers never delete each other's work."""
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*"):
        match = re.fullmatch(rf"\.{re.escape(target.name)}\.(?:tmp|old)-(\d+)(?:-.*)?",
                             leftover.name)
        if match and not _alive(int(match.group(1))):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
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


def read_yaml(path: str | os.PathLike, what: str, error: type[ValueError]) -> object:
    """Parse a YAML file; a missing file or bad YAML is one message naming ``what`` and the path."""
    import yaml  # noqa: PLC0415

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None
