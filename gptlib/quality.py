"""Reading a run: losses of counting alone, a tokenizer's compression, how samples read.

Hand-written plumbing, not generated from a notebook: 06_training shows these figures beside its curves and
samples; counting teaches nothing about GPTs. How much of a sample is words and speaker names of the
training text rather than artefact (runs of blank lines, letters stuttering) is measured for a play-like
corpus such as Shakespeare's, where a speaker's turn opens with a heading line: the name and a full stop
(`ROMEO.`).

- `reference_losses(train, val, n_vocab)`: the validation loss of guessing uniformly (ln V), of the
  training split's token frequencies (unigram) and of its counted next-token table (bigram);
- `compression(tokenizer, texts)`: the UTF-8 bytes and the tokens of some texts, and so the bytes per
  token a tokenizer achieves on them (`tokenizer train` prints it for the corpus it learned from);
- `TrainingText.from_split(tokens, tokenizer)`: the words and speaker names of a training split;
- `sample_quality(samples, training)`: over several samples, the share of words found in the training text,
  the share of speaker headings that name a speaker of the training text, the longest run of blank lines,
  and the words with a stutter (a letter three times in a row, a pair of letters three times in a row)
  that the training text never uses.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["reference_losses", "Compression", "compression", "TrainingText", "sample_quality"]

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
# a name and a full stop, alone on a line
_HEADING = re.compile(r"[ \t]*([A-Z][A-Za-z' ]{0,40}[A-Za-z])\.[ \t]*")
_STUTTER = re.compile(r"([A-Za-z])\1\1|([A-Za-z]{2})\2\2")


# add-k smoothing of the counts: 04 found k = 0.01 best of 1, 0.1 and 0.01 on the course's held-out plays, and
# its counted bigram is this one, so the course and `make run` print one bigram figure
SMOOTHING = 0.01


def reference_losses(train, val, n_vocab: int, smoothing: float = SMOOTHING) -> dict[str, float]:
    """Mean cross-entropy (nats per token) on the `val` tokens of three models that need no training but
    counting on `train` (1-D arrays of ids, e.g. `np.asarray(TokenSplit)`): `ln V` (every token equally
    likely), `unigram` (each token as often as in train) and `bigram` (the next token given this one). Counts
    get `smoothing` added, so a token or pair never seen in train is unlikely, not impossible."""
    train, val = np.asarray(train, dtype=np.int64), np.asarray(val, dtype=np.int64)
    unigram = np.bincount(train, minlength=n_vocab) + smoothing  # (V,)
    unigram_loss = -np.log(unigram[val] / unigram.sum()).mean()
    pairs, counts = np.unique(train[:-1] * n_vocab + train[1:], return_counts=True)  # seen pairs, sorted
    wanted = val[:-1] * n_vocab + val[1:]
    at = np.minimum(np.searchsorted(pairs, wanted), len(pairs) - 1)
    seen = np.where(pairs[at] == wanted, counts[at], 0) + smoothing  # count of (a, b) in train
    followers = np.bincount(train[:-1], minlength=n_vocab)[val[:-1]] + smoothing * n_vocab  # count of (a, *)
    return {
        "ln V": math.log(n_vocab),
        "unigram": float(unigram_loss),
        "bigram": float(-np.log(seen / followers).mean()),
    }


class Compression(NamedTuple):
    "How many tokens a tokenizer makes of some text: the fewer per byte, the more text fits in a context."

    bytes: int
    tokens: int

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / max(1, self.tokens)  # no tokens: no text either, and 0.0 rather than a crash


def compression(tokenizer, texts: list[str]) -> Compression:
    "The UTF-8 bytes of `texts` and the tokens `tokenizer.encode_batch` makes of them (specials as text)."
    n_bytes = sum(len(text.encode("utf-8")) for text in texts)
    return Compression(n_bytes, sum(map(len, tokenizer.encode_batch(texts))))


@dataclass(frozen=True)
class TrainingText:
    "The words (lowercased) and speaker names (uppercased) a model saw in training."

    words: frozenset[str]
    speakers: frozenset[str]

    @classmethod
    def from_texts(cls, texts) -> TrainingText:
        words, speakers = set(), set()
        for text in texts:
            words.update(w.lower() for w in _WORD.findall(text))
            speakers.update(_headings(text))
        return cls(frozenset(words), frozenset(speakers))

    @classmethod
    def from_split(cls, tokens, tokenizer) -> TrainingText:
        """From a split of token shards (`gptlib.data.TokenSplit`), document by document, special tokens left
        out (they are the last ids, from `bos_id` on)."""
        ends = tokens.doc_ends.tolist()
        documents = (tokens.read(start, end) for start, end in zip([0, *ends[:-1]], ends))
        return cls.from_texts(tokenizer.decode(doc[doc < tokenizer.bos_id]) for doc in documents)


def _headings(text: str) -> list[str]:
    """The speaker headings of a text, uppercased: a name and a full stop alone on a line, after a blank line
    (or at the start) and before a line of speech."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        if (match := _HEADING.fullmatch(line)) and (i == 0 or not lines[i - 1].strip()):
            if i + 1 < len(lines) and lines[i + 1].strip():
                found.append(match.group(1).upper())
    return found


def _longest_blank_run(text: str) -> int:
    longest = run = 0
    for line in text.split("\n")[1:-1]:  # the lines between two line breaks
        run = run + 1 if not line.strip() else 0
        longest = max(longest, run)
    return longest


def sample_quality(samples: list[str], training: TrainingText) -> dict:
    """Figures over `samples` (generated texts): `known_words` (share of words found in the training text),
    `known_speakers` (share of speaker headings naming a speaker of the training text; None without
    headings), `longest_blank_run` (most blank lines in a row), `stutters` (words with a letter or a pair
    of letters three times in a row that the training text never uses), and the counts behind them."""
    if isinstance(samples, str):
        raise TypeError("sample_quality takes a list of samples, not one str")
    words = [w.lower() for text in samples for w in _WORD.findall(text)]
    headings = [name for text in samples for name in _headings(text)]
    stutters = sorted({w for w in words if _STUTTER.search(w) and w not in training.words})
    return {
        "known_words": sum(w in training.words for w in words) / len(words) if words else 0.0,
        "known_speakers": sum(h in training.speakers for h in headings) / len(headings) if headings else None,
        "longest_blank_run": max((_longest_blank_run(text) for text in samples), default=0),
        "stutters": stutters,
        "n_words": len(words),
        "n_speakers": len(headings),
    }
