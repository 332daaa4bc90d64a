"""The bench's report: sections of rows, targets marked met / not met, and the run's description
(CPU and its instruction sets, percentiles)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Report:
    """Everything measured, and the targets checked against it."""

    sections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def add(self, section: str, **row: Any) -> None:
        self.sections.setdefault(section, []).append(row)

    def target(self, name: str, value: float, threshold: float, higher: bool = True,
               unit: str = "x") -> None:
        met = value >= threshold if higher else value <= threshold
        gap = (value / threshold if threshold else float("inf")) if higher else \
            (threshold / value if value else float("inf"))
        self.targets.append({"target": name, "measured": round(value, 4), "unit": unit,
                             "threshold": f"{'>=' if higher else '<='} {threshold}",
                             "met": met, "ratio_to_target": round(gap, 3)})

    def markdown(self) -> str:
        lines = ["# pyserini-moe benchmark", ""]
        for section, rows in self.sections.items():
            lines += [f"## {section}", "", _table(rows), ""]
        if self.targets:  # a sitting of sections without targets (e.g. scaling alone) has none
            lines += ["## targets", "", _table([{**t, "met": "met" if t["met"] else
                                                 f"NOT met ({t['ratio_to_target']:.2f} of target)"}
                                                for t in self.targets]), ""]
        return "\n".join(lines)


def _table(rows: list[dict[str, Any]]) -> str:
    headers = list(dict.fromkeys(k for row in rows for k in row))
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] +
                     ["| " + " | ".join(fmt(row.get(h, "")) for h in headers) + " |"
                      for row in rows])


# Instruction sets that move the PyTorch / onnxruntime ratios (int8 above all) from one CPU to
# the next; the run table names them so two bench files can be told apart.
_ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")


def device_name(device: str) -> str:
    """``cpu`` for every CPU spelling ``--device`` takes (``cpu``, ``cpu:N``: torch has one CPU
    device), else the CUDA device's name."""
    import torch  # noqa: PLC0415 - the report is read by bench's flags: not for --help

    if torch.device(device).type == "cpu":
        return "cpu"
    return torch.cuda.get_device_name(torch.device(device))


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name and which of :data:`_ISA_FLAGS` it has ("unknown" off Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown"
    fields = {key.strip(): value.strip() for key, value in
              (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f for f in _ISA_FLAGS if f in flags)
    return f"{fields.get('model name', 'unknown')} ({isa or 'no avx2'})"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
