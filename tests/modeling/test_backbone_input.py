"""Loading a backbone (:mod:`pyserini_moe.modeling.backbone`): a name that is neither a folder nor
reachable is one error line, fast (the hub's client used to retry five times, ~30 s of noise,
before the clear error)."""

from __future__ import annotations

import time

import pytest

import pyserini_moe.modeling.backbone as backbone
from pyserini_moe.modeling.backbone import BackboneNotFoundError, load_config


def test_an_unreachable_hub_fails_at_once_with_the_reason(monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(backbone, "_HUB_REACHABLE", None)
    monkeypatch.setenv("HF_ENDPOINT", "https://no-such-host.invalid")
    start = time.monotonic()
    with pytest.raises(BackboneNotFoundError, match="the hub cannot be reached from here"):
        load_config("no-such-org/no-such-model")
    assert time.monotonic() - start < 10
    assert backbone._HUB_REACHABLE is False  # asked once per process


def test_offline_mode_says_so(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BackboneNotFoundError, match="HF_HUB_OFFLINE=1"):
        load_config("no-such-org/no-such-model")


def _hub_answers(monkeypatch, answer: Exception | None) -> list[dict]:
    """A reachable hub whose model lookup gives ``answer`` (None: the model is there), and a
    config loader that records its calls (transformers' own hub client retries ~30 s)."""
    from huggingface_hub import HfApi
    from transformers import AutoConfig

    def model_info(self, repo_id, **kwargs):
        if answer is not None:
            raise answer
        return object()

    calls: list[dict] = []

    def from_pretrained(name, **kwargs):
        calls.append(kwargs)
        raise OSError(f"{name} could not be fetched")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(backbone, "_hub_reachable", lambda: True)
    monkeypatch.setattr(HfApi, "model_info", model_info)
    monkeypatch.setattr(AutoConfig, "from_pretrained", from_pretrained)
    backbone._hub_has.cache_clear()
    return calls


def test_a_name_the_reachable_hub_lacks_fails_once_without_retries(monkeypatch) -> None:
    """The hub answered that the model does not exist, and loading still went through
    the hub client's retries before its error."""
    import httpx2
    from huggingface_hub.errors import RepositoryNotFoundError

    response = httpx2.Response(401, request=httpx2.Request("GET", "https://huggingface.co/x"))
    calls = _hub_answers(monkeypatch, RepositoryNotFoundError("401: not found", response=response))
    with pytest.raises(BackboneNotFoundError) as info:
        load_config("no-such-org/no-such-model")
    assert str(info.value) == ("cannot load backbone config 'no-such-org/no-such-model': not a "
                               "local model folder, and the Hugging Face hub has no model of that "
                               "name (or none this user may see)")
    assert calls == []  # transformers (and its retrying client) never asked
    backbone._hub_has.cache_clear()


def test_a_hub_that_accepts_connections_but_does_not_answer_is_read_from_the_cache(
        monkeypatch) -> None:
    import httpx2

    calls = _hub_answers(monkeypatch, httpx2.ConnectError("TLS handshake failed"))
    with pytest.raises(BackboneNotFoundError, match="the hub cannot be reached from here"):
        load_config("some-org/some-model")
    # the cache, not ~30 s of retries; never the folder's own code
    assert calls == [{"local_files_only": True, "trust_remote_code": False}]
    calls = _hub_answers(monkeypatch, None)
    with pytest.raises(BackboneNotFoundError, match="could not be fetched"):
        load_config("some-org/some-model")
    assert calls == [{"trust_remote_code": False}]  # a model the hub has: transformers fetches it
    backbone._hub_has.cache_clear()
