"""ONNX graphs of any model, run by onnxruntime (CPU, or CUDA when its provider is present).

``export`` writes one graph per (side, representation): the side is fixed inside the graph, so
each MoE model's routing for that side (TASER's and CoT-MoTE's query / passage experts, SB-MoE's
gate, CAME's expert stacks) and its pooling are part of it; inputs are ``input_ids`` and
``attention_mask`` with dynamic batch and length. Impact models export their vocabulary weights;
quantisation to integers happens in the impact adapter, with the factor stored in the index, as
for PyTorch. They also get ``query-sparse-anserini.onnx``, the form Anserini's own ONNX query
encoders run (its ``SpladePlusPlusEncoder``): one query, inputs ``input_ids``, ``token_type_ids``,
``attention_mask``, outputs ``output_idx`` (vocabulary ids of the non-zero terms) and
``output_weights`` (their float weights), which Anserini quantises itself (round(w / 5 * 256)) and
maps to tokens with the ``vocab.txt`` saved beside it. ``int8=True`` adds onnxruntime's dynamic
int8 quantisation of the weights (faster, but the vectors change: such an export has its own
fingerprint, so an index built with it is searched with it).

:class:`OnnxModel` answers the calls the Pyserini adapters, index builders and searchers make
on a :class:`~pyserini_moe.modeling.base.RetrievalModel` (``encode``, ``tokenize``,
``representations``, ...), so ``--encoder <export folder>`` works wherever a model folder does.
Export in its own process (``python -m pyserini_moe.export``): tracing a model is memory-hungry
and leaves state behind in the exporting process.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, read_json, reading
from pyserini_moe.modeling.backbone import read_tokenizer
from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side, text_prefix, tokenize
from pyserini_moe.modeling.folder import fingerprint, recorded_query_length
from pyserini_moe.modeling.lengths import encode_length

ONNX_FILE = "pyserini_moe_onnx.json"
FORMAT = "pyserini-moe-onnx/1"


class _SideGraph(nn.Module):
    """The model with its side and representation fixed: (input_ids, attention_mask) -> tensor."""

    def __init__(self, model: RetrievalModel, side: Side, representation: str) -> None:
        super().__init__()
        self.model, self.side, self.representation = model, side, representation

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        only = {"only": self.representation} if len(self.model.representations) > 1 else {}
        return getattr(self.model(input_ids, attention_mask, self.side, **only),
                       self.representation)


class _AnseriniSparseGraph(nn.Module):
    """One query -> (output_idx, output_weights) of its non-zero terms, Anserini's graph form."""

    def __init__(self, model: RetrievalModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        del token_type_ids  # Anserini feeds zeros; our models read one segment
        only = {"only": "sparse"} if len(self.model.representations) > 1 else {}
        weights = self.model(input_ids, attention_mask, Side.QUERY, **only).sparse[0]
        idx = torch.nonzero(weights > 0).squeeze(1)
        return idx, weights[idx]


@contextlib.contextmanager
def _quiet_export() -> Iterator[None]:
    """The exporter's progress lines and tracer warnings (about shapes it handles) say nothing to
    a user who asked for an export; errors still raise."""

    onnx_log = logging.getLogger("torch.onnx")
    level = onnx_log.level
    onnx_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        onnx_log.setLevel(level)


ANSERINI_SPARSE = "query/sparse-anserini"
ANSERINI_SPARSE_FILE = "query-sparse-anserini.onnx"


# The int8 scheme, part of an int8 export's fingerprint so that an index built with one scheme is
# never searched with another. "matmul-per-channel": int8 weights of the MatMuls with one scale
# per output column; embedding tables (and so a vocabulary projection tied to them) stay fp32.
# Measured on CAME's protocol model (96 SciFact passages, cosine to fp32): onnxruntime's default
# (one scale per tensor, embedding tables quantised too) dense 0.952 / lexical 0.812 /
# token vectors 0.946, which cost fused CAME 0.026 nDCG@10; this scheme 0.996 / 0.958 / 0.991.
# Keeping the tables fp32 is ~0.005 of that and costs no speed (a table is a lookup).
INT8_SCHEME = "matmul-per-channel"


def export_fingerprint(source_fingerprint: str, int8: bool) -> str:
    """An export's identity: fp32 graphs compute what the model computes (within float error), so
    they share its fingerprint; int8 changes the vectors, so it is another encoder per scheme."""
    return f"{source_fingerprint}-int8-{INT8_SCHEME}" if int8 else source_fingerprint


def is_int8_fingerprint(fingerprint: str) -> bool:
    """Whether an index recorded ``fingerprint`` from an int8 export (:func:`export_fingerprint`)."""
    return "-int8-" in fingerprint


def graph_file(side: Side | str, representation: str) -> str:
    return f"{Side(side).value}-{representation}.onnx"


def export(model: RetrievalModel, output_dir: str | os.PathLike, source: str,
           int8: bool = False) -> Path:
    """Write every (side, representation) graph of ``model`` (in eval mode, its encode-time
    options already set) and its tokenizer to ``output_dir``, atomically."""

    if getattr(model, "args", {}).get("gate") == "random":
        raise UserError("the random gate draws its expert weights in Python from a hash of the "
                        "token ids: it has no ONNX graph; use the PyTorch model")
    model = model.to("cpu").eval()
    example = model.tokenize(["an example query", "a longer example passage text"],
                             Side.PASSAGE, 16)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dynamic = {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}
    output_dir = Path(output_dir)
    with atomic_path(output_dir, directory=True) as tmp, _quiet_export():
        files = {}
        for side in (Side.QUERY, Side.PASSAGE):
            for representation in model.representations:
                name = graph_file(side, representation)
                torch.onnx.export(_SideGraph(model, side, representation).eval(),
                                  (example["input_ids"], example["attention_mask"]),
                                  str(tmp / name), dynamo=True, verbose=False,
                                  input_names=["input_ids", "attention_mask"],
                                  output_names=[representation], dynamic_shapes=dynamic,
                                  external_data=False)
                if int8:
                    _quantize_int8(tmp / name)
                files[f"{side.value}/{representation}"] = name
        if "sparse" in model.representations:
            length = torch.export.Dim("length")
            ids = example["input_ids"][:1]
            torch.onnx.export(_AnseriniSparseGraph(model).eval(),
                              (ids, torch.zeros_like(ids), example["attention_mask"][:1]),
                              str(tmp / ANSERINI_SPARSE_FILE), dynamo=True,
                              verbose=False,
                              input_names=["input_ids", "token_type_ids", "attention_mask"],
                              output_names=["output_idx", "output_weights"],
                              dynamic_shapes={k: {1: length} for k in
                                              ("input_ids", "token_type_ids", "attention_mask")},
                              external_data=False)
            if int8:
                _quantize_int8(tmp / ANSERINI_SPARSE_FILE)
            files[ANSERINI_SPARSE] = ANSERINI_SPARSE_FILE
        model.tokenizer.save_pretrained(tmp)
        if "sparse" in model.representations and not (tmp / "vocab.txt").is_file():
            # Anserini's WordPiece tokenizer and id -> term map read a one-token-a-line vocab.
            vocab = sorted(model.tokenizer.get_vocab().items(), key=lambda item: item[1])
            (tmp / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab))
        source_fingerprint = fingerprint(model)
        # every file written (the tokenizer's vary by its kind): what --overwrite may replace
        written = sorted([*(p.name for p in tmp.iterdir()), ONNX_FILE])
        (tmp / ONNX_FILE).write_text(json.dumps({
            "written": written,
            "format": FORMAT, "model_type": model.model_type, "args": model.args,
            "encode_options": {k: model.args[k] for k in model.encode_options},
            "representations": list(model.representations), "files": files,
            "source": source, "source_fingerprint": source_fingerprint, "int8": int8,
            "int8_scheme": INT8_SCHEME if int8 else None,
            "fingerprint": export_fingerprint(source_fingerprint, int8),
            "query_max_length": model.query_max_length,
        }, indent=2, sort_keys=True) + "\n")
    return output_dir


def _quantize_int8(path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = path.with_suffix(".fp32.onnx")
    path.rename(fp32)
    with _quiet_root_logger():
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    fp32.unlink()


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime's quantizer logs through the root logger (``logging.warning``) advice meant
    for image models ("consider pre-processing"), which a user cannot act on. The root's level
    hides it; a handler held meanwhile keeps ``logging.warning`` from installing a stderr
    handler of its own (``basicConfig``) that would outlive the call."""
    root = logging.getLogger()
    level, hold = root.level, logging.NullHandler()
    root.addHandler(hold)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(hold)
        root.setLevel(level)


def is_onnx_export(path: str | os.PathLike) -> bool:
    return (Path(path) / ONNX_FILE).is_file()


class OnnxModel:
    """An exported model run by onnxruntime, usable where the adapters take a RetrievalModel."""

    def __init__(self, path: str | os.PathLike, providers: list[str] | None = None) -> None:

        self.path = Path(path)
        if not is_onnx_export(self.path):
            raise FileNotFoundError(f"{self.path} is not an ONNX export (no {ONNX_FILE}); write "
                                    "one with python -m pyserini_moe.export")
        self.meta = read_json(self.path / ONNX_FILE, "export's manifest")
        if not isinstance(self.meta, dict) or not isinstance(self.meta.get("files"), dict):
            raise UserError(f"{self.path / ONNX_FILE}: not an export manifest (no 'files' "
                            "mapping); export the model again")
        if self.meta.get("format") != FORMAT:
            raise UserError(f"{self.path}: unknown export format {self.meta.get('format')!r}")
        self.model_type: str = self.meta["model_type"]
        self.representations = tuple(self.meta["representations"])
        self.args: dict[str, Any] = dict(self.meta["args"])
        self.encode_options = tuple(self.meta["encode_options"])
        self.fingerprint: str = self.meta["fingerprint"]
        self.precision = "int8" if self.meta.get("int8") else "fp32"  # baked into the graphs
        self.query_max_length = recorded_query_length(self.meta, self.path / ONNX_FILE)
        self.tokenizer = read_tokenizer(self.path)
        self.providers = providers or _providers()
        self._sessions: dict[str, Any] = {}

    # -- what the adapters call on a model ---------------------------------------------------
    @property
    def device(self) -> torch.device:
        return torch.device("cpu")  # outputs come back as CPU tensors

    def eval(self) -> OnnxModel:
        return self

    def configure(self, **options: Any) -> OnnxModel:
        """Encode-time options are baked into the graphs: only the exported values are accepted."""
        for name, value in options.items():
            if str(self.meta["encode_options"].get(name)) != str(value):
                raise UserError(f"{self.path} was exported with {name}="
                                f"{self.meta['encode_options'].get(name)!r}; export again with "
                                f"--encoder-option {name}={value}")
        return self

    def tokenize(self, texts: list[str], side: Side, max_length: int) -> dict[str, np.ndarray]:
        batch = tokenize(self.tokenizer, texts, side, max_length, "np", text_prefix(self.args, side))
        return {k: v.astype(np.int64) for k, v in batch.items()}

    def encode(self, texts: list[str], side: Side, max_length: int | None = None,
               only: str | None = None) -> Encoded:
        inputs = self.tokenize(texts, side, max_length or encode_length(self, side))
        out = Encoded()
        for representation in (only,) if only else self.representations:
            value = self._session(side, representation).run(None, inputs)[0]
            setattr(out, representation, torch.from_numpy(value))
        if out.multi is not None:
            out.mask = torch.from_numpy(inputs["attention_mask"])
        return out

    def _session(self, side: Side, representation: str) -> Any:
        import onnxruntime as ort

        key = f"{Side(side).value}/{representation}"
        if key not in self.meta["files"]:
            raise UserError(f"{self.path} has no {key} graph (it has {sorted(self.meta['files'])})")
        if key not in self._sessions:
            options = ort.SessionOptions()
            threads = torch.get_num_threads()  # follow OMP_NUM_THREADS like PyTorch does
            options.intra_op_num_threads = threads
            graph = self._graph_file(key)
            with reading(graph, "ONNX graph", "export the model again", _ort_errors()):
                self._sessions[key] = ort.InferenceSession(str(graph), options,
                                                           providers=self.providers)
        return self._sessions[key]

    def _graph_file(self, key: str) -> Path:
        """The graph ``key`` names, which must lie inside the export: the manifest is input like
        any other, and a shared export must not make us read a file from elsewhere."""
        name = self.meta["files"][key]
        if not isinstance(name, str) or not name:
            raise UserError(f"{self.path / ONNX_FILE}: files[{key!r}] must be a file name")
        path = (self.path / name).resolve()
        if not path.is_relative_to(self.path.resolve()):
            raise UserError(f"{self.path / ONNX_FILE}: files[{key!r}] = {name[:80]!r} lies outside "
                            "the export folder; export the model again")
        return path


def _ort_errors() -> tuple[type[BaseException], ...]:
    """onnxruntime's load errors (they derive from Exception alone): a missing or damaged graph."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "InvalidProtobuf", "InvalidGraph")
    return tuple(getattr(state, name) for name in names if hasattr(state, name))


def _providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
