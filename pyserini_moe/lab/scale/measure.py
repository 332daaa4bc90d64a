"""Run a command and measure it: wall time, peak memory of its whole process tree, peak disk.

Memory is the sum over the process and every descendant (tokenizer workers, the JVM inside the
process) of the proportional set size (``Pss`` in ``/proc/<pid>/smaps_rollup``: pages shared by
forked workers counted once), sampled every :data:`INTERVAL` seconds, so a peak shorter than
that can be missed. Disk is what the command wrote into the given folders: the files new or
changed since it started (a file it replaces counts whole, one left alone not at all), sampled
every :data:`DISK_EVERY` samples and once at the end. CPU time is the process tree's (user and
system, from the kernel's accounting of the waited-for tree): against the wall time and the
threads it says whether a command had its cores to itself.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

INTERVAL = 0.25
DISK_EVERY = 20


@dataclasses.dataclass
class Measurement:
    """What one command used."""

    seconds: float
    peak_memory: int  # bytes, process tree
    peak_disk: int  # bytes, the watched folders
    returncode: int
    cpu_seconds: float = 0.0  # user + system, the process tree


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> list[int]:
    tree = _children()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, []))
    return found


def _memory(pid: int) -> int:
    """Pss of one process in bytes (VmRSS where smaps_rollup is unreadable); 0 once it is gone."""
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path, encoding="ascii") as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024
        except OSError:
            continue
    return 0


def tree_memory(pid: int) -> int:
    """The process tree's memory now, in bytes."""
    return sum(_memory(p) for p in _descendants(pid))


Stamps = dict[str, tuple[int, int]]  # path -> (inode, mtime in ns)


def _files(folder: Path) -> dict[str, os.stat_result]:
    found = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                found[path] = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
    return found


def stamps(folders: Sequence[Path]) -> Stamps:
    """Each file under ``folders`` as it is now: what a command found there before it ran."""
    return {path: (st.st_ino, st.st_mtime_ns)
            for folder in folders for path, st in _files(folder).items()}


def written_size(folders: Sequence[Path], before: Stamps) -> int:
    """Bytes of the files under ``folders`` that are new or changed since ``before``."""
    return sum(st.st_size for folder in folders for path, st in _files(folder).items()
               if before.get(path) != (st.st_ino, st.st_mtime_ns))


def run_measured(argv: Sequence[str], *, watch: Sequence[Path] = (), env: dict[str, str] | None
                 = None, log: Path | None = None, cwd: Path | None = None) -> Measurement:
    """Run ``argv`` to completion, its output into ``log`` (else inherited), sampling as it
    runs."""
    before = stamps(watch)
    out = open(log, "w", encoding="utf-8") if log else None  # noqa: SIM115 (closed below)
    try:
        start = time.monotonic()
        process = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT if out else None)
        peak_memory = peak_disk = 0
        samples = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak_memory = max(peak_memory, tree_memory(process.pid))
            if samples % DISK_EVERY == 0:
                peak_disk = max(peak_disk, written_size(watch, before))
            samples += 1
            time.sleep(INTERVAL)
        seconds = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    finally:
        if out:
            out.close()
    peak_disk = max(peak_disk, written_size(watch, before))
    return Measurement(seconds, peak_memory, peak_disk, process.returncode,
                       usage.ru_utime + usage.ru_stime)
