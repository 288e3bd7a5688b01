"""gptlib.quality: the figures that say whether a sample reads like the training text."""

from __future__ import annotations

import pytest

from gptlib.quality import Compression, TrainingText, compression, sample_quality

TRAINING = TrainingText.from_texts(
    ["ROMEO.\nBut soft, what light through yonder window breaks?\n\nJULIET.\nAy me.\n"]
)


def test_known_words_and_speakers_are_counted_against_the_training_text():
    q = sample_quality(["ROMEO.\nBut soft, what glimmers?\n\nTYBALT.\nAy me.\n"], TRAINING)
    assert q["n_words"] == 8 and q["known_words"] == pytest.approx(6 / 8)  # 'glimmers' and 'tybalt' are new
    assert (
        q["n_speakers"] == 2 and q["known_speakers"] == 0.5
    )  # ROMEO is a speaker of the training text, TYBALT not


def test_case_does_not_hide_a_known_word_or_speaker():
    q = sample_quality(["Romeo.\nBUT SOFT.\n"], TRAINING)
    assert (
        q["known_words"] == 1.0 and q["known_speakers"] == 1.0 and q["n_speakers"] == 1
    )  # a line of speech is no heading


def test_the_longest_run_of_blank_lines_is_found():
    assert sample_quality(["a\n\n\n\nb\n\nc"], TRAINING)["longest_blank_run"] == 3
    assert sample_quality(["one line, no blanks"], TRAINING)["longest_blank_run"] == 0
    assert (
        sample_quality(["a\n \n\t\nb", "c"], TRAINING)["longest_blank_run"] == 2
    )  # whitespace-only lines are blank


def test_stutters_are_new_words_with_a_letter_or_pair_three_times():
    q = sample_quality(["SHHHHUILLE and BEEENERNENENIUS, memememember; but soft, Ay"], TRAINING)
    assert q["stutters"] == ["beeenernenenius", "memememember", "shhhhuille"]
    assert sample_quality(["A headless sample: no speakers"], TRAINING)["known_speakers"] is None


def test_one_string_is_refused():
    with pytest.raises(TypeError, match="list of samples"):
        sample_quality("ROMEO.", TRAINING)


def test_the_training_text_is_read_back_from_the_shards_document_by_document(small_data):
    from gptlib.data import open_split
    from gptlib.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(small_data / "tokenizer")
    training = TrainingText.from_split(open_split(small_data / "shards", "train"), tokenizer)
    texts = [p.read_text(encoding="utf-8") for p in sorted((small_data / "texts").glob("*.txt"))]
    everything = TrainingText.from_texts(texts)
    assert training.words and training.words <= everything.words and training.speakers <= everything.speakers


def test_reference_losses_equal_a_direct_count():
    import math

    import numpy as np

    from gptlib.quality import reference_losses

    rng = np.random.default_rng(0)
    train, val, V, k = rng.integers(0, 7, 500), rng.integers(0, 7, 80), 9, 0.1
    losses = reference_losses(train, val, V, smoothing=k)
    assert losses["ln V"] == math.log(9)
    uni = np.bincount(train, minlength=V) + k
    assert losses["unigram"] == pytest.approx(-np.mean([math.log(uni[t] / uni.sum()) for t in val]))
    table = np.full((V, V), k)
    for a, b in zip(train[:-1], train[1:]):
        table[a, b] += 1
    expected = -np.mean([math.log(table[a, b] / table[a].sum()) for a, b in zip(val[:-1], val[1:])])
    assert losses["bigram"] == pytest.approx(expected)
    assert losses["unigram"] < losses["ln V"], "ids 7 and 8 never occur: counting beats guessing uniformly"


def test_compression_counts_the_bytes_and_the_tokens_of_the_texts(small_data):
    from gptlib.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(small_data / "tokenizer")
    texts = ["O Romeo, Romeo! wherefore art thou Romeo?", "café <|eos|>", ""]
    measured = compression(tokenizer, texts)
    tokens = sum(len(tokenizer.encode(text)) for text in texts)
    assert measured == Compression(bytes=41 + 13, tokens=tokens)
    assert measured.bytes_per_token == pytest.approx(54 / tokens) and tokens < 54, "merges make fewer tokens"
    assert compression(tokenizer, []).bytes_per_token == 0.0
