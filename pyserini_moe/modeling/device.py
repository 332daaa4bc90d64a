"""Where a model runs and in what precision: device names checked in one line, CUDA when
present, and the CPU's bfloat16 support (``--bf16`` pays off only with its instructions)."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import torch

from pyserini_moe.errors import UserError

log = logging.getLogger(__name__)

# Encode-time autocast types (``RetrievalModel.set_precision``; Pyserini's --fp16, and --bf16).
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "fp16": torch.float16,
                                             "bf16": torch.bfloat16}
# CPU flags of bfloat16 instructions: without one, PyTorch emulates bfloat16 (4.4x slower than
# float32 as measured on an AVX2 CPU).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has bfloat16 instructions (Linux's /proc/cpuinfo flags; elsewhere unknown,
    taken as no): ``--bf16`` pays off on CPU only with them."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    flags = next((line.partition(":")[2].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    return any(flag in flags for flag in BF16_CPU_FLAGS)


@functools.cache
def _say_bf16_is_emulated() -> None:
    """Once a process: every model of a fused search would say it again."""
    log.warning("this CPU has no bfloat16 instructions (%s): --bf16 is emulated here and slower "
                "than float32; leave it out", " or ".join(BF16_CPU_FLAGS))


def default_device() -> torch.device:
    """CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_device(spec: str | torch.device | None) -> torch.device:
    """``spec`` as a device this machine has (None: :func:`default_device`); one error line
    for a name torch does not know or CUDA that is not there."""
    if spec is None or spec == "auto":
        return default_device()
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UserError(f"--device {spec!r}: not a device name (cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {str(spec)!r} requested but CUDA is not available")
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"--device {spec!r}: only cpu and cuda are supported")
    return device


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# Processes beyond the usable cores only contend, and each costs a few hundred MB: above this
# many times the cores a refusal (12 tokenizer workers on 2 cores took 126 s and 4 GB for 4
# documents). Threads are cheap, so Pyserini's habit of ``--threads 16`` on any machine is only
# warned about; the refusal is where Java's thread pools refuse (Lucene's indexer takes at most
# 32,767, ForkJoinPool's limit).
PROCESSES_PER_CORE_REFUSED = 4
MAX_THREADS = 32_767


def check_parallelism(flag: str, count: int, processes: bool = False) -> None:
    """One rule for every thread or worker count a command takes (``--threads``,
    ``--tokenizer-workers``): at least 1, a warning above the usable cores, a refusal far above
    (4x the cores for ``processes``, else Java's thread limit)."""
    if count < 1:
        raise UserError(f"{flag} must be >= 1")
    cores = usable_cores()
    if processes and count > PROCESSES_PER_CORE_REFUSED * cores:
        raise UserError(f"{flag} {count}: this machine has {cores} usable core(s); use at most "
                        f"{cores} (more only contend)")
    if count > MAX_THREADS:
        raise UserError(f"{flag} {count}: at most {MAX_THREADS} threads (Java's limit); this "
                        f"machine has {cores} usable core(s)")
    if count > cores:
        _warn_contention(flag, count, cores)


@functools.cache
def _warn_contention(flag: str, count: int, cores: int) -> None:
    """Said once a process: settings checked again (a search's settings copied for another
    depth) said it twice."""
    log.warning("%s %d is above the %d usable core(s): they contend for them; %d is the most "
                "that helps", flag, count, cores, cores)
