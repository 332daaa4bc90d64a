"""Dense bi-encoders: one shared (Siamese) backbone, or DPR's separate query/passage encoders."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pyserini_moe.errors import UserError
from pyserini_moe.io import read_json
from pyserini_moe.modeling.args import ModelArgs
from pyserini_moe.modeling.backbone import DEFAULT_BACKBONE, load_tokenizer, model_file
from pyserini_moe.modeling.base import (
    Encoded,
    RetrievalModel,
    Side,
    SingleBackboneModel,
    check_device,
)
from pyserini_moe.modeling.folder import ST_CONFIG_FILE, TRANSFORMERS_WEIGHTS_FILE
from pyserini_moe.modeling.lengths import default_length, passage_length, query_length
from pyserini_moe.modeling.pooling import (
    POOLINGS,
    encoder_from_config,
    pool,
    pretrained_encoder,
)
from pyserini_moe.modeling.registry import register
from pyserini_moe.validate import check, one_of


@dataclasses.dataclass(frozen=True)
class SiameseArgs(ModelArgs):
    """Mean pooling and L2 normalisation by default (all-MiniLM-L6-v2's); ``query_prefix`` /
    ``passage_prefix`` are put before every text of their side (E5's "query: ")."""

    pooling: str = dataclasses.field(default="mean", metadata=check(one_of(POOLINGS)))
    normalize: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""

    def saved(self) -> dict[str, Any]:
        """Prefixes only when set: a model without them keeps the arguments (and the fingerprint
        its indexes recorded) it had before prefixes existed."""
        return {k: v for k, v in super().saved().items() if v != "" or not k.endswith("_prefix")}


@dataclasses.dataclass(frozen=True)
class DprArgs(ModelArgs):
    """[CLS] pooling and an unnormalised dot product, as DPR."""

    pooling: str = dataclasses.field(default="cls", metadata=check(one_of(POOLINGS)))
    normalize: bool = False


def _embed(backbone: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
           pooling: str, normalize: bool) -> torch.Tensor:
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    vec = pool(hidden, attention_mask, pooling)
    return F.normalize(vec, dim=-1) if normalize else vec


@register
class SiameseBiEncoder(SingleBackboneModel):
    """Queries and passages through the same backbone; score = dot product of pooled vectors.

    Defaults (mean pooling, L2-normalised) are how all-MiniLM-L6-v2 was trained; normalised
    vectors give cosine scores in [-1, 1], so train them with a temperature (e.g. 0.05).
    """

    model_type = "siamese"
    representations = ("dense",)
    # Saved as sentence-transformers saves a model: transformers' model.safetensors (the backbone's
    # own keys), modules.json, the pooling config; SentenceTransformer(folder), AutoModel and
    # Pyserini's auto encoder class then give this model's vectors.
    weights_file = TRANSFORMERS_WEIGHTS_FILE
    hf_prefix = "backbone."

    Args = SiameseArgs

    def __init__(self, backbone: nn.Module, tokenizer: Any, **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        self.backbone = backbone
        self.pooling = a.pooling
        self.normalize = a.normalize

    @classmethod
    def zero_shot(cls, name: str | os.PathLike, device: str | torch.device | None = None,
                  pooling: str | None = None, normalize: bool | None = None,
                  query_prefix: str | None = None,
                  passage_prefix: str | None = None) -> SiameseBiEncoder:
        """A backbone used as it was published: pooling, normalisation and prompts from its
        sentence-transformers configuration where it has one (``modules.json``, the Pooling
        module's config, ``config_sentence_transformers.json``'s prompts), each overridden by
        the argument given; without one, mean pooling and L2 normalisation (all-MiniLM-L6-v2's)
        and no prefixes. Pyserini's ``--encoder-class auto`` flags are the arguments."""
        given = {"pooling": pooling, "normalize": normalize, "query_prefix": query_prefix,
                 "passage_prefix": passage_prefix}
        args = sentence_transformers_settings(name, **{k: v for k, v in given.items()
                                                       if v is not None})
        return cls.from_backbone(name, device=device, **args)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        return Encoded(dense=_embed(self.backbone, input_ids, attention_mask, self.pooling,
                                    self.normalize))

    def write_foreign_files(self, folder: Path) -> None:
        """sentence-transformers' module list: Transformer (this folder), Pooling, Normalize."""
        modules = [{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"}]
        if self.normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
            (folder / "2_Normalize").mkdir()
        (folder / "modules.json").write_text(json.dumps(modules, indent=2))
        # encode_query / encode_document cut each side where every other route does (ST >= 6.3
        # reads the per-task lengths); a plain encode, at every position.
        (folder / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": min(default_length(self), 512),
             "query_length": query_length(self), "document_length": passage_length(self),
             "do_lower_case": False}, indent=2))
        prompts = {side: self.args[f"{side}_prefix"] for side in ("query", "passage")
                   if f"{side}_prefix" in self.args}
        if prompts:  # SentenceTransformer.encode(..., prompt_name="query") adds them
            (folder / ST_CONFIG_FILE).write_text(json.dumps(
                {"prompts": prompts, "default_prompt_name": None}, indent=2))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": self.backbone.config.hidden_size,
            "pooling_mode_cls_token": self.pooling == "cls",
            "pooling_mode_mean_tokens": self.pooling == "mean",
            "pooling_mode_max_tokens": self.pooling == "max",
            "pooling_mode_mean_sqrt_len_tokens": False}, indent=2))


_ST_PASSAGE_PROMPTS = ("passage", "document", "corpus")  # names models give the passage prompt


def sentence_transformers_settings(name: str | os.PathLike, **given: Any) -> dict[str, Any]:
    """``pooling``, ``normalize``, ``query_prefix``, ``passage_prefix`` as the model's
    sentence-transformers files state them (those it states; none without such files), each
    replaced by the one ``given``: a setting given is never read, so a configuration this
    encoder cannot follow is refused only where it would be used."""
    modules = _read_model_file(name, "modules.json")
    if not isinstance(modules, list):
        return given
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
    found: dict[str, Any] = {"normalize": "Normalize" in kinds}
    pooling = {}
    if "Pooling" in kinds:
        pooling = _read_model_file(name, f"{kinds['Pooling'].get('path', '')}/config.json") or {}
        if "pooling" not in given:
            found["pooling"] = _st_pooling(pooling, name)
    prompts = (_read_model_file(name, ST_CONFIG_FILE) or {}).get("prompts") or {}
    found["query_prefix"] = prompts.get("query")
    found["passage_prefix"] = next((prompts[k] for k in _ST_PASSAGE_PROMPTS if prompts.get(k)),
                                   None)
    settings = {k: v for k, v in {**found, **given}.items() if v is not None}
    if pooling.get("include_prompt") is False and (settings.get("query_prefix")
                                                   or settings.get("passage_prefix")):
        raise UserError(f"{name}: its pooling leaves the prompt's tokens out (include_prompt: "
                        "false), which this toolkit's encoders do not do")
    return settings


def _st_pooling(config: dict[str, Any], name: str | os.PathLike) -> str | None:
    """The one pooling mode of a Pooling module's config (sentence-transformers >= 6 writes
    ``pooling_mode``; earlier versions one ``pooling_mode_*`` flag per mode)."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
                 for key, on in config.items() if key.startswith("pooling_mode_") and on]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if not modes:
        return None
    if len(modes) > 1 or modes[0] not in POOLINGS:
        raise UserError(f"{name}: sentence-transformers pooling {'+'.join(modes)} is not one of "
                        f"{', '.join(POOLINGS)}; pass --pooling to choose one")
    return modes[0]


def _read_model_file(name: str | os.PathLike, filename: str) -> Any:
    """A JSON file of a model folder or hub model (None when it has none)."""

    path = model_file(name, filename.lstrip("/"))
    return None if path is None else read_json(path, f"{name}'s {filename}")


@register
class DprBiEncoder(RetrievalModel):
    """DPR: a query encoder and a passage encoder, both starting from the same pretrained backbone.

    [CLS] pooling and unnormalised dot product by default, as in DPR. Saved with the query
    encoder's config at the root and the passage encoder's in ``passage/``.
    """

    model_type = "dpr"
    representations = ("dense",)
    backbone_slots = ("", "passage")

    Args = DprArgs

    def __init__(self, query_encoder: nn.Module, passage_encoder: nn.Module, tokenizer: Any,
                 **args: Any) -> None:
        a = self.parse_args(args)
        super().__init__(tokenizer, a)
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder
        self.pooling = a.pooling
        self.normalize = a.normalize

    @classmethod
    def from_backbone(cls, name: str | os.PathLike = DEFAULT_BACKBONE,
                      device: str | torch.device | None = None, **args: Any) -> DprBiEncoder:
        """Both encoders are copies of the pretrained backbone, with the constructor's ``args``;
        on ``device`` (default: CUDA when present)."""
        query_encoder = pretrained_encoder(name)
        model = cls(query_encoder, copy.deepcopy(query_encoder), load_tokenizer(name), **args)
        return model.to(check_device(device))

    @classmethod
    def from_configs(cls, configs: dict[str, Any], tokenizer: Any, **args: Any) -> DprBiEncoder:
        return cls(encoder_from_config(configs[""]), encoder_from_config(configs["passage"]),
                   tokenizer, **args)

    def backbone_configs(self) -> dict[str, Any]:
        return {"": self.query_encoder.config, "passage": self.passage_encoder.config}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: Side) -> Encoded:
        encoder = self.query_encoder if side == Side.QUERY else self.passage_encoder
        return Encoded(dense=_embed(encoder, input_ids, attention_mask, self.pooling,
                                    self.normalize))
