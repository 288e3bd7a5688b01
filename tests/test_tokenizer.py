"""Tests of gptlib.tokenizer and its back-ends (gptlib.bpe_backends): a golden worked example, merges equal to
rustbpe's and to a recounting trainer, ids equal to tiktoken's and to a reference encoder, round trips
(hypothesis), the one way to save (only the tokenizer's own files, all or none) and every corrupted-file
case. The files for tiktoken and Hugging Face are tested in test_interop.py."""

from __future__ import annotations

import json
import pickle
import random
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import gptlib.bpe_backends as backends
import gptlib.tokenizer as tokmod
from gptlib.cli import main as cli_main
from gptlib.tokenizer import (
    GPT4_PATTERN,
    SPECIAL_TOKENS,
    Tokenizer,
    TokenizerError,
    count_chunks,
    encode_chunk,
    train_merges,
)

rustbpe = pytest.importorskip("rustbpe")
tiktoken = pytest.importorskip("tiktoken")
ROOT = Path(__file__).resolve().parent.parent

HARD_STRINGS = [
    "",
    " ",
    "    ",
    "\n\n\n",
    "\t \t\r\n  \n",
    "trailing spaces   ",
    "   leading spaces",
    "hello world",
    "Hello, WORLD! It's 12345 o'clock; don't you'll we've I'M",
    "日本語のテキストと中文文本",
    "한국어 텍스트",
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag",
    "e\u0301 vs \u00e9, a\u0308\u0304, Z\u0351\u0352\u0353",
    "مرحبا بالعالم! שלום עולם",
    "a\x00b\x00\x00c",
    "x" * 3000,
    "supercalifragilistic" * 50,
    "0123456789" * 20,
    "<|eos|>",
    "text <|bos|> more <|eos|><|pad|> end <|unknown|>",
    "<|eos",
    "¹²³ ½ Ⅻ ٣٤٥",
    "\u2028\u2029\u00a0\u1680\u3000 odd spaces",
    "tab\tsep\tvalues\n",
]


@pytest.fixture(scope="module")
def small_texts(corpus_texts):
    """Three plays plus text in other scripts, so the non-ASCII path is trained too."""
    return corpus_texts[:3] + [" ".join(HARD_STRINGS)] * 3


@pytest.fixture(scope="module")
def tokenizer(corpus_texts):
    return Tokenizer.train(corpus_texts, 4096)


# --- training -----------------------------------------------------------------------------------------


def test_golden_worked_example_merges_by_hand():
    # "aaabdaaabac" is one chunk. Counts: aa 4, ab 2, others 1 -> (a, a) = 256.
    # Then "Z a b d Z a b a c": Za 2 and ab 2 tie -> the smaller pair (97, 98) = 257.
    # Then "Z Y d Z Y a c": ZY 2 -> (256, 257) = 258. Then "X d X a c", all 1: smallest is (97, 99) = 259.
    # Then "X d X W": smallest (100, 258) = 260, then "X V W": smallest (258, 260) = 261, leaving "U W".
    expected = [(97, 97), (97, 98), (256, 257), (97, 99), (100, 258), (258, 260)]
    tok = Tokenizer.train(["aaabdaaabac"], 256 + 6 + 3, workers=1)
    assert tok.merges == expected
    assert tok.encode("aaabdaaabac") == [261, 259]
    reference = rustbpe.Tokenizer()
    reference.train_from_iterator(["aaabdaaabac"], 256 + 6)
    assert sorted(reference.get_mergeable_ranks(), key=lambda t: t[1])[256:] == [
        (tok.token_bytes(256 + i), 256 + i) for i in range(6)
    ]


def test_running_out_of_pairs_stops_and_reports():
    with pytest.warns(UserWarning, match="ran out of pairs after 7 of"):
        tok = Tokenizer.train(["aaabdaaabac"], 1000, workers=1)
    assert tok.train_stats.merges == 7 and tok.train_stats.ran_out_of_pairs
    assert tok.merges[-1] == (261, 259) and tok.encode("aaabdaaabac") == [262]
    assert tok.n_vocab == 256 + 7 + 3 and tok.eos_id == tok.n_vocab - 2


def _rustbpe_ranks(texts, n_merges):
    reference = rustbpe.Tokenizer()
    reference.train_from_iterator(texts, 256 + n_merges, pattern=GPT4_PATTERN)
    return [token for token, _ in sorted(reference.get_mergeable_ranks(), key=lambda t: t[1])]


def test_merges_equal_rustbpe_on_a_small_mixed_script_corpus(small_texts):
    ours = Tokenizer.train(small_texts, 2048, workers=1)
    ours_tokens = [ours.token_bytes(i) for i in range(ours.n_vocab - 3)]
    theirs = _rustbpe_ranks(small_texts, 2048 - 259)
    first_difference = next((i for i, (a, b) in enumerate(zip(ours_tokens, theirs)) if a != b), None)
    assert first_difference is None and len(ours_tokens) == len(theirs)


def test_merges_equal_rustbpe_on_the_whole_corpus(tokenizer, corpus_texts):
    theirs = _rustbpe_ranks(corpus_texts, 4096 - 259)
    assert [tokenizer.token_bytes(i) for i in range(tokenizer.n_vocab - 3)] == theirs


def test_parallel_chunk_counts_equal_sequential(corpus_texts):
    texts = corpus_texts[:6]
    sequential = count_chunks(texts, workers=1)
    assert count_chunks(texts, workers=2, batch_chars=200_000) == sequential
    assert count_chunks(iter(texts), workers=3, batch_chars=100_000) == sequential  # a stream, two helpers


def test_ascii_splitter_matches_the_regex_package():
    try:
        ascii_findall = re.compile(backends.GPT4_ASCII_TWIN).findall
    except re.error:
        pytest.skip("the ASCII fast split needs Python 3.11 (possessive quantifiers in re)")
    split = tokmod._split_function(GPT4_PATTERN)
    rng = random.Random(0)
    alphabet = [chr(i) for i in range(128)] + ["'s", "'LL", " ", "\n", "\r\n", "ab", "12"] * 8
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        assert ascii_findall(text) == split(text) == regex.findall(GPT4_PATTERN, text), repr(text)


def test_train_merges_of_empty_counts_is_empty():
    assert train_merges({}, 10) == []
    assert train_merges({"a": 5}, 10) == []


def _recounting_merges(chunk_counts, n_merges):
    "The textbook loop on weighted chunks: recount every pair, merge the best (highest count, then smallest)."
    words = {tuple(chunk.encode()): count for chunk, count in chunk_counts.items()}
    merges = []
    for new in range(256, 256 + n_merges):
        counts = {}
        for word, weight in words.items():
            for pair in zip(word, word[1:]):
                counts[pair] = counts.get(pair, 0) + weight
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        merged = {}
        for word, weight in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i : i + 2] == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + weight
        words = merged
    return merges


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(alphabet="abé ", min_size=1, max_size=12), st.integers(1, 9), max_size=12))
def test_train_merges_equals_recounting_on_repeated_and_overlapping_pairs(chunk_counts):
    # a tiny alphabet makes runs (aaaa), repeats (abab) and pairs next to their own merge (new, new)
    assert train_merges(chunk_counts, 40) == _recounting_merges(chunk_counts, 40)


def test_tokenizer_rejects_merges_that_use_ids_not_made_yet():
    with pytest.raises(TokenizerError, match=r"merge 1 \(300, 2\) uses an id"):
        Tokenizer([(0, 1), (300, 2)])
    with pytest.raises(TokenizerError, match=r"merge 0 \(0, -1\) uses an id"):
        Tokenizer([(0, -1)])
    assert Tokenizer([(0, 1), (256, 2)]).token_bytes(257) == b"\x00\x01\x02"


# --- bad training input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [0, 100, 258])
def test_vocab_smaller_than_bytes_plus_specials_is_refused(vocab_size):
    with pytest.raises(ValueError, match="too small"):
        Tokenizer.train(["some text"], vocab_size)


def test_vocab_size_must_be_an_int():
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        Tokenizer.train(["some text"], 1000.0)


@pytest.mark.parametrize("texts", [[], [""], ["", ""]])
def test_empty_corpus_is_refused(texts):
    with pytest.raises(TokenizerError, match="empty"):
        Tokenizer.train(texts, 300)


def test_whitespace_only_corpus_is_refused():
    with pytest.raises(TokenizerError, match="only whitespace"):
        Tokenizer.train(["   \n\n  ", "\t"], 300)


def test_a_single_string_or_bytes_is_refused():
    with pytest.raises(TypeError, match="not a single str"):
        Tokenizer.train("a whole corpus as one string", 300)
    with pytest.raises(TypeError, match="document 1 is a bytes"):
        Tokenizer.train(["fine", b"raw bytes"], 300)


def test_vocab_above_65536_warns_about_4_byte_shards():
    with pytest.warns(UserWarning) as caught:
        Tokenizer.train(["a small text, so it also runs out of pairs"], 70_000, workers=1)
    messages = [str(w.message) for w in caught]
    assert any("4-byte" in m for m in messages) and any("ran out of pairs" in m for m in messages)


def test_bad_pattern_is_a_clear_error():
    with pytest.raises(TokenizerError, match="not a valid regex"):
        Tokenizer.train(["text"], 300, pattern="(unclosed")


# --- encoding: parity with tiktoken and with a reference encoder -----------------------------------------


def test_python_and_tiktoken_encoders_agree_on_the_corpus(tokenizer, corpus_texts):
    python, fast = tokenizer.with_backend("python"), tokenizer.with_backend("tiktoken")
    assert fast.backend == "tiktoken" and python.backend == "python"
    for text in corpus_texts[::4]:
        assert python.encode(text) == fast.encode(text)


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_python_and_tiktoken_agree_on_hard_strings(tokenizer, text):
    python, fast = tokenizer.with_backend("python"), tokenizer.with_backend("tiktoken")
    ids = python.encode(text)
    assert ids == fast.encode(text)
    assert tokenizer.decode(ids) == text
    assert python.encode(text, "all") == fast.encode(text, "all")


def reference_encode(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    "tiktoken's rule spelled out: a token is one id; else join the lowest-ranked pair, leftmost first."
    if piece in ranks:
        return [ranks[piece]]
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        joined = [ranks.get(left + right, float("inf")) for left, right in zip(parts, parts[1:])]
        i = joined.index(min(joined))
        if joined[i] == float("inf"):
            break
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[part] for part in parts]


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_round_trip_and_encoder_parity_on_any_text(tokenizer, text):
    ids = tokenizer.with_backend("python").encode(text)
    assert tokenizer.decode(ids) == text
    assert ids == tokenizer.with_backend("tiktoken").encode(text)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x2FF), min_size=65, max_size=400))
def test_long_chunk_rule_equals_the_reference(tokenizer, text):
    piece, ranks = text.encode("utf-8"), tokenizer.mergeable_ranks()
    assert (
        backends.encode_long_chunk(piece, ranks)
        == reference_encode(piece, ranks)
        == encode_chunk(piece, ranks)
    )


def test_encode_chunk_joins_bytes_and_looks_the_whole_chunk_up():
    # bc 256, ab 257, cd 258, abc 259 (made as ab + c), abcd 260 (made as ab + cd)
    ranks = Tokenizer([(98, 99), (97, 98), (99, 100), (257, 99), (257, 258)]).mergeable_ranks()
    for rule in (encode_chunk, backends.encode_long_chunk):
        assert rule(b"abcx", ranks) == [259, 120]  # a + bc joins into the bytes abc, though made as ab + c
        assert rule(b"abcd", ranks) == [260]  # a token is one id, though joining stops at abc + d
        assert rule(b"aaa", Tokenizer([(97, 97)]).mergeable_ranks()) == [256, 97]  # the leftmost of equals
        assert rule(b"", ranks) == [] and rule(b"z", ranks) == [122]


def test_very_long_words_encode_fast_and_equal(tokenizer):
    word = "".join(random.Random(1).choice("abcdefgh") for _ in range(20_000))
    assert tokenizer.with_backend("python").encode(word) == tokenizer.with_backend("tiktoken").encode(word)


def test_lone_surrogates_become_replacement_characters(tokenizer):
    text = "a\ud800b \udfff"
    python, fast = tokenizer.with_backend("python"), tokenizer.with_backend("tiktoken")
    assert python.encode(text) == fast.encode(text)
    assert tokenizer.decode(python.encode(text)) == "a\ufffdb \ufffd"


def test_encode_batch_equals_encode_with_processes(tokenizer, corpus_texts, monkeypatch):
    python = tokenizer.with_backend("python")
    texts = [text[:20_000] for text in corpus_texts[:8]] + ["", "<|eos|>"]
    monkeypatch.setattr(backends, "PARALLEL_MIN_CHARS", 0)
    expected = [python.encode(text) for text in texts]
    assert python.encode_batch(texts, workers=2) == expected
    assert tokenizer.with_backend("tiktoken").encode_batch(texts, workers=2) == expected
    assert python.encode_batch(texts, "all", workers=2)[-1] == [tokenizer.eos_id]


# --- special tokens ------------------------------------------------------------------------------------


def test_special_tokens_take_the_last_three_ids(tokenizer):
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (4093, 4094, 4095)
    assert tokenizer.special_tokens == dict(zip(SPECIAL_TOKENS, (4093, 4094, 4095)))


@pytest.mark.parametrize("backend", ["python", "tiktoken"])
def test_special_spellings_are_text_unless_allowed(tokenizer, backend):
    tok = tokenizer.with_backend(backend)
    text = "<|bos|>Enter Ghost.<|eos|>"
    plain = tok.encode(text)
    assert not set(plain) & set(tok.special_tokens.values())
    assert tok.decode(plain) == text
    allowed = tok.encode(text, allowed_special="all")
    assert allowed[0] == tok.bos_id and allowed[-1] == tok.eos_id and tok.decode(allowed) == text
    only_eos = tok.encode(text, allowed_special={"<|eos|>"})
    assert only_eos[-1] == tok.eos_id and tok.bos_id not in only_eos


def test_unknown_allowed_special_is_refused(tokenizer):
    with pytest.raises(ValueError, match="unknown special tokens"):
        tokenizer.encode("x", allowed_special={"<|endoftext|>"})
    with pytest.raises(ValueError, match="allowed_special must be"):
        tokenizer.encode("x", allowed_special="some")
    with pytest.raises(TypeError, match="encode takes a str"):
        tokenizer.encode(b"bytes")


# --- decoding ------------------------------------------------------------------------------------------


def test_decode_never_raises(tokenizer):
    e_acute = tokenizer.encode("é")
    assert len(tokenizer.token_bytes(e_acute[0])) == 1  # "é" is two byte tokens
    assert tokenizer.decode(e_acute[:1]) == "\ufffd"
    assert tokenizer.decode([0xFF, 65]) == "\ufffdA"
    assert tokenizer.decode([-1, 65, 10**9]) == "\ufffdA\ufffd"
    assert tokenizer.decode(np.array(tokenizer.encode("numpy ids"))) == "numpy ids"
    assert tokenizer.decode([]) == ""


def test_token_byte_lengths_count_the_bytes(tokenizer, corpus_texts):
    lengths = tokenizer.token_byte_lengths()
    assert lengths.dtype == np.int32 and lengths.shape == (tokenizer.n_vocab,)
    assert list(lengths[-3:]) == [0, 0, 0]
    text = corpus_texts[7][:50_000] + " 日本 👍"
    assert int(lengths[tokenizer.encode(text)].sum()) == len(text.encode("utf-8"))


# --- identity, save and load -----------------------------------------------------------------------------


def test_fingerprint_is_stable_and_tells_tokenizers_apart(tokenizer, corpus_texts):
    again = Tokenizer(tokenizer.merges)
    assert again.fingerprint() == tokenizer.fingerprint() and again == tokenizer
    assert Tokenizer(tokenizer.merges[:-1]).fingerprint() != tokenizer.fingerprint()
    assert pickle.loads(pickle.dumps(tokenizer)).fingerprint() == tokenizer.fingerprint()


def test_save_load_round_trip(tokenizer, tmp_path):
    assert tokenizer.save(tmp_path / "tok") == tmp_path / "tok"
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.merges == tokenizer.merges and loaded.fingerprint() == tokenizer.fingerprint()
    assert Tokenizer.load(tmp_path / "tok" / "tokenizer.json") == tokenizer
    vocab = (tmp_path / "tok" / "tokenizer.vocab").read_text(encoding="utf-8")
    assert f"{tokenizer.eos_id}\t<|eos|> (special)" in vocab
    files = sorted(str(p.relative_to(tmp_path / "tok")) for p in (tmp_path / "tok").rglob("*") if p.is_file())
    assert files == ["hf/tokenizer.json", "tokenizer.json", "tokenizer.tiktoken", "tokenizer.vocab"]


def test_save_replaces_only_its_own_files_and_only_when_asked(tokenizer, tmp_path):
    folder = tmp_path / "tok"
    tokenizer.save(folder)
    (folder / "NOTES.md").write_text("mine")
    tokenizer.save(folder)  # the same tokenizer again: nothing is replaced
    other = Tokenizer(tokenizer.merges[:-1])
    with pytest.raises(TokenizerError, match="already holds a tokenizer"):
        other.save(folder)
    assert Tokenizer.load(folder) == tokenizer
    other.save(folder, overwrite=True)
    assert Tokenizer.load(folder) == other and (folder / "NOTES.md").read_text() == "mine"
    assert sorted(p.name for p in folder.iterdir()) == [
        "NOTES.md",
        "hf",
        "tokenizer.json",
        "tokenizer.tiktoken",
        "tokenizer.vocab",
    ]  # no temporary file left


def test_save_refuses_a_folder_of_something_else_and_a_file_name(tokenizer, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    for folder, message in (
        (tmp_path / "mine", "holds no tokenizer"),
        (tmp_path / "mine" / "notes.txt", "is not a folder"),
        (tmp_path / "tokenizer.json", "not a file name like"),
    ):
        with pytest.raises(TokenizerError, match=message):
            tokenizer.save(folder, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def _corrupt(folder, edit):
    path = folder / "tokenizer.json"
    payload = json.loads(path.read_text())
    edit(payload)
    path.write_text(json.dumps(payload))


def _set(key, value):
    return lambda payload: payload.__setitem__(key, value)


def _swap_first_merge(payload):
    payload["merges"][0] = [payload["merges"][0][1], payload["merges"][0][0]]


CORRUPTIONS = [
    ("format", _set("format", "something-else"), "is not a gptlib-bpe tokenizer"),
    ("version", _set("version", 99), "version 99"),
    ("missing merges", lambda p: p.pop("merges"), r"lacks the field\(s\) \['merges'\]"),
    ("merge not a pair", lambda p: p["merges"].__setitem__(3, [1, 2, 3]), "merge 3 is"),
    ("merge of strings", lambda p: p["merges"].__setitem__(3, ["a", "b"]), "merge 3 is"),
    ("future id", lambda p: p["merges"].__setitem__(0, [300, 1]), "does not exist before id 256"),
    ("n_vocab", _set("n_vocab", 5), "n_vocab is 5"),
    ("specials", _set("special_tokens", {"<|eos|>": 0}), "special_tokens is"),
    ("edited merge", _swap_first_merge, "fingerprint is .* but the merges make"),
    ("duplicate token", lambda p: p["merges"].__setitem__(1, p["merges"][0]), "same bytes"),
    ("pattern", _set("pattern", "(unclosed"), "not a valid regex"),
    ("emptied", lambda p: p.clear(), "is not a gptlib-bpe tokenizer"),
]


@pytest.mark.parametrize("name,edit,message", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_corrupted_file_is_a_clear_error(tokenizer, tmp_path, name, edit, message):
    tokenizer.save(tmp_path)
    _corrupt(tmp_path, edit)
    with pytest.raises(TokenizerError, match=message):
        Tokenizer.load(tmp_path)


def test_truncated_garbage_and_missing_files_are_clear_errors(tokenizer, tmp_path):
    tokenizer.save(tmp_path)
    path = tmp_path / "tokenizer.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.load(tmp_path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TokenizerError, match="not UTF-8"):
        Tokenizer.load(tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(TokenizerError, match="is not a gptlib-bpe tokenizer"):
        Tokenizer.load(tmp_path)
    with pytest.raises(TokenizerError, match="no tokenizer at"):
        Tokenizer.load(tmp_path / "nowhere")


# --- command line ---------------------------------------------------------------------------------------


def test_cli_train_encode_decode(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the cat sat on the mat. " * 50, encoding="utf-8")
    (corpus / "b.txt").write_text("the dog sat on the log! " * 50, encoding="utf-8")
    out = tmp_path / "tok"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            cli_main(
                [
                    "tokenizer",
                    "train",
                    "--corpus",
                    str(corpus),
                    "--vocab-size",
                    "300",
                    "--out",
                    str(out),
                    "-q",
                    "--workers",
                    "1",
                ]
            )
            == 0
        )
    printed = capsys.readouterr().out
    assert "of 41 merges" in printed and "saved to" in printed
    assert (
        cli_main(
            ["tokenizer", "encode", "--tokenizer", str(out), "--text", "the cat <|eos|>", "--allow-special"]
        )
        == 0
    )
    ids = json.loads(capsys.readouterr().out)
    assert ids[-1] == Tokenizer.load(out).eos_id
    assert cli_main(["tokenizer", "decode", "--tokenizer", str(out), "--ids", json.dumps(ids)]) == 0
    assert capsys.readouterr().out == "the cat <|eos|>\n"


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert cli_main(["tokenizer", "train", "--corpus", str(corpus), "--out", str(tmp_path / "t"), "-q"]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert cli_main(["tokenizer", "train", "--corpus", "shakespeare", "--vocab-size", "10", "-q"]) == 2
    assert "too small" in capsys.readouterr().err
    assert cli_main(["tokenizer", "encode", "--tokenizer", str(tmp_path / "missing"), "--text", "x"]) == 2
    assert "no tokenizer at" in capsys.readouterr().err


def test_custom_pattern_trains_and_encodes_with_the_python_encoder():
    tok = Tokenizer.train(
        ["one line of text\nanother line of text\n"] * 5, 280, pattern=r"[^\n]*\n|[^\n]+", workers=1
    )
    assert tok.backend == "python" and tok.pattern == r"[^\n]*\n|[^\n]+"
    text = "one line of text\nand more"
    assert tok.decode(tok.encode(text)) == text
    assert tok.with_backend("tiktoken").encode(text) == tok.encode(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7FF), max_size=64))
def test_encode_chunk_equals_the_bytes_rule(tokenizer, text):
    piece, ranks = text.encode("utf-8")[:64], tokenizer.mergeable_ranks()
    assert encode_chunk(piece, ranks) == reference_encode(piece, ranks)


def test_progress_reports_every_character_and_merge(corpus_texts):
    seen = []
    counts = count_chunks(corpus_texts[:6], workers=2, batch_chars=200_000, progress=seen.append)
    assert sum(seen) == sum(map(len, corpus_texts[:6])) and len(seen) > 2
    done = []
    merges = train_merges(counts, 600, progress=done.append)
    assert done == [256, 512] and len(merges) == 600
