"""CoT-MAE pre-training with textual experts (CoT-MoTE section 3.2, eq. 10-12).

The encoder (a :class:`~pyserini_moe.modeling.cotmote.CotMoteEncoder`: queries through Q-FFN,
passages through P-FFN) reads a masked text and predicts the masked tokens (MLM, eq. 11); a
one-layer decoder reads only the encoder's [CLS] vector followed by a *contextual span* of the
same text and predicts that span token by token (causal LM, eq. 12), so the [CLS] bottleneck must
carry what the span needs. The decoder and the MLM head are discarded afterwards: the output is
the encoder, saved as a retrieval model that fine-tuning recipes start from.

Contextual spans (CoT-MAE's two options, section 3.2):

* a neighbouring span of the same document (no extra data; the default here): the document's
  sentences are cut in two at a random sentence boundary, one half is the anchor, the other its
  context;
* queries of the document: training queries of a collection (``collection:split`` qrels) or
  docT5query pseudo-queries (``corpus=file.tsv``, lines ``docid<TAB>query``). The passage
  (P-FFN) reconstructs its query and the query (Q-FFN, the query expert's own MLM signal)
  reconstructs the start of its passage.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from pyserini_moe.data.beir import BeirCollection
from pyserini_moe.errors import DataFormatError, UserError
from pyserini_moe.io import atomic_path, iter_lines
from pyserini_moe.modeling.base import Side
from pyserini_moe.modeling.cotmae import ContextualMae, mask_tokens, mlm_heads_for
from pyserini_moe.modeling.cotmote import SPARSE_HEADS, VARIANTS, CotMoteEncoder
from pyserini_moe.modeling.folder import CARD_FILE
from pyserini_moe.train.loop import OptimizerLoop, set_seed
from pyserini_moe.validate import (
    check,
    check_fields,
    fraction,
    non_negative,
    one_of,
    open_fraction,
    positive,
    seed_range,
)

log = logging.getLogger(__name__)

LOG_FILE = "pretrain_log.jsonl"
ARGS_FILE = "pretrain_args.json"
MODEL_DIR = "model"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class ContextExample:
    """An anchor text encoded on ``side`` and the span the decoder reconstructs from it."""

    anchor: str
    side: Side
    context: str


@dataclass(frozen=True)
class PretrainArgs:
    """Everything that defines a pre-training run (saved with its output)."""

    backbone: str
    variant: str = field(default="mote", metadata=check(one_of(VARIANTS)))
    sparse_head: str = field(default="plain",  # the encoder's sparse head; "mlm" is trained here
                             metadata=check(one_of(SPARSE_HEADS)))
    pooling: str = field(default="cls",  # the dense vector, which is the decoder's bottleneck
                         metadata=check(one_of(("cls", "mean"))))
    corpora: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()          # collection:split whose judged pairs are used
    pseudo_queries: tuple[str, ...] = ()   # corpus=path.tsv
    max_steps: int = field(default=300, metadata=check(positive))  # optimizer steps
    batch_size: int = field(default=16, metadata=check(positive))  # examples per forward pass
    # Forward passes per optimizer step (the paper's batch 2048 = 256 x 8 on one GPU).
    grad_accumulation: int = field(default=1, metadata=check(positive))
    max_length: int = field(default=128, metadata=check(positive))  # anchor tokens (paper: 144)
    context_max_length: int = field(default=64, metadata=check(positive))  # decoder tokens
    mask_ratio: float = field(default=0.3, metadata=check(open_fraction))  # CoT-MAE's rate
    learning_rate: float = field(default=1e-4, metadata=check(positive))
    # The encoder's own layers (embeddings, Transformer, experts); None = learning_rate. Lower it
    # (or 0: frozen) to warm the random MLM head and decoder up without wrecking a backbone that
    # is already a good retriever (the packaged MiniLM, docs/cotmote.md).
    encoder_learning_rate: float | None = field(default=None, metadata=check(non_negative))
    warmup_ratio: float = field(default=0.1, metadata=check(fraction))
    weight_decay: float = field(default=0.01, metadata=check(non_negative))
    max_grad_norm: float = field(default=1.0, metadata=check(non_negative))  # 0: no clipping
    switch_experts: bool = False           # table 4's ablation: queries -> P-FFN, passages -> Q-FFN
    seed: int = field(default=42, metadata=check(seed_range))  # numpy takes [0, 2**32)

    def check(self) -> None:
        """The validator recipes use (:mod:`pyserini_moe.validate`), and what spans from."""
        check_fields(self, "pre-training arguments")
        if not self.corpora and not self.queries and not self.pseudo_queries:
            raise UserError("nothing to pre-train on: give --corpus, --queries or "
                            "--pseudo-queries")
        if self.switch_experts and self.variant == "siamese":  # would be recorded, yet change nothing
            raise UserError("--switch-experts sends queries through the passage expert and "
                            "passages through the query expert; a siamese encoder shares one "
                            "for both, so nothing would change: leave it out, or pre-train "
                            "--variant mote or separate")


# ------------------------------------------------------------------------------------- data


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def span_examples(texts: Iterable[str], rng: random.Random) -> list[ContextExample]:
    """Two neighbouring spans of each document with at least two sentences, one the anchor and
    the other its context (which is which drawn at random)."""
    out = []
    for text in texts:
        sentences = split_sentences(text)
        if len(sentences) < 2:
            continue
        cut = rng.randrange(1, len(sentences))
        first, second = " ".join(sentences[:cut]), " ".join(sentences[cut:])
        anchor, context = (first, second) if rng.random() < 0.5 else (second, first)
        out.append(ContextExample(anchor, Side.PASSAGE, context))
    return out


def query_examples(pairs: Iterable[tuple[str, str]]) -> list[ContextExample]:
    """(query, passage) pairs -> the passage reconstructs the query, the query the passage."""
    out = []
    for query, passage in pairs:
        if query.strip() and passage.strip():
            out.append(ContextExample(passage, Side.PASSAGE, query))
            out.append(ContextExample(query, Side.QUERY, passage))
    return out


def judged_pairs(spec: str) -> list[tuple[str, str]]:
    """(query text, relevant document text) of ``collection:split``'s qrels."""

    name, sep, split = spec.rpartition(":")
    if not sep or not name or not split:
        raise UserError(f"--queries {spec!r}: expected COLLECTION:SPLIT, e.g. scifact:train")
    collection = BeirCollection.load(name)
    if split not in collection.splits():
        raise UserError(f"--queries {spec!r}: {name} has no {split!r} qrels "
                        f"(it has: {', '.join(collection.splits())})")
    if split == "test":
        log.warning("--queries %s: pre-training on TEST queries leaks them into the model", spec)
    topics, qrels = collection.topics(split), collection.qrels(split)
    wanted = {doc for judged in qrels.values() for doc, rel in judged.items() if rel > 0}
    docs = {d.id: d.contents for d in collection.corpus() if d.id in wanted}
    return [(topics[q], docs[d]) for q, judged in qrels.items() if q in topics
            for d, rel in judged.items() if rel > 0 and d in docs]


def pseudo_query_pairs(spec: str) -> list[tuple[str, str]]:
    """``corpus=file.tsv`` (lines ``docid<TAB>query``, docT5query output) -> (query, doc) pairs."""

    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise UserError(f"--pseudo-queries {spec!r}: expected CORPUS=FILE, e.g. "
                        "msmarco=doct5query.tsv")
    docs = {d.id: d.contents for d in BeirCollection.load(name).corpus()}
    pairs = []
    for lineno, line in iter_lines(Path(path)):  # as every text file: a BOM and CRLFs dropped
        docid, tab, query = line.partition("\t")
        if not tab:
            raise DataFormatError(path, "expected docid<TAB>query", lineno)
        if docid not in docs:
            raise DataFormatError(path, f"document {docid!r} is not in {name}", lineno)
        pairs.append((query, docs[docid]))
    return pairs


def build_examples(args: PretrainArgs) -> list[ContextExample]:

    rng = random.Random(args.seed)
    examples: list[ContextExample] = []
    for corpus in args.corpora:
        examples += span_examples((d.contents for d in BeirCollection.load(corpus).corpus()), rng)
    for spec in args.queries:
        examples += query_examples(judged_pairs(spec))
    for spec in args.pseudo_queries:
        examples += query_examples(pseudo_query_pairs(spec))
    if not examples:
        raise UserError("no pre-training examples: the corpora have no multi-sentence documents "
                        "and no queries were given")
    return examples


# ------------------------------------------------------------------------------------- loop


def pretrain(args: PretrainArgs, output_dir: Path, device: torch.device,
             examples: list[ContextExample] | None = None, progress: bool = True) -> Path:
    """Pre-train, then save the encoder to ``output_dir/model``; returns that folder.

    The whole output (arguments, log, model) is written beside ``output_dir`` and renamed into
    place once the model is saved (:func:`~pyserini_moe.io.atomic_path`): a failed or
    interrupted run leaves no half-written folder that a rerun would be refused for, and an
    earlier output stays as it was until the new one is complete."""
    args.check()
    set_seed(args.seed)
    examples = examples if examples is not None else build_examples(args)
    encoder = CotMoteEncoder.from_backbone(args.backbone, variant=args.variant,
                                           sparse_head=args.sparse_head, pooling=args.pooling,
                                           device=device)
    model = ContextualMae(encoder, mlm_heads_for(encoder, args.backbone), args.switch_experts)
    model.to(device).train()
    with atomic_path(output_dir, directory=True) as tmp:
        log.info("%d pre-training examples, %d steps on %s (log: %s until done)",
                 len(examples), args.max_steps, device, tmp / LOG_FILE)
        (tmp / ARGS_FILE).write_text(json.dumps(
            {**asdict(args), "examples": len(examples)}, indent=2, default=str) + "\n")
        _train(model, examples, args, tmp / LOG_FILE, progress)
        encoder.eval()
        encoder.save(tmp / MODEL_DIR)
        # the card says how to load the model: from where it will be, not from the temporary
        (tmp / MODEL_DIR / CARD_FILE).write_text(encoder.model_card(output_dir / MODEL_DIR))
    return output_dir / MODEL_DIR


def _train(model: ContextualMae, examples: list[ContextExample], args: PretrainArgs,
           log_path: Path, progress: bool) -> None:
    """``args.max_steps`` optimizer steps over ``examples`` reshuffled each pass, one line per
    step in ``log_path``."""
    per_step = args.batch_size * args.grad_accumulation
    if len(examples) < per_step:  # batches are topped up from one reshuffled copy at a time
        log.warning("warning: %d examples are fewer than one optimizer step takes (--batch-size "
                    "%d x --grad-accumulation %d): examples repeat within a step", len(examples),
                    args.batch_size, args.grad_accumulation)
    loop = OptimizerLoop(model, _parameter_groups(model, args), args.learning_rate,
                         args.max_steps, args.warmup_ratio, args.max_grad_norm)
    rng = random.Random(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    order: list[ContextExample] = []
    started = time.perf_counter()
    with open(log_path, "w") as log_file:
        for step in tqdm(range(args.max_steps), desc="pretrain", unit="step",
                         disable=not progress):
            batches = []
            for _ in range(args.grad_accumulation):  # the mean loss of the accumulated passes
                if len(order) < args.batch_size:
                    more = examples[:]
                    rng.shuffle(more)
                    order += more
                batch, order = order[:args.batch_size], order[args.batch_size:]
                batches.append(batch)
            loss, parts = loop.step([lambda b=b: _pass(model, b, args, generator)
                                     for b in batches])
            log_file.write(json.dumps({
                "step": step + 1, "loss": loss, **parts,
                "lr": loop.lr(step),
                "elapsed": round(time.perf_counter() - started, 3)}) + "\n")
            log_file.flush()


def _parameter_groups(model: ContextualMae, args: PretrainArgs) -> list[dict[str, Any]]:
    """AdamW groups: the encoder's body at ``encoder_learning_rate``, the MLM heads' own transform
    and bias and the decoder at ``learning_rate``; no weight decay on biases and norms. A
    parameter shared by both (the tied word embeddings) belongs to the encoder."""
    head_only = {id(p) for head in model.mlm_heads for name, p in head.named_parameters()
                 if name != "embedding_weight"}
    body = {id(p) for p in model.encoder.parameters()} - head_only
    encoder_lr = (args.learning_rate if args.encoder_learning_rate is None
                  else args.encoder_learning_rate)
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for p in model.parameters():  # each shared parameter once
        groups.setdefault((id(p) in body, p.ndim >= 2), []).append(p)
    return [{"params": params, "lr": encoder_lr if in_body else args.learning_rate,
             "weight_decay": args.weight_decay if decays else 0.0}
            for (in_body, decays), params in groups.items()]


def _pass(model: ContextualMae, batch: list[ContextExample], args: PretrainArgs,
          generator: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
    """One forward pass: the MLM + decoder loss of ``batch``, and each part for the log."""
    parts = _losses(model, batch, args, generator)
    return parts["mlm_loss"] + parts["decoder_loss"], {k: v.item() for k, v in parts.items()}


def _losses(model: ContextualMae, batch: list[ContextExample], args: PretrainArgs,
          generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Losses of one batch, averaged over its sides weighted by their number of examples."""
    tokenizer = model.encoder.tokenizer
    totals = {"mlm_loss": 0.0, "decoder_loss": 0.0}
    for side in (Side.QUERY, Side.PASSAGE):
        group = [e for e in batch if e.side == side]
        if not group:
            continue
        anchors = model.encoder.tokenize([e.anchor for e in group], side, args.max_length)
        masked, labels = mask_tokens(anchors["input_ids"], anchors["attention_mask"], tokenizer,
                                     args.mask_ratio, generator)
        context = model.encoder.tokenize([e.context for e in group], Side.PASSAGE,
                                         args.context_max_length)
        mlm, dec = model.loss({"input_ids": masked, "attention_mask": anchors["attention_mask"]},
                              labels, context, side)
        share = len(group) / len(batch)
        totals["mlm_loss"] = totals["mlm_loss"] + share * mlm
        totals["decoder_loss"] = totals["decoder_loss"] + share * dec
    return totals
