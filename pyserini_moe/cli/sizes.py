"""``python -m pyserini_moe.sizes``: parameter counts of every architecture on one backbone (see
:mod:`pyserini_moe.modeling.sizes`)."""

from __future__ import annotations

from pathlib import Path

from pyserini_moe.cli import ArgumentParser
from pyserini_moe.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.sizes",
        description="Print the parameter count of every architecture on a backbone (built from "
                    "its config on the meta device: no weights are downloaded or allocated).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--backbone", default="all-minilm-l6-v2",
                        help="HF name or folder whose config to use (default: the packaged MiniLM)")
    source.add_argument("--bert-base", action="store_true",
                        help="bert-base-uncased's architecture (transformers' default BertConfig), "
                             "offline; the size the TASER paper reports")
    args = parser.parse_args(argv)
    from pyserini_moe.modeling.sizes import parameter_counts  # torch: not for --help

    if args.bert_base:
        from transformers import BertConfig

        config, name = BertConfig(), "bert-base-uncased (default BertConfig)"
    else:
        from pyserini_moe.modeling.backbone import load_config

        _refuse_export(args.backbone)
        try:
            config, name = load_config(args.backbone), args.backbone
        except UserError as e:  # offline, bert-base-uncased's shape needs no download
            hint = (" (for bert-base-uncased's shape offline: --bert-base)"
                    if args.backbone.lower().startswith("bert-base") else "")
            raise UserError(f"{e}{hint}") from None
    try:
        counts = parameter_counts(config)
    except UserError as e:
        raise UserError(f"{name}: {e}") from None
    if not any(isinstance(count, int) for count in counts.values()):
        raise UserError(f"{name}: its config.json describes no buildable model "
                        f"({next(iter(counts.values()))})")
    if not args.bert_base:
        _say_if_saved_model(args.backbone)
    print(f"| model ({name}) | parameters |\n|---|---:|")
    for model, count in counts.items():
        print(f"| {model} | {size(count)} |" if isinstance(count, int)
              else f"| {model} | cannot be built: {count} |")
    return 0


def _refuse_export(folder: str) -> None:
    """An ONNX export holds graphs, not a config to build architectures on: the model it was
    exported from (its record's ``source``) is named instead."""
    from pyserini_moe.io import read_json
    from pyserini_moe.modeling.onnx import ONNX_FILE

    record = Path(folder) / ONNX_FILE
    if record.is_file():
        source = (read_json(record, "export record") or {}).get("source") or "its source model"
        raise UserError(f"{folder} is an ONNX export of {source}: give --backbone {source}, the "
                        "model it was exported from")


def _say_if_saved_model(folder: str) -> None:
    """A trained model's folder (``work/taser/best``) is read for its backbone's config only:
    the table sizes every architecture on that backbone, so one line first gives the model's own
    count (its architecture may be one the table cannot build on so few layers)."""
    from pyserini_moe.modeling.folder import is_saved_model, load_model

    if not is_saved_model(folder):
        return
    model = load_model(folder, device="cpu")
    count = sum(p.numel() for p in model.parameters())
    print(f"{folder} is a saved {model.model_type} model: {size(count)} parameters. The table "
          "sizes every architecture on its backbone's config.json.\n")


def size(count: int) -> str:
    """A parameter count as the table prints it, in millions: one decimal from 1M (a BERT's
    110.1M); below, every digit of the count (a tiny test BERT's 0.0M told no model apart:
    42,123 parameters print 0.042123M)."""
    if count >= 1_000_000:
        return f"{count / 1e6:.1f}M"
    return f"{count / 1e6:.6f}".rstrip("0").rstrip(".") + "M"
