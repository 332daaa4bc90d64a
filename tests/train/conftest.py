"""Tests here run tiny models: single-threaded (see ``one_thread`` in tests/conftest.py)."""

from pathlib import Path

import pytest

from tests.helpers import toy_collection


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    yield


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """A learnable task: 24 documents of three words, each query the text of its positive."""
    return toy_collection(tmp_path_factory.mktemp("toy"))
