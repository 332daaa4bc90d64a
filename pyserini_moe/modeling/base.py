"""The interface every retrieval model implements, and its self-describing save format.

A model maps a batch of texts of one *side* (queries or passages: MoE routers need to know) to
an :class:`Encoded` bundle holding whichever representations the model produces: a dense vector,
a vocabulary-sized term-weight vector (learned sparse), and/or token-level vectors
(multi-vector). ``score`` turns a query bundle and a passage bundle into the similarity matrix the
training losses and exact re-scoring use.

A saved model is one folder: ``pyserini_moe.json`` (model type + its arguments), the backbone's
``config.json``, the tokenizer files and ``pyserini_moe.safetensors`` (the whole state dict).
Loading rebuilds the architecture from the backbone *config* (no hub access), then loads the
weights. The weights file is deliberately not ``model.safetensors``: under that name transformers'
``AutoModel``, sentence-transformers and Pyserini's ``auto`` encoder class found a BERT config,
matched none of the prefixed (``backbone.*``) weights, initialised every one at random and went
on without a word (nDCG@10 0.0047 instead of 0.3789); now they stop with "no model weights".
Folders saved before keep loading.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import unicodedata
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, read_json
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import (
    DEFAULT_BACKBONE,
    PACKAGED_MINILM_HUB_NAME,
    is_packaged_minilm,
    load_tokenizer,
    read_config,
    read_tokenizer,
    training_run_hint,
)
from pyserini_moe.modeling.device import (
    PRECISIONS,
    _say_bf16_is_emulated,
    check_device,
    cpu_has_bf16,
)
from pyserini_moe.modeling.lengths import encode_length
from pyserini_moe.modeling.losses import contrastive_loss
from pyserini_moe.modeling.pooling import encoder_from_config, pretrained_encoder
from pyserini_moe.modeling.side import Side
from pyserini_moe.representation import INDEX_KINDS, REPRESENTATIONS, Representation
from pyserini_moe.validate import ConfigError

__all__ = ["INDEX_KINDS", "REPRESENTATIONS", "Representation", "Side"]  # re-exported: the model's vocabulary

MODEL_FILE = "pyserini_moe.json"
CARD_FILE = "README.md"
WEIGHTS_FILE = "pyserini_moe.safetensors"
# transformers' own file name: sentence-transformers-layout models (Siamese) store their weights
# under it; older folders of other models used it for the prefixed weights.
TRANSFORMERS_WEIGHTS_FILE = "model.safetensors"


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


_REGISTRY: dict[str, type[RetrievalModel]] = {}


def register(cls: type[RetrievalModel]) -> type[RetrievalModel]:
    """Class decorator: make ``cls`` loadable by its ``model_type``."""
    if cls.model_type in _REGISTRY:
        raise ValueError(f"model type {cls.model_type!r} registered twice")
    _REGISTRY[cls.model_type] = cls
    return cls


def model_types() -> list[str]:
    return sorted(_REGISTRY)


def model_class(model_type: str) -> type[RetrievalModel]:
    """The registered class of ``model_type`` (e.g. ``siamese`` -> SiameseBiEncoder)."""

    if model_type not in _REGISTRY:
        raise UserError(f"unknown model type {model_type!r}; known: {model_types()}")
    return _REGISTRY[model_type]


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


class RetrievalModel(nn.Module, ABC):
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
        """Similarity matrix [Bq, Bp]; default: dot product of dense vectors."""
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

    def save(self, directory: str | os.PathLike, *, into_existing: bool = False) -> Path:
        """Write the self-describing folder (atomically: a crash leaves no half-saved model).

        ``into_existing``: write the model's files into a folder that may hold others, replacing
        only its own, as a library saving around it needs (sentence-transformers' ``save`` and
        ``push_to_hub`` write their configuration there first); each file lands whole."""
        directory = Path(directory)
        if into_existing:
            return self._save_into(directory)
        with atomic_path(directory, directory=True) as tmp:
            self._write_files(tmp, directory)
        return directory

    def _save_into(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".pyserini-moe-save-", dir=directory))
        try:
            self._write_files(tmp, directory)
            for item in tmp.iterdir():
                target = directory / item.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(item, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return directory

    def _write_files(self, tmp: Path, directory: Path) -> None:
        """Every file of the folder into ``tmp``; the card names ``directory``."""
        (tmp / MODEL_FILE).write_text(json.dumps(self._model_file(), indent=2, sort_keys=True))
        for name, config in self.backbone_configs().items():
            target = tmp / name if name else tmp
            target.mkdir(exist_ok=True)
            config.save_pretrained(target)
        self.tokenizer.save_pretrained(tmp)
        state = {k.removeprefix(self.hf_prefix): v.detach().contiguous().cpu()
                 for k, v in self.state_dict().items()}
        save_file(_untie(state), str(tmp / self.weights_file))
        self.write_foreign_files(tmp)
        (tmp / CARD_FILE).write_text(self.model_card(directory))

    def _model_file(self) -> dict[str, Any]:
        """``pyserini_moe.json``: the type and arguments rebuild the architecture; the query
        length is written only where training recorded one."""
        meta: dict[str, Any] = {"model_type": self.model_type, "args": self.args}
        if self.query_max_length is not None:
            meta["query_max_length"] = self.query_max_length
        return meta

    def model_card(self, directory: Path) -> str:
        """The folder's ``README.md``: Hub metadata, then what the model is, the lengths it
        encodes at and how to load it (the trainer adds how it was trained). No machine path:
        the folder travels (``push_to_hub``)."""
        args = ", ".join(f"{k}={v}" for k, v in sorted(self.args.items())) or "none"
        base = base_model_name(next(iter(self.backbone_configs().values())))
        dense = "dense" in self.representations
        kinds = "|".join(r.index_kind for r in map(Representation, self.representations))
        meta = ["---", f"library_name: {'sentence-transformers' if dense else 'pyserini-moe'}",
                *([f"base_model: {base}"] if base else []), "license: apache-2.0",
                "tags:", "- pyserini-moe", "- retrieval", f"- {self.model_type}",
                *(["- mixture-of-experts"] if self.paper else []),
                *(["- sentence-transformers", "- feature-extraction"] if dense else []), "---"]
        lines = [*meta, "", f"# {self.model_type} retriever (pyserini-moe)", "",
                 "| field | value |", "|---|---|",
                 f"| model type | `{self.model_type}` |",
                 *([f"| paper | {self.paper} |"] if self.paper else []),
                 f"| representations | {', '.join(self.representations)} |",
                 f"| arguments | {args} |",
                 f"| backbone | {base or 'a local backbone (see config.json)'} |",
                 f"| parameters | {sum(p.numel() for p in self.parameters()):,} |",
                 f"| query length | {query_length_phrase(self)} |",
                 f"| passage length | {encode_length(self, Side.PASSAGE)} tokens |", "",
                 "Every route cuts texts at these lengths: `search`, `encode-queries`, the "
                 "Python API, Pyserini's searchers through this package's query encoders and "
                 "sentence-transformers' `encode_query` / `encode_document`.", "",
                 "## How to load", "",
                 "```python", "import pyserini_moe as pm",
                 f'model = pm.load_model("{directory.name}")  # this folder',
                 f'vectors = model.encode_query(["a question"])  # .{self.representations[0]}',
                 "```", "",
                 f"Index and search with it: `python -m pyserini_moe.index --retriever {kinds} "
                 f"--encoder {directory.name} ...`, then `python -m pyserini_moe.search`."]
        if self.weights_file == WEIGHTS_FILE:
            lines += ["", "transformers' `AutoModel` and Pyserini's `auto` encoder refuse this "
                      "folder (its weights are not a plain backbone's): load it as above."]
            if dense:
                lines += ["", "sentence-transformers loads it through pyserini-moe's own module: "
                          f'`SentenceTransformer("{directory.name}", trust_remote_code=True)`, '
                          "then `encode_query` and `encode_document` (the model's two sides)."]
            elif self.representations in ST_MODEL_TYPES:
                lines += ["", "sentence-transformers loads it through pyserini-moe's own module: "
                          f'`{ST_MODEL_TYPES[self.representations]}("{directory.name}", '
                          "trust_remote_code=True)`, then `encode_query` and `encode_document` "
                          "give its vectors."]
        else:
            lines += ["", "It is also a sentence-transformers model: "
                      f'`SentenceTransformer("{directory.name}")` gives the same vectors.']
        return "\n".join(lines) + "\n"

    def write_foreign_files(self, folder: Path) -> None:
        """Files other libraries read: a model with a dense vector lists pyserini-moe's own
        sentence-transformers module (:mod:`pyserini_moe.sentence_transformers`), so
        ``SentenceTransformer(folder)`` loads it through this package and ``encode_query`` /
        ``encode_document`` route to its query / passage side; a model whose only vector is
        sparse (SPLADE) lists it as a ``SparseEncoder`` (its term weights), one whose only
        vectors are per token (ColBERT) as a ``MultiVectorEncoder``."""
        only = ST_MODEL_TYPES.get(self.representations)
        if "dense" in self.representations or only:
            (folder / "modules.json").write_text(json.dumps(
                [{"idx": 0, "name": "0", "path": "",
                  "type": "pyserini_moe.sentence_transformers.MoeRetriever"}], indent=2))
        if only:
            (folder / "config_sentence_transformers.json").write_text(json.dumps(
                {"model_type": only}, indent=2))


# sentence-transformers' model class for a model with one representation other than dense
ST_MODEL_TYPES = {("sparse",): "SparseEncoder", ("multi",): "MultiVectorEncoder"}


def base_model_name(config: Any) -> str | None:
    """The Hub name of the backbone a config was loaded from, for a model card: the packaged
    MiniLM by its Hub name, a Hub name as it is, a local folder not at all (a machine path
    means nothing elsewhere)."""
    name = str(getattr(config, "_name_or_path", "") or "")
    if is_packaged_minilm(name):
        return PACKAGED_MINILM_HUB_NAME
    if not name or os.path.isabs(name) or name.startswith(".") or os.path.exists(name):
        return None
    return name


def query_length_phrase(model: RetrievalModel) -> str:
    """The card's query length: as trained, or every position for an untrained model."""
    if model.query_max_length:
        return f"{model.query_max_length} tokens (as trained)"
    return f"{encode_length(model, Side.QUERY)} tokens (every position: no training length)"


def text_prefix(args: dict[str, Any], side: Side) -> str:
    """What a model puts before every text of ``side``: its ``query_prefix`` / ``passage_prefix``
    argument (E5's ``query: ``, a sentence-transformers model's prompts), else nothing."""
    return args.get(f"{side.value}_prefix") or ""


def is_blank(text: str) -> bool:
    """Nothing to read: only whitespace and invisible format characters (a zero-width space, a
    byte-order mark, a word joiner), which ``str.strip`` keeps and a tokenizer drops."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


def tokenize(tokenizer: Any, texts: list[str], side: Side, max_length: int,
             tensors: str, prefix: str = "") -> dict[str, Any]:
    """``input_ids`` and ``attention_mask`` of a padded, truncated batch (``tensors``: "pt" or
    "np"), each text after ``prefix``. An empty passage is legal (Cranfield has two); an empty
    query is a user error."""
    if side is Side.QUERY and any(map(is_blank, texts)):
        raise UserError("cannot encode an empty query")
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


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): give each entry its own copy."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out


def is_saved_model(path: str | os.PathLike) -> bool:
    return (Path(path) / MODEL_FILE).is_file()


def load_model(path: str | os.PathLike, device: str | torch.device | None = None) -> RetrievalModel:
    """Load a folder written by :meth:`RetrievalModel.save`."""

    path = Path(path)
    if not is_saved_model(path):
        raise FileNotFoundError(f"{path} is not a saved pyserini-moe model (no {MODEL_FILE})"
                                f"{training_run_hint(path)}")

    meta = read_json(path / MODEL_FILE, "model metadata")
    check_model_files(path)
    if "kind" in meta:  # index folders share the metadata file name
        raise UserError(f"{path} is a {meta['kind']!r} index, not a model: pass the model that "
                        f"built it ({meta.get('encoder', 'see its ' + MODEL_FILE)})")
    model_type = meta.get("model_type")
    if model_type not in _REGISTRY:
        raise UserError(f"{path}: unknown model type {model_type!r}; known: {model_types()}")
    cls = _REGISTRY[model_type]
    configs = {}
    # The backbone configs (DPR's passage encoder in passage/); sentence-transformers' module
    # folders (1_Pooling/config.json) hold configs of their own, which are no backbone's.
    subs = [p.name for p in path.iterdir() if (p / "config.json").is_file()
            and "model_type" in read_json(p / "config.json", "backbone config")]
    for sub in [""] + subs:
        configs[sub] = read_config(path / sub if sub else path)
    args = meta.get("args", {})
    if not isinstance(args, dict):
        raise UserError(f"{path / MODEL_FILE}: 'args' is {type(args).__name__}, not a mapping of "
                        "the model's arguments; the file is damaged: save the model again")
    tokenizer = read_tokenizer(path)
    try:
        model = cls.from_configs(configs, tokenizer, **args)
    except ConfigError as e:
        raise ConfigError(f"{path / MODEL_FILE}: {e}; the file is damaged: save the model again",
                          e.field) from None
    except ValueError as e:  # transformers' check of a config it parsed: values that lie
        raise UserError(f"{path / 'config.json'}: the model config does not describe a model "
                        f"({' '.join(str(e).split())[:160]}); save or copy the model again") \
            from None
    weights_file = next((path / name for name in (WEIGHTS_FILE, TRANSFORMERS_WEIGHTS_FILE)
                         if (path / name).is_file()), path / cls.weights_file)
    try:
        weights = load_file(str(weights_file))
    except Exception as e:  # noqa: BLE001 - safetensors' own error type: a damaged or missing file
        raise UserError(f"{weights_file}: cannot read the weights ({e}); the file is "
                        "damaged or incomplete: save or copy the model again") from None
    if cls.hf_prefix and not any(k.startswith(cls.hf_prefix) for k in weights):
        weights = {cls.hf_prefix + k: v for k, v in weights.items()}  # transformers' layout
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise UserError(f"{path}: weights do not match the {model_type} architecture "
                        f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    model.query_max_length = recorded_query_length(meta, path / MODEL_FILE)
    return model.to(check_device(device)).eval()


def recorded_query_length(meta: dict[str, Any], source: Path) -> int | None:
    """The ``query_max_length`` a model or export file records (None where it records none);
    anything but a positive integer is a damaged file, said in one line."""
    length = meta.get("query_max_length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)
                               or length < 1):
        raise UserError(f"{source}: query_max_length is {length!r}, not a positive number of "
                        "tokens; the file is damaged: save the model again")
    return length


# A saved folder needs its backbone config and its tokenizer: without the tokenizer files
# transformers falls back to a default tokenizer without a word, and every text is [UNK].
TOKENIZER_VOCABULARIES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model",
                          "sentencepiece.bpe.model")


def check_model_files(path: Path) -> None:
    if not (path / "config.json").is_file():
        hint = training_run_hint(path)
        raise UserError(f"{path}: no config.json{hint}" if hint else
                        f"{path}: no config.json: the model folder is incomplete; save or copy "
                        "it again")
    if not (path / "tokenizer_config.json").is_file() or not any(
            (path / name).is_file() for name in TOKENIZER_VOCABULARIES):
        raise UserError(f"{path}: the tokenizer files (tokenizer_config.json and a vocabulary) "
                        "are missing: the model folder is incomplete; save or copy it again")


def fingerprint(model: TextEncoder) -> str:
    """Short, stable identity of a model's architecture and weights.

    Stored with every index, compared when searching: an index built by one encoder and searched
    with another fails loudly instead of returning plausible-looking garbage. An ONNX export
    carries its own (its source model's, or a distinct one for int8 graphs).
    """
    recorded = getattr(model, "fingerprint", None)
    if isinstance(recorded, str):
        return recorded
    h = hashlib.sha256(json.dumps({"type": model.model_type, "args": model.args},
                                  sort_keys=True).encode())
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().flatten().double().cpu()
            h.update(name.encode())
            h.update(str(tuple(tensor.shape)).encode())
            h.update(f"{flat.sum().item():.6e}|{flat.abs().sum().item():.6e}".encode())
            h.update(flat[:16].numpy().round(6).tobytes())
    return h.hexdigest()[:16]
