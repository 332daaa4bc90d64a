"""Run a command and measure it: wall time, peak memory of its whole process tree, peak disk.

Memory is the sum over the process and every descendant (tokenizer workers, the JVM inside the
process) of the proportional set size (``Pss`` in ``/proc/<pid>/smaps_rollup``: pages shared by
forked workers counted once), sampled every :data:`INTERVAL` seconds, so a peak shorter than
that can be missed. Disk is the size of the given folders, sampled every :data:`DISK_EVERY`
samples and once at the end.
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


def folder_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it does not exist)."""
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def run_measured(argv: Sequence[str], *, watch: Sequence[Path] = (), env: dict[str, str] | None
                 = None, log: Path | None = None, cwd: Path | None = None) -> Measurement:
    """Run ``argv`` to completion, its output into ``log`` (else inherited), sampling as it
    runs."""
    baseline = sum(folder_size(f) for f in watch)
    out = open(log, "w", encoding="utf-8") if log else None  # noqa: SIM115 (closed below)
    try:
        start = time.monotonic()
        process = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT if out else None)
        peak_memory = peak_disk = 0
        samples = 0
        while process.poll() is None:
            peak_memory = max(peak_memory, tree_memory(process.pid))
            if samples % DISK_EVERY == 0:
                peak_disk = max(peak_disk, sum(folder_size(f) for f in watch) - baseline)
            samples += 1
            time.sleep(INTERVAL)
        seconds = time.monotonic() - start
    finally:
        if out:
            out.close()
    peak_disk = max(peak_disk, sum(folder_size(f) for f in watch) - baseline)
    return Measurement(seconds, peak_memory, peak_disk, process.returncode)
