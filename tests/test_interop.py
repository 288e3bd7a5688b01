"""Tests of the tokenizer's files for other tools, written by `Tokenizer.save`: tiktoken's ranks file and
Hugging Face's `tokenizer.json` give the same ids as gptlib's own encoder, on hard strings and on the corpus,
and datatrove loads the Hugging Face file."""

from __future__ import annotations

import base64

import pytest

from gptlib.bpe_backends import tiktoken_ranks_text
from gptlib.tokenizer import GPT4_PATTERN, Tokenizer

tiktoken = pytest.importorskip("tiktoken")
hf_tokenizers = pytest.importorskip("tokenizers")

HARD_STRINGS = [
    "",
    "   ",
    "\t \t\r\n  \n",
    "Hello, WORLD! It's 12345 o'clock; don't you'll we've I'M",
    "日本語のテキストと中文文本",
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag",
    "e\u0301 vs \u00e9, a\u0308\u0304",
    "مرحبا بالعالم! שלום עולם",
    "a\x00b\x00\x00c",
    "x" * 3000,
    "0123456789" * 20,
    "text <|bos|> more <|eos|><|pad|> end <|unknown|>",
    "\u2028\u2029\u00a0\u1680\u3000 odd spaces",
]


@pytest.fixture(scope="module")
def tokenizer(corpus_texts):
    return Tokenizer.train(corpus_texts[:12], 2048)


@pytest.fixture(scope="module")
def exported(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported")
    tokenizer.save(folder)
    return folder


@pytest.fixture(scope="module")
def hf(exported):
    loaded = hf_tokenizers.Tokenizer.from_file(str(exported / "hf" / "tokenizer.json"))
    loaded.encode_special_tokens = True  # special-token spellings are text, as in our default
    return loaded


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_hf_export_agrees_on_hard_strings(tokenizer, hf, text):
    ids = tokenizer.with_backend("python").encode(text)
    assert hf.encode(text).ids == ids
    assert hf.decode(ids) == text


def test_hf_export_agrees_on_the_corpus(tokenizer, hf, corpus_texts):
    texts = corpus_texts[1::3]
    assert [e.ids for e in hf.encode_batch(texts)] == tokenizer.encode_batch(texts)


def test_hf_export_with_specials_allowed(tokenizer, exported):
    loaded = hf_tokenizers.Tokenizer.from_file(str(exported / "hf" / "tokenizer.json"))
    text = "<|bos|>Exeunt.<|eos|><|pad|>"
    assert loaded.encode(text).ids == tokenizer.encode(text, allowed_special="all")
    assert loaded.decode(tokenizer.encode("Exeunt all, save Hamlet.")) == "Exeunt all, save Hamlet."


def test_tiktoken_ranks_file_loads_into_tiktoken(tokenizer, exported):
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(exported / "tokenizer.tiktoken"))
    assert ranks == tokenizer.mergeable_ranks()
    encoding = tiktoken.Encoding("ours", pat_str=GPT4_PATTERN, mergeable_ranks=ranks, special_tokens={})
    for text in HARD_STRINGS:
        assert encoding.encode_ordinary(text) == tokenizer.with_backend("python").encode(text)


def test_base64_ranks_file_is_one_line_per_token(tokenizer):
    lines = tiktoken_ranks_text(tokenizer.mergeable_ranks()).splitlines()
    assert len(lines) == tokenizer.n_vocab - 3
    token, rank = lines[300].split()
    assert base64.b64decode(token) == tokenizer.token_bytes(int(rank)) and rank == "300"


def test_datatrove_loads_the_hf_export(tokenizer, exported):
    tokenization = pytest.importorskip("datatrove.utils.tokenization")
    loaded = tokenization.load_tokenizer(str(exported / "hf" / "tokenizer.json"))
    text = "O, that this too too solid flesh would melt,\nThaw, and resolve itself into a dew!"
    assert loaded.encode(text).ids == tokenizer.encode(text)
