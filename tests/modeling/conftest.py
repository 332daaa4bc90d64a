"""Tests here run tiny models: single-threaded (see ``one_thread`` in tests/conftest.py)."""

import pytest


@pytest.fixture(autouse=True)
def _single_threaded(one_thread):
    yield
