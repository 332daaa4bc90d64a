"""``python -m pyserini_moe.train``: fine-tune a retriever from a recipe.

Examples::

    python -m pyserini_moe.train --config encoders/siamese-minilm.yaml
    python -m pyserini_moe.train --config encoders/splade-minilm.yaml --max-steps 3 \\
        --output-dir work/smoke/splade
    python -m pyserini_moe.train --config encoders/dpr-minilm.yaml --resume
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from pyserini_moe.cli import ArgumentParser, positive_int, refuse_inside_outputs, seed
from pyserini_moe.cli.args import add_device_arg
from pyserini_moe.errors import UserError
from pyserini_moe.io import refuse_input_as_output

if TYPE_CHECKING:
    from pyserini_moe.train.config import ModelConfig, TrainConfig


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m pyserini_moe.train",
        description="Fine-tune a retriever with a contrastive loss (in-batch + hard negatives)\n"
                    "as an encoders/<name>.yaml recipe describes. Writes <output-dir>/best\n"
                    "(lowest validation loss), last/, checkpoint/ (for --resume),\n"
                    "train_log.jsonl and train_summary.json. Uses CUDA when present unless\n"
                    "--device says otherwise.",
        epilog="examples:\n"
               "  python -m pyserini_moe.train --config encoders/siamese-minilm.yaml\n"
               "  python -m pyserini_moe.train --config encoders/splade-minilm.yaml "
               "--max-steps 3 --output-dir work/smoke/splade\n"
               "  python -m pyserini_moe.train --config encoders/dpr-minilm.yaml --resume\n"
               "  torchrun --nproc_per_node 2 -m pyserini_moe.train --config ...  # data-parallel:\n"
               "      each rank encodes a slice of every batch, in-batch negatives gathered\n\n"
               "The recipe schema is documented in pyserini_moe/train/config.py.\n"
               "On a busy machine, OMP_NUM_THREADS=1 is often faster.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, metavar="YAML",
                        help="training recipe, e.g. encoders/siamese-minilm.yaml")
    parser.add_argument("--output-dir", metavar="DIR",
                        help="where the model, checkpoints and logs go (default: the recipe's "
                             "output_dir)")
    parser.add_argument("--resume", action="store_true",
                        help="continue exactly from <output-dir>/checkpoint (written at every "
                             "validation); with another --max-steps / --epochs the schedule is "
                             "rebuilt for the new length (said when resuming)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh even if <output-dir> holds an earlier run's checkpoint")
    parser.add_argument("--max-steps", type=positive_int, metavar="N",
                        help="stop after N optimizer steps, if the epochs hold that many: the "
                             "data is not repeated past them (overrides training.max_steps; the "
                             "learning-rate schedule is sized for the shorter run)")
    parser.add_argument("--epochs", type=positive_int, metavar="N",
                        help="overrides training.epochs")
    parser.add_argument("--seed", type=seed, metavar="N",
                        help="the training seed (overrides training.seed): initialisation of new "
                             "modules, batch order, negatives drawn and dropout; the held-out "
                             "queries stay those of data.seed, so every seed validates alike")
    add_device_arg(parser, note="; overrides training.device")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any recipe field (dotted path, YAML value; repeatable), "
                             "e.g. --set data.negatives.source=run --set "
                             "data.negatives.run=work/round1.train.trec")
    parser.add_argument("--init-only", action="store_true",
                        help="save the model as the recipe builds it, before any training, to "
                             "<output-dir>/init (the zero-shot starting point) and stop")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.resume and args.overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    if args.resume and args.init_only:
        raise UserError("--resume and --init-only exclude each other (--init-only saves the "
                        "untrained model; --resume continues a training)")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyserini_moe").setLevel(logging.INFO)  # ours; not faiss's loader chatter
    from pyserini_moe.modeling.base import check_device
    from pyserini_moe.train.config import load_config  # keeps --help fast
    from pyserini_moe.train.distributed import init_from_env, local_device
    from pyserini_moe.train.loop import set_seed
    from pyserini_moe.train.trainer import Trainer, build_model

    # Each flag's field: a --set of it (or of its section) beside the flag is refused, not
    # applied last over the flag in silence.
    flags = {field: f"{flag} {value}" for field, flag, value in (
        ("output_dir", "--output-dir", args.output_dir),
        ("training.max_steps", "--max-steps", args.max_steps),
        ("training.epochs", "--epochs", args.epochs),
        ("training.seed", "--seed", args.seed),
        ("training.device", "--device", args.device)) if value is not None}
    config = load_config(args.config, args.output_dir).with_overrides(
        max_steps=args.max_steps, epochs=args.epochs, device=args.device,
        seed=args.seed).with_settings(args.set, flags)
    if config.output_dir.is_file():
        raise UserError(f"--output-dir {config.output_dir} is a file: name a folder")
    refuse_inside_outputs("--output-dir", config.output_dir)
    refuse_input_as_output([str(config.output_dir)],
                           [args.config, config.model.backbone, config.data.collection,
                            str(config.data.negatives.run or ""),
                            str(config.data.negatives.model or "")])
    ranks = init_from_env()  # under torchrun: join the group, one device per rank
    device = check_device(local_device() if ranks is not None and
                            config.training.device == "auto" else config.training.device)
    if args.init_only:
        _check_init_output(config, args.overwrite)
    set_seed(config.training.seed)  # randomly initialised heads depend on it
    trainer = Trainer(build_model(config.model, device), config, progress=not args.quiet)
    if args.init_only:  # the untrained start, saved as training saves (query length included)
        print(f"untrained model saved to {trainer.model.save(config.output_dir / 'init')}",
              file=sys.stderr)
        return 0
    summary = trainer.train(resume=args.resume, overwrite=args.overwrite)
    if ranks is not None and not ranks.is_main:
        return 0
    metrics = summary["metrics"]
    best = (f"best validation loss {metrics['best_val_loss']:.4f} at step {metrics['best_step']}"
            if metrics["best_step"] is not None else "no validation queries")
    print(f"trained {metrics['steps']} steps in {metrics['train_seconds']:.0f}s "
          f"({metrics['seconds_per_step']:.2f} s/step); {best}; model in "
          f"{config.output_dir / 'best'}", file=sys.stderr)
    return 0


def _check_init_output(config: TrainConfig, overwrite: bool) -> None:
    """--init-only saves init/ inside a training's output folder: refused where a training would
    be (an index, a folder of the user's files) or beside a training of another model (an
    SB-MoE init/ beside a Siamese best/), and an earlier init/ (perhaps of another seed)
    replaced only with --overwrite."""
    from pyserini_moe.io import read_yaml
    from pyserini_moe.outputs import refuse_foreign_folder
    from pyserini_moe.train.trainer import INIT_DIR, RECIPE_FILE

    out = config.output_dir
    if not out.is_dir():
        return
    refuse_foreign_folder(out, RECIPE_FILE)
    if (out / RECIPE_FILE).is_file():
        trained = read_yaml(out / RECIPE_FILE, "training recipe", UserError)
        if not _same_model(trained.get("model") if isinstance(trained, dict) else None,
                           config.model):
            raise UserError(f"{out} holds a training of another model (its {RECIPE_FILE} "
                            "differs in model): --init-only saves the start of the model "
                            "trained there; name another --output-dir")
    if (out / INIT_DIR).exists() and not overwrite:
        raise FileExistsError(f"{out / INIT_DIR} already exists; pass --overwrite to replace it")


def _same_model(trained: object, model: ModelConfig) -> bool:
    """Whether a training's recorded ``model`` section builds ``model``: the same type, the
    same backbone however its path is spelt (``bert/`` and ``bert``), and the same arguments
    once the model's defaults fill in the unwritten ones (``pooling: mean`` written out)."""
    import os

    from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE
    from pyserini_moe.modeling.registry import model_class

    if not isinstance(trained, dict) or trained.get("type") != model.type:
        return False

    def place(backbone: object) -> str:
        text = str(backbone)
        return os.path.realpath(text) if os.path.exists(text) else text

    def arguments(args: object) -> object:
        try:
            return model_class(model.type).Args(**dict(args or {}))
        except (TypeError, ValueError):
            return args

    return (place(trained.get("backbone", DEFAULT_BACKBONE)) == place(model.backbone)
            and arguments(trained.get("args")) == arguments(model.args))
