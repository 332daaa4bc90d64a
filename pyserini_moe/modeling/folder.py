"""A model's self-describing folder: what :meth:`RetrievalModel.save` writes and
:func:`load_model` reads.

One folder: ``pyserini_moe.json`` (model type + its arguments + the query length it was trained
at), the backbone's ``config.json``, the tokenizer files, the weights and a model card
(``README.md``). Loading rebuilds the architecture from the backbone *config* (no hub access),
then loads the weights.

The weights file is ``pyserini_moe.safetensors``, not ``model.safetensors``: under transformers'
name, ``AutoModel``, sentence-transformers and Pyserini's ``auto`` encoder class would find a BERT
config, match none of the prefixed (``backbone.*``) weights, initialise every one at random and go
on without a word (nDCG@10 0.0047 instead of 0.3789). So that they stop with this package's
reason instead of transformers' generic "no file named model.safetensors", the folder also holds
``model.safetensors.index.json``, whose only shard is named after how to load the folder: their
error names it. A model they read correctly (Siamese: a plain backbone + pooling) keeps
transformers' layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from pyserini_moe.errors import UserError
from pyserini_moe.io import atomic_path, read_json
from pyserini_moe.modeling.backbone import (
    PACKAGED_MINILM_HUB_NAME,
    is_packaged_minilm,
    read_config,
    read_tokenizer,
    training_run_hint,
)
from pyserini_moe.modeling.device import check_device
from pyserini_moe.modeling.lengths import encode_length
from pyserini_moe.modeling.registry import model_class, model_types
from pyserini_moe.modeling.side import Side
from pyserini_moe.outputs import output_kind
from pyserini_moe.representation import Representation
from pyserini_moe.validate import ConfigError

if TYPE_CHECKING:
    from pyserini_moe.modeling.base import RetrievalModel, TextEncoder

MODEL_FILE = "pyserini_moe.json"
CARD_FILE = "README.md"
WEIGHTS_FILE = "pyserini_moe.safetensors"
# transformers' own file name: sentence-transformers-layout models (Siamese) store their weights
# under it; older folders of other models used it for the prefixed weights.
TRANSFORMERS_WEIGHTS_FILE = "model.safetensors"
# transformers reads a sharded checkpoint's index before looking for model.safetensors; its one
# shard does not exist, and its name is what transformers' error shows a user of AutoModel.
AUTOMODEL_REFUSAL_FILE = "model.safetensors.index.json"
AUTOMODEL_REFUSAL = "NOT-A-TRANSFORMERS-MODEL.load-this-folder-with-pyserini_moe.load_model"

# sentence-transformers' model-level configuration (its class, prompts)
ST_CONFIG_FILE = "config_sentence_transformers.json"
# The sentence-transformers module that loads a folder through this package.
ST_MODULE = "pyserini_moe.sentence_transformers.MoeRetriever"
# sentence-transformers' model class for a model with one representation other than dense
ST_MODEL_TYPES = {("sparse",): "SparseEncoder", ("multi",): "MultiVectorEncoder"}



class FolderFormat:
    """The saving half of the model contract, mixed into :class:`RetrievalModel`: the folder's
    files, written atomically. A model overrides ``write_foreign_files`` to be read by another
    library in that library's own layout (Siamese: sentence-transformers')."""

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
        kind = output_kind(directory)
        if kind not in (None, "a model"):
            # sentence-transformers wrote its configuration before asking the module to save;
            # no other output holds that file, so it goes with the refusal
            (directory / ST_CONFIG_FILE).unlink(missing_ok=True)
            raise FileExistsError(f"{directory} is {kind}, not a model: save the model into "
                                  "its own folder")
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
        if self.weights_file == WEIGHTS_FILE:
            self.write_automodel_refusal(tmp)
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
                  "type": ST_MODULE}], indent=2))
        if only:
            (folder / ST_CONFIG_FILE).write_text(json.dumps(
                {"model_type": only}, indent=2))

    def write_automodel_refusal(self, folder: Path) -> None:
        """The sharded-checkpoint index that makes ``AutoModel.from_pretrained(folder)`` (and
        Pyserini's ``auto`` encoder) fail naming how to load the folder (see the module doc)."""
        (folder / AUTOMODEL_REFUSAL_FILE).write_text(json.dumps(
            {"metadata": {"note": f"a pyserini-moe {self.model_type} model, not a transformers "
                                  "model: load it with pyserini_moe.load_model (see README.md)"},
             "weight_map": {"pyserini_moe": AUTOMODEL_REFUSAL}}, indent=2))


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
    _refuse_two_models(path, meta)
    if "kind" in meta:  # index folders share the metadata file name
        raise UserError(f"{path} is a {meta['kind']!r} index, not a model: pass the model that "
                        f"built it ({meta.get('encoder', 'see its ' + MODEL_FILE)})")
    model_type = meta.get("model_type")
    if model_type not in model_types():
        raise UserError(f"{path}: unknown model type {model_type!r}; known: {model_types()}")
    cls = model_class(model_type)
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
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # shapes that differ: torch lists every one, over many lines
        first = next((line.strip() for line in str(e).splitlines() if "size mismatch" in line),
                     " ".join(str(e).split())[:160])
        raise UserError(f"{path}: weights do not fit the {model_type} model its {MODEL_FILE} and "
                        f"config.json describe ({first[:200]}); one of them was changed: save "
                        "or copy the model again") from None
    if missing or unexpected:
        raise UserError(f"{path}: weights do not match the {model_type} architecture "
                        f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    model.query_max_length = recorded_query_length(meta, path / MODEL_FILE)
    return model.to(check_device(device)).eval()


def _refuse_two_models(path: Path, meta: dict[str, Any]) -> None:
    """A folder whose ``modules.json`` lists sentence-transformers' own modules while its
    ``pyserini_moe.json`` names a model saved under this package's weights file holds two
    models: sentence-transformers saved one over the other (``SentenceTransformer.save`` of
    another model into it), and each library would load a different one."""
    modules = path / "modules.json"
    model_type = meta.get("model_type")
    if not modules.is_file() or model_type not in model_types() \
            or model_class(model_type).weights_file != WEIGHTS_FILE:
        return
    listed = read_json(modules, "sentence-transformers module list")
    types = [m.get("type") for m in listed if isinstance(m, dict)] if isinstance(listed, list) \
        else []
    if types and types[0] != ST_MODULE:
        raise UserError(f"{path} holds two models: {MODEL_FILE} describes a {model_type} model, "
                        f"modules.json a sentence-transformers one ({types[0]}) saved over it; "
                        "save each model into its own folder")


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
