"""Hostile input: an encoder name that is neither a folder nor reachable is one error line, fast
(the hub's client used to retry five times, ~30 s of noise, before the clear error)."""

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
