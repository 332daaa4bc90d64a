"""Index builds in child processes, each with its wall time, its own peak memory and the peak
disk it filled (the index and its scratch); an index another section built is handed back with
its measurements."""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pyserini_moe.errors import UserError


@dataclass
class Process:
    seconds: float
    peak_mb: float
    peak_disk_mb: float = math.nan  # growth of the watched folder at its largest (run_process)


# Run a module and report its own peak resident memory (VmHWM of the process's memory map) as
# it exits. The kernel's ru_maxrss would also count the parent's pages copied at fork.
_PEAK_WRAPPER = """
import atexit, runpy, sys
def _peak():
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith('VmHWM:'):
                sys.stderr.write('\\n__peak_kb__ ' + line.split()[1] + '\\n')
atexit.register(_peak)
module = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""


def run_process(module: str, args: list[str], watch: Path | None = None) -> Process:
    """Run ``python -m module args`` in a child process: its wall time and peak memory, and with
    ``watch`` (a folder the output goes into) the most bytes the folder grew by while it ran,
    sampled every 0.25 s: what a build needs free on its disk, scratch included. The child's
    temporary files go under ``watch`` too (``TMPDIR``), so a scratch folder in the system's
    temp is counted. A child that refuses a setting (exit 2, an ``error:`` line) is a
    :class:`UserError` with that line; any other failure a RuntimeError with the end of its
    stderr."""
    env = None
    if watch is not None:
        (watch / ".tmp").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(watch / ".tmp")}
    start = time.perf_counter()
    with _DiskWatch(watch) as disk:
        proc = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, module, *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env)
    if proc.returncode != 0:
        said = [line for line in proc.stderr.splitlines()
                if line.strip() and not line.startswith("__peak_kb__ ")]
        if proc.returncode == 2 and said and said[-1].startswith("error: "):
            # the command's own one-line refusal of a setting: said as such, without a traceback
            raise UserError(f"python -m {module} {shlex.join(args)}: {said[-1][len('error: '):]}")
        raise RuntimeError(f"python -m {module} {shlex.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    peaks = [line.split()[1] for line in proc.stderr.splitlines()
             if line.startswith("__peak_kb__ ")]
    return Process(time.perf_counter() - start, int(peaks[-1]) / 1024 if peaks else math.nan,
                   disk.peak_mb)


class _DiskWatch:
    """Samples a folder's size in a background thread; ``peak_mb``: its largest growth over the
    size it had on entry (NaN without a folder)."""

    def __init__(self, folder: Path | None, every: float = 0.25) -> None:
        self.folder, self.every = folder, every
        self.peak_mb = math.nan
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="disk-watch", daemon=True)

    def __enter__(self) -> _DiskWatch:
        if self.folder is not None:
            self._start, self._peak = _bytes_in(self.folder), 0
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.folder is not None:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, _bytes_in(self.folder) - self._start)
            self.peak_mb = self._peak / 2 ** 20

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self._peak = max(self._peak, _bytes_in(self.folder) - self._start)


def _bytes_in(folder: Path) -> int:
    """Bytes of the files under ``folder`` now (a link counts as itself, not as what it points
    to: what it takes on the disk); a file renamed or deleted while it is walked (a build
    moving its output into place) is skipped."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def onnx_export(encoder: str, out: Path, int8: bool) -> str:
    """``encoder`` exported to ONNX (int8: onnxruntime's dynamic quantisation) into ``out``, in
    a child process, once per bench folder."""
    if not out.exists():
        run_process("pyserini_moe.export", ["--encoder", encoder, "--output", str(out),
                                            *(["--int8"] if int8 else [])])
    return str(out)


class Indexes:
    """Index builds of this run, each in its own process, keyed by what they encode: a section
    asking for an index another one built gets it back with its time and peak memory."""

    def __init__(self, work: Path, max_length: int, device: str = "cpu") -> None:
        self.work, self.max_length, self.device = work, max_length, device
        self.built: dict[tuple[tuple[str, ...], str, str | None], tuple[list[Path], Process]] = {}

    def build(self, kinds: tuple[str, ...], corpus: str, encoder: str | None,
              names: list[str], *extra: str) -> tuple[list[Path], Process]:
        """Indexes of ``kinds`` (several: one encoding pass) into ``work/<name>``."""
        key = (kinds + extra, corpus, encoder)
        if key not in self.built:
            paths = [self.work / name for name in names]
            args = ["--retriever", *kinds, "--corpus", corpus, "--index", *map(str, paths),
                    "--overwrite", "--quiet", *extra]
            if encoder is not None:  # BM25 reads no passage length (refused if given)
                args += ["--encoder", encoder, "--device", self.device, "--max-length",
                         str(self.max_length)]
            self.built[key] = (paths, run_process("pyserini_moe.index", args, watch=self.work))
        return self.built[key]


def folder_mb(path: Path) -> float:
    return _bytes_in(path) / 2 ** 20
