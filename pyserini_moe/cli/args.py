"""Argument groups several commands share, defined once (Pyserini's ``define_*_args`` habit), and
what they mean: ``--encoder-option`` parsing and the ``--backend`` export cache."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError


def add_encoder_option_arg(group: Any, help_text: str) -> None:
    """``--encoder-option NAME=VALUE`` (repeatable): an encode-time option of the model."""
    group.add_argument("--encoder-option", action="append", default=[], metavar="NAME=VALUE",
                       help=help_text)


def add_zero_shot_args(group: Any) -> None:
    """How a backbone used zero-shot encodes (Pyserini's ``--encoder-class auto`` flags); each
    defaults to the model's sentence-transformers configuration, else mean pooling + L2 norm."""
    group.add_argument("--pooling", choices=("cls", "mean", "max"), default=None,
                       help="zero-shot backbones: pooling (default: as the model's "
                            "sentence-transformers configuration says, else mean)")
    group.add_argument("--l2-norm", action=argparse.BooleanOptionalAction, default=None,
                       dest="normalize",
                       help="zero-shot backbones: L2-normalise the vectors (default: as the "
                            "model's configuration says, else yes)")
    group.add_argument("--query-prefix", default=None, metavar="TEXT",
                       help="zero-shot backbones: put TEXT before every query, e.g. 'query: ' "
                            "(default: the model's sentence-transformers 'query' prompt, else "
                            "none); recorded in the index, so searches use it too")
    group.add_argument("--passage-prefix", default=None, metavar="TEXT",
                       help="zero-shot backbones: put TEXT before every passage, e.g. "
                            "'passage: ' (default: the model's 'passage' / 'document' prompt)")


def zero_shot_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The zero-shot flags given (see :func:`add_zero_shot_args`)."""
    names = ("pooling", "normalize", "query_prefix", "passage_prefix")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def add_device_arg(group: Any, default: str | None = None, note: str = "") -> None:
    """``--device``, the same name, values and default in every command: ``auto`` (None: CUDA
    when present), ``cpu``, ``cuda``, ``cuda:N``; checked where a model is loaded
    (``modeling.device.check_device``: one error line for a name torch does not know or CUDA that
    is not there)."""
    shown = "CUDA when present" if default is None else default
    group.add_argument("--device", default=default,
                       help=f"auto, cpu, cuda, cuda:1 ... (default: {shown}){note}")


def add_device_args(group: Any) -> None:
    """``--device`` and the encode precision, ``--fp16`` (Pyserini's flag) or ``--bf16``, stored
    as ``args.precision`` (see ``RetrievalModel.set_precision``)."""
    add_device_arg(group)
    half = group.add_mutually_exclusive_group()
    half.add_argument("--fp16", dest="precision", action="store_const", const="fp16",
                      default="fp32", help="encode under float16 autocast (CUDA only)")
    half.add_argument("--bf16", dest="precision", action="store_const", const="bf16",
                      help="encode under bfloat16 autocast (CUDA, or a CPU with bfloat16 "
                           "instructions: ~2.5x faster there, vectors within 3e-5 cosine; "
                           "emulated and slower than float32 on other CPUs, which it says)")


def add_backend_arg(group: Any, help_text: str) -> None:
    """``--backend torch | onnx | onnx-int8``: see :func:`backend_encoder`."""
    group.add_argument("--backend", choices=BACKENDS, default="torch", help=help_text)


def parse_options(settings: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` strings -> options; the model checks names and values."""
    options = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UserError(f"--encoder-option {setting!r}: expected NAME=VALUE, e.g. "
                            "inference=all")
        name, value = name.strip(), value.strip()
        if name in options and options[name] != value:
            raise UserError(f"--encoder-option {name} is given twice ({options[name]} and "
                            f"{value}): give it once")
        options[name] = value
    return options


BACKENDS = ("torch", "onnx", "onnx-int8")


def backend_encoder(spec: str, backend: str, options: dict[str, Any] | None = None) -> str:
    """The ``--encoder`` to use for ``--backend``: ``spec`` itself for torch (or when it already
    is an ONNX export); otherwise its export, made by ``python -m pyserini_moe.export`` in its own
    process (tracing is memory-hungry and leaves state behind) and cached: inside a saved model
    folder (``<model>/onnx/<fp32|int8>[-option=value...]``), else under
    ``~/.cache/pyserini_moe/onnx/``. A cached export made from other weights is replaced."""
    from pyserini_moe.modeling.folder import is_saved_model  # torch: only when used
    from pyserini_moe.modeling.onnx import ONNX_FILE, is_onnx_export

    if backend not in BACKENDS:
        raise UserError(f"unknown backend {backend!r}; choose from {BACKENDS}")
    if backend == "torch":
        return spec
    int8 = backend == "onnx-int8"
    if is_onnx_export(spec):
        exported_int8 = bool(json.loads((Path(spec) / ONNX_FILE).read_text()).get("int8"))
        if exported_int8 != int8:
            fitting = "onnx-int8" if exported_int8 else "onnx"
            raise UserError(f"{spec} is an {'int8' if exported_int8 else 'fp32'} ONNX export, "
                            f"not {backend}; pass --backend {fitting}")
        return spec
    options = options or {}
    name = "-".join(["int8" if int8 else "fp32"] + [f"{k}={v}" for k, v in sorted(options.items())])
    root = Path(spec) / "onnx" if is_saved_model(spec) else \
        Path.home() / ".cache" / "pyserini_moe" / "onnx" / re.sub(r"[^\w.-]+", "_", spec)
    out = root / name
    if is_onnx_export(out) and _exported_from(out, spec, options, int8):
        return str(out)
    command = [sys.executable, "-m", "pyserini_moe.export", "--encoder", spec, "--output",
               str(out), "--overwrite", *(["--int8"] if int8 else []),
               *[arg for k, v in sorted(options.items()) for arg in ("--encoder-option", f"{k}={v}")]]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else \
            f"exit {done.returncode}"
        raise UserError(f"ONNX export of {spec} failed: {last}")
    return str(out)


def _exported_from(export_dir: Path, spec: str, options: dict[str, Any], int8: bool) -> bool:
    """Whether ``export_dir`` is what exporting ``spec``'s current weights would write now: the
    precision asked for (an fp32 export written by hand into ``onnx/int8`` once served int8
    searches), the same weights and, for int8, the current quantisation scheme (both are in its
    fingerprint)."""
    from pyserini_moe.modeling.auto import load_encoder
    from pyserini_moe.modeling.folder import fingerprint
    from pyserini_moe.modeling.onnx import ONNX_FILE, export_fingerprint

    exported = json.loads((export_dir / ONNX_FILE).read_text())  # the export's, not an index's
    if bool(exported.get("int8")) != int8:
        return False
    current = fingerprint(load_encoder(spec, device="cpu", options=options))
    return exported.get("fingerprint") == export_fingerprint(current, bool(exported.get("int8")))
