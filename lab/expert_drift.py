"""How far training moved each expert FFN of an expert model from the pretrained FFN it was copied
from, and how far the experts moved apart; beside it, how far a plain model's FFN moved at the
same layers. A diagnostic for "the MoE did not differ from its baseline": experts that stay within
a hair of each other cannot specialise, whatever the architecture.

Relative Frobenius distances over the FFN's two weight matrices (intermediate and output dense):
||W_e - W_0|| / ||W_0|| and ||W_q - W_p|| / ||W_0||.

    python lab/expert_drift.py --model taser=work/.../taser-detr/best \
        --baseline siamese=work/.../siamese/best --output docs/results/drift.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def _ffn(layer: torch.nn.Module) -> list[torch.Tensor]:
    return [layer.intermediate.dense.weight, layer.output.dense.weight]


@torch.no_grad()
def _distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    num = sum(float((x - y).pow(2).sum()) for x, y in zip(a, b))
    den = sum(float(y.pow(2).sum()) for y in b)
    return (num / den) ** 0.5


def drift_rows(name: str, model: torch.nn.Module, pretrained: torch.nn.Module,
               baseline: torch.nn.Module | None) -> list[str]:
    """One Markdown row per expert layer of ``model``."""
    rows = []
    start = pretrained.encoder.layer
    # TASER names its specialised blocks; CoT-MoTE splits the FFN of every block (Q-FFN, P-FFN).
    layers = getattr(model, "specialised", range(len(model.expert_layers)))
    for block, index in zip(model.expert_layers, layers):
        original = _ffn(start[index])
        experts = [_ffn(e) for e in block.experts]
        moved = " / ".join(f"{_distance(e, original):.2e}" for e in experts)
        apart = _distance(experts[0], experts[1]) if len(experts) > 1 else float("nan")
        plain = (f"{_distance(_ffn(baseline.backbone.encoder.layer[index]), original):.2e}"
                 if baseline is not None else "")
        rows.append(f"| {name} | {index + 1} | {moved} | {apart:.2e} | {plain} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, metavar="NAME=PATH")
    parser.add_argument("--baseline", metavar="NAME=PATH", help="a plain model of one encoder")
    parser.add_argument("--pretrained", default="all-minilm-l6-v2",
                        help="the backbone the experts were copied from")
    parser.add_argument("--output", help="also write the Markdown table here")
    args = parser.parse_args()

    from pyserini_moe.modeling import load_backbone, load_model

    name, _, path = args.model.partition("=")
    model = load_model(path, device="cpu")
    baseline = load_model(args.baseline.partition("=")[2], device="cpu") if args.baseline else None
    pretrained = load_backbone(args.pretrained)
    header = ["| model | layer | each expert from the pretrained FFN | expert 0 vs expert 1 | "
              f"{args.baseline.partition('=')[0] if args.baseline else 'plain model'}'s FFN "
              "from the pretrained FFN |", "|---|---:|---:|---:|---:|"]
    text = "\n".join(header + drift_rows(name, model, pretrained, baseline)) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(
            "# Expert drift: relative Frobenius distance of the FFN weights\n\n"
            f"`python lab/expert_drift.py --model {args.model}"
            + (f" --baseline {args.baseline}" if args.baseline else "") + "`\n\n" + text)


if __name__ == "__main__":
    main()
