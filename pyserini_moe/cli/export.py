"""``python -m pyserini_moe.export``: ONNX graphs of a model, for onnxruntime.

Examples::

    python -m pyserini_moe.export --encoder work/models/cotmote-minilm/best --output onnx/cotmote
    python -m pyserini_moe.export --encoder work/models/sbmoe/best --encoder-option inference=all \\
        --output onnx/sbmoe-all --int8
    # then, anywhere an encoder is taken:
    python -m pyserini_moe.index --retriever dense --corpus scifact --encoder onnx/cotmote ...
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyserini_moe.cli import ArgumentParser, HelpFormatter
from pyserini_moe.cli.args import add_encoder_option_arg, parse_options
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output, refuse_special_output
from pyserini_moe.outputs import refuse_foreign_folder


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.export",
        description="Export a model to ONNX: one graph per side (query, passage) and "
                    "representation (dense, sparse, multi), routing and pooling inside, dynamic "
                    "batch and length. The folder is an encoder for index, search and analyze "
                    "(run by onnxruntime, CUDA when present).",
        formatter_class=HelpFormatter)
    parser.add_argument("--encoder", required=True,
                        help="a saved model folder, or a backbone (zero-shot Siamese)")
    parser.add_argument("--output", required=True, type=Path, help="export folder to write")
    add_encoder_option_arg(parser, "encode-time option baked into the graphs (SB-MoE: "
                                   "inference=all)")
    parser.add_argument("--int8", action="store_true",
                        help="onnxruntime dynamic int8 quantisation of the weights (faster; "
                             "changes the vectors, so it is a different encoder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing export (refused while it holds files an "
                             "export does not write)")
    args = parser.parse_args(argv)
    from pyserini_moe.modeling.auto import load_encoder
    from pyserini_moe.modeling.onnx import ONNX_FILE, export, is_onnx_export

    # a saved model's own export cache, <model>/onnx/ (cli.args.backend_encoder), sits inside
    # the model by design and replaces none of its files
    cache = (Path(args.encoder) / "onnx").resolve()
    inside_cache = cache in args.output.resolve().parents
    refuse_input_as_output([str(args.output)], [] if inside_cache else [args.encoder])
    _check_output(args.output, args.overwrite, ONNX_FILE)
    if is_onnx_export(args.encoder):
        raise UserError(f"{args.encoder} is already an ONNX export; export the PyTorch model")
    start = time.perf_counter()
    model = load_encoder(args.encoder, device="cpu", options=parse_options(args.encoder_option))
    # written beside the output and swapped in whole (io.atomic_path): a failure keeps the old
    export(model, args.output, source=args.encoder, int8=args.int8)
    print(f"ONNX export of {args.encoder} written to {args.output} in "
          f"{time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0


def _check_output(output: Path, overwrite: bool, marker: str) -> None:
    """Before anything is loaded: ``--overwrite`` replaces only an ONNX export (``marker``: the
    file that names one) holding nothing but its own files, or an empty folder, never an index,
    a model or the user's files (it once deleted them all); nothing is deleted here: the new
    export replaces the old only once it is complete."""
    refuse_special_output(output)
    if output.is_file():
        raise UserError(f"{output} is a file: name a folder for the export")
    if not output.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{output} already exists; pass --overwrite to replace it")
    refuse_foreign_folder(output, marker)
