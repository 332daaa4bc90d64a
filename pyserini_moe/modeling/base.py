"""The interface every retrieval model implements.

A model maps a batch of texts of one *side* (queries or passages: MoE routers need to know) to
an :class:`Encoded` bundle holding whichever representations the model produces: a dense vector,
a vocabulary-sized term-weight vector (learned sparse), and/or token-level vectors
(multi-vector). ``score`` turns a query bundle and a passage bundle into the similarity matrix the
training losses and exact re-scoring use. A model registers its type
(:mod:`~pyserini_moe.modeling.registry`) and saves itself as a self-describing folder
(:mod:`~pyserini_moe.modeling.folder`, which :func:`load_model` reads).
"""

from __future__ import annotations

import dataclasses
import os
import unicodedata
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer
from pyserini_moe.modeling.device import PRECISIONS, _say_bf16_is_emulated, check_device, cpu_has_bf16
from pyserini_moe.modeling.folder import WEIGHTS_FILE, FolderFormat
from pyserini_moe.modeling.lengths import encode_length
from pyserini_moe.modeling.losses import contrastive_loss
from pyserini_moe.modeling.pooling import encoder_from_config, pretrained_encoder
from pyserini_moe.modeling.side import Side
from pyserini_moe.representation import INDEX_KINDS, REPRESENTATIONS, Representation

__all__ = ["INDEX_KINDS", "REPRESENTATIONS", "Representation", "Side"]  # re-exported: the model's vocabulary


@dataclasses.dataclass
class Encoded:
    """Representations of a batch; fields a model does not produce stay None.

    dense: [B, H]; sparse: [B, V] non-negative term weights over the tokenizer vocabulary;
    multi: [B, L, D] token vectors with ``mask`` [B, L] (1 = real token).
    """

    dense: torch.Tensor | None = None
    sparse: torch.Tensor | None = None
    multi: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    # A router's regulariser computed by this pass (SB-MoE), added through ``regularization``.
    aux_loss: torch.Tensor | None = None
    # Learned routers' probabilities, one [units, experts] tensor per expert layer: regularisers
    # that need both sides of a batch at once (``regularization`` hook of the trainer) read them.
    routing: list[torch.Tensor] | None = None


@runtime_checkable
class TextEncoder(Protocol):
    """What the retrieval layer (Pyserini adapters, index builders, searchers) needs of an
    encoder: a :class:`RetrievalModel`, or an ONNX export of one
    (:class:`~pyserini_moe.modeling.onnx.OnnxModel`), satisfies it."""

    model_type: str
    representations: tuple[str, ...]
    encode_options: tuple[str, ...]  # arguments that say how to encode (recorded with an index)
    args: dict[str, Any]
    tokenizer: Any
    precision: str  # what its vectors are computed in: fp32 / bf16 / fp16 autocast, ONNX int8
    query_max_length: int | None  # the query length it was trained at; None: not recorded

    @property
    def device(self) -> torch.device: ...

    def eval(self) -> TextEncoder: ...

    def encode(self, texts: list[str], side: Side, max_length: int | None = None,
               only: str | None = None) -> Encoded: ...

    def configure(self, **options: Any) -> TextEncoder: ...


class RetrievalModel(nn.Module, FolderFormat, ABC):
    """The model contract: subclasses set ``model_type``/``representations`` and implement
    ``forward``, ``backbone_configs`` and ``from_configs``; the training hooks below have
    defaults that give plain contrastive training, and a model overrides only those its method
    changes (Tevatron's pattern: the trainer calls every hook, unconditionally).

    ``Args`` declares the model's own arguments once (a :class:`ModelArgs` dataclass: names,
    defaults, checks); the constructor and ``from_backbone`` take them as keywords, and
    ``self.args`` holds their saved form, which ``load`` passes to the constructor again.
    """

    model_type: ClassVar[str]
    representations: ClassVar[tuple[str, ...]]
    paper: ClassVar[str] = ""  # the MoE paper the model implements ("" for the baselines)
    # Where the dense vector is not the whole model (CAME: one expert of three fused), why: a
    # route that can carry only that vector (sentence-transformers) says so when it loads.
    dense_alone: ClassVar[str] = ""
    Args: ClassVar[type[ModelArgs]] = ModelArgs
    # Arguments that say how to encode, not what was learned (SB-MoE's TOP-1 / ALL): they may be
    # changed on a trained model with ``configure`` and are recorded with every index.
    encode_options: ClassVar[tuple[str, ...]] = ()
    # Where the weights go. By default the whole prefixed state dict under WEIGHTS_FILE, a name
    # foreign loaders refuse. A model they can read correctly (a plain backbone + pooling) names
    # transformers' file and the prefix its keys drop there, and writes its own extra files.
    weights_file: ClassVar[str] = WEIGHTS_FILE
    hf_prefix: ClassVar[str] = ""
    # The backbone configs ``from_configs`` needs, by key ("" the main one; DPR's "passage"):
    # enough to build any registered model from one config (parameter counts, modeling.sizes).
    backbone_slots: ClassVar[tuple[str, ...]] = ("",)
    precision: str = "fp32"  # encode-time autocast, see set_precision
    # The query length in tokens the model was trained at (the recipe's data.query_max_length,
    # set by the trainer and saved with the model); None for a backbone or an older folder. An
    # index records it so that search cuts queries as training did unless told otherwise.
    query_max_length: int | None = None

    def __init__(self, tokenizer: Any, args: ModelArgs) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.args = args.saved()

    # -- what subclasses implement -------------------------------------------------------
    @abstractmethod
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        """One side's batch -> its representations (``Encoded``)."""

    @abstractmethod
    def backbone_configs(self) -> dict[str, Any]:
        """HF configs needed to rebuild the architecture, by name (``config.json`` is "")."""

    @classmethod
    @abstractmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any,
                     **args: Any) -> RetrievalModel:
        """Build the architecture with random weights from saved configs (no download)."""

    @classmethod
    def argument_names(cls) -> list[str]:
        """The model's own arguments, what a recipe's ``model.args`` may set (``Args``' fields)."""
        return cls.Args.names()

    @classmethod
    def parse_args(cls, args: dict[str, Any]) -> ModelArgs:
        """Keyword arguments as ``Args``, checked; a bad one is one line naming it."""
        return cls.Args.parse(args, cls.model_type)

    # -- training hooks: the trainer calls each one every step -----------------------------
    def on_train_step(self, step: int, total: int) -> None:
        """Called before optimizer step ``step`` of ``total`` (CAME switches its stage here)."""

    def compute_loss(self, q: Encoded, p: Encoded, positive_index: torch.Tensor,
                     temperature: float) -> torch.Tensor:
        """The ranking loss of a batch: by default the contrastive NLL of each query's positive
        among every passage of the batch (DPR; TASER eq. 2) on ``score``."""
        return contrastive_loss(self.score(q, p), positive_index, temperature)

    def loss_parts(self) -> dict[str, float]:
        """Extra values of the last ``compute_loss`` for the training log (CAME: each expert's
        loss and weight)."""
        return {}

    def flops_multiplier(self) -> float:
        """What the trainer multiplies the FLOPS regulariser by (CAME: the lexical expert's
        competitive weight, eq. 10)."""
        return 1.0

    def regularization(self, q: Encoded, p: Encoded) -> torch.Tensor | None:
        """The one channel through which a model regularises its training (its routers): by
        default the sum of both sides' ``aux_loss``, a term each forward pass computed on its
        own (SB-MoE's balance losses, which need that pass's gate noise); a model whose term
        needs both sides at once overrides it (TASER's routing entropy, eq. 4-5). None adds
        nothing."""
        aux = [e.aux_loss.reshape(()) for e in (q, p) if e.aux_loss is not None]
        return torch.stack(aux).sum() if aux else None

    # -- shared behaviour ------------------------------------------------------------------
    def configure(self, **options: Any) -> RetrievalModel:
        """Set encode-time options (see ``encode_options``) in place; returns the model."""
        unknown = sorted(set(options) - set(self.encode_options))
        if unknown:
            raise UserError(f"{self.model_type} models have no encode-time option "
                            f"{', '.join(unknown)} (they have: "
                            f"{', '.join(self.encode_options) or 'none'})")
        for name, value in options.items():
            self.set_option(name, value)
        return self

    def set_option(self, name: str, value: Any) -> None:  # pragma: no cover - abstract
        """Apply one of ``encode_options`` (and record it in ``args``)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def score(self, q: Encoded, p: Encoded) -> torch.Tensor:
        """Similarity matrix [Bq, Bp] of what ``encode`` returned for queries and passages (the
        model's own :meth:`similarity`); anything else is one line naming it."""
        for side, encoded in (("queries", q), ("passages", p)):
            if not isinstance(encoded, Encoded):
                raise UserError(f"score takes what encode returned for the {side} (an Encoded), "
                                f"got {type(encoded).__name__}")
        return self.similarity(q, p)

    def similarity(self, q: Encoded, p: Encoded) -> torch.Tensor:
        """The model's similarity, the hook a model overrides; default: dot product of dense
        vectors."""
        if q.dense is None or p.dense is None:
            raise UserError(f"{self.model_type} scores dense vectors, and the "
                            f"{'queries' if q.dense is None else 'passages'} given hold none: "
                            "score what this model encoded")
        return q.dense @ p.dense.T

    def tokenize(self, texts: list[str], side: Side, max_length: int,
                 on_device: bool = True) -> dict[str, torch.Tensor]:
        """The padded batch ``forward`` takes; ``on_device=False`` leaves it on the CPU."""
        batch = tokenize(self.tokenizer, texts, side, max_length, "pt",
                         text_prefix(self.args, side))
        return {k: v.to(self.device) for k, v in batch.items()} if on_device else dict(batch)

    @torch.inference_mode()
    def encode(self, texts: list[str], side: Side, max_length: int | None = None,
               only: str | None = None) -> Encoded:
        """Encode one batch for inference (no gradient, eval mode expected).

        ``max_length`` None: the model's own length for ``side``
        (:func:`~pyserini_moe.modeling.lengths.encode_length`: queries as trained, passages at
        256), the length every other route uses too. ``only`` names the one representation
        wanted; models with several take it as a ``forward`` argument and skip the work of the
        others (an index needs one kind).
        """
        length = max_length or encode_length(self, side)
        return self.encode_tokens(self.tokenize(texts, side, length), side, only)

    def encode_query(self, queries: str | list[str]) -> Encoded:
        """sentence-transformers' name: the query side of one query or a list, at the model's
        query length (one row per query)."""
        return self.encode([queries] if isinstance(queries, str) else list(queries), Side.QUERY)

    def encode_document(self, passages: str | list[str]) -> Encoded:
        """sentence-transformers' name: the passage side of one passage or a list (an index
        encodes title + " " + text), at the model's passage length."""
        return self.encode([passages] if isinstance(passages, str) else list(passages),
                           Side.PASSAGE)

    @torch.inference_mode()
    def encode_tokens(self, batch: dict[str, torch.Tensor], side: Side,
                      only: str | None = None) -> Encoded:
        """:meth:`encode` of a batch already tokenized and on this model's device."""
        kwargs = {"only": only} if only is not None and len(self.representations) > 1 else {}
        dtype = PRECISIONS[self.precision]
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            out = self(**batch, side=side, **kwargs)
        return out if dtype is None else _float32(out)

    def set_precision(self, name: str) -> RetrievalModel:
        """Encode under ``torch.autocast`` from now on: ``fp16`` (CUDA only: PyTorch's float16
        kernels on CPU ran 3.6x slower than float32 here) or ``bf16`` (CUDA, or a CPU with
        bfloat16 instructions: 2.5x faster than float32 for MiniLM on an AVX512-BF16 core, cosine
        to the float32 vector >= 0.99997; a CPU without them emulates it, 4.4x slower: said once,
        and the fp16 refusal suggests --bf16 only where it helps). Outputs are float32 again;
        training is unaffected."""
        if name not in PRECISIONS:
            raise UserError(f"unknown precision {name!r}; choose from {', '.join(PRECISIONS)}")
        on_cpu = self.device.type == "cpu"
        if name == "fp16" and self.device.type != "cuda":
            advice = "; use --bf16" if on_cpu and cpu_has_bf16() else ""
            raise UserError(f"--fp16 needs a CUDA device (this model runs on {self.device}): "
                            f"PyTorch's float16 on CPU is slower than float32{advice}")
        if name == "bf16" and on_cpu and not cpu_has_bf16():
            _say_bf16_is_emulated()
        self.precision = name
        return self

def text_prefix(args: dict[str, Any], side: Side) -> str:
    """What a model puts before every text of ``side``: its ``query_prefix`` / ``passage_prefix``
    argument (E5's ``query: ``, a sentence-transformers model's prompts), else nothing."""
    return args.get(f"{side.value}_prefix") or ""


def is_blank(text: str) -> bool:
    """Nothing to read: only whitespace, control characters (NUL) and invisible format
    characters (a zero-width space, a byte-order mark, a word joiner), which ``str.strip``
    keeps and a tokenizer drops."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)


def check_text(text: object, what: str, *, blank: bool = False) -> str:
    """``text`` if it is a string a tokenizer takes (``blank``: may hold nothing to read, as an
    empty passage may), else one line naming ``what``: not a string, empty, or holding half of
    a UTF-16 surrogate pair (text decoded with ``surrogateescape`` or a JSON ``\\ud800``), which
    no tokenizer or UTF-8 writer takes."""
    if not isinstance(text, str):
        raise UserError(f"{what} is {type(text).__name__}, not a string")
    if not blank and is_blank(text):
        raise UserError(f"cannot encode an empty query ({what})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{what} holds {text[e.start]!r} (character {e.start + 1}), half of a "
                        "UTF-16 surrogate pair, not a character: fix the text's decoding") \
            from None
    return text


def tokenize(tokenizer: Any, texts: list[str], side: Side, max_length: int,
             tensors: str, prefix: str = "") -> dict[str, Any]:
    """``input_ids`` and ``attention_mask`` of a padded, truncated batch (``tensors``: "pt" or
    "np"), each text after ``prefix``. An empty passage is legal (Cranfield has two); an empty
    query is a user error."""
    if not texts:
        raise UserError(f"no {side.value} to encode: give at least one text")
    for number, text in enumerate(texts, 1):
        check_text(text, f"{side.value} {number}" if len(texts) > 1 else side.value,
                   blank=side is Side.PASSAGE)
    if prefix:
        texts = [prefix + t for t in texts]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length,
                      return_tensors=tensors)
    return {k: batch[k] for k in ("input_ids", "attention_mask")}


class SingleBackboneModel(RetrievalModel):
    """A model around one backbone, ``self.backbone``, built as ``cls(backbone, tokenizer,
    **args)``: its config is all that rebuilding the architecture needs (``from_backbone`` passes
    the arguments through to the constructor, which checks them as ``Args``)."""

    @classmethod
    def from_backbone(cls, name: str | os.PathLike | None = None,
                      device: str | torch.device | None = None, **args: Any) -> RetrievalModel:
        """The pretrained backbone ``name`` (default: the packaged MiniLM) and its tokenizer, with
        the model's own ``args`` (new modules start as the model's constructor makes them: expert
        FFNs as copies of the pretrained FFN, new heads at random); on ``device`` (default: CUDA
        when present)."""

        name = DEFAULT_BACKBONE if name is None else name
        model = cls(pretrained_encoder(name), load_tokenizer(name), **args)
        return model.to(check_device(device))

    @classmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any,
                     **args: Any) -> SingleBackboneModel:

        return cls(encoder_from_config(configs[""]), tokenizer, **args)

    def backbone_configs(self) -> dict[str, Any]:
        return {"": self.backbone.config}


def _float32(out: Encoded) -> Encoded:
    """``out`` with its autocast half-precision vectors back in float32 (what Faiss, Lucene's
    quantisation and numpy take)."""
    return dataclasses.replace(out, **{f: getattr(out, f).float() for f in ("dense", "sparse", "multi")
                                       if getattr(out, f) is not None})
