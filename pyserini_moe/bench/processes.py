"""Index builds in child processes, each with its wall time and its own peak memory; an index
another section built is handed back with its measurements."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyserini_moe.errors import UserError


@dataclass
class Process:
    seconds: float
    peak_mb: float


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


def run_process(module: str, args: list[str]) -> Process:
    """Run ``python -m module args`` in a child process: its wall time and peak memory. A child
    that refuses a setting (exit 2, an ``error:`` line) is a :class:`UserError` with that line;
    any other failure a RuntimeError with the end of its stderr."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PEAK_WRAPPER, module, *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
    return Process(time.perf_counter() - start, int(peaks[-1]) / 1024 if peaks else float("nan"))


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
            self.built[key] = (paths, run_process("pyserini_moe.index", args))
        return self.built[key]


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2 ** 20
