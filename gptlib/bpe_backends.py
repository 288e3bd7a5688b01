"""The tokenizer's fast back-ends: tiktoken, a cached encoder, the parallel split.

Hand-written plumbing, not generated from a notebook. Notebook 01 teaches the algorithm and exports it as
`gptlib.tokenizer`: the split pattern, the merge loop, tiktoken's encoding rule, the tokenizer and its
files. This module holds what makes that algorithm fast and portable, which the notebook uses in a few lines
(its appendix says how each piece works):

- `splitter(pattern, ascii_twin)`: the regex split, with a fast path for pure-ASCII text in the standard
  library's `re` (`GPT4_ASCII_TWIN` is the GPT-4 pattern written for ASCII);
- `parallel_chunk_counts(...)`: the distinct chunks of many documents counted in worker processes
  (`gptlib.workers`), the counts added in this one;
- `PythonEncoder`: the pure-Python encoder, a cache of chunk -> ids in front of the encoding rule, and
  `encode_long_chunk`, the same rule in O(n log n) for chunks too long for the rule's O(n^2) loop;
- `encode_texts(...)`: many texts encoded here or, when there are many, in worker processes;
- `tiktoken_installed`, `tiktoken_encoding(...)`: the same vocabulary as a `tiktoken.Encoding` (Rust);
- `tiktoken_ranks_text`, `huggingface_json`: the vocabulary in tiktoken's and Hugging Face's file formats.

Why this module imports nothing of `gptlib.tokenizer`: the tokenizer imports it, so it stands one floor
below (on `gptlib.workers` only), and the tokenizer passes in the pieces it needs: the pattern and its ASCII
twin, the encoding rule of a short chunk, the ranks (token bytes -> id), the merges. So the algorithm reads
without its plumbing, and the plumbing is tested against the algorithm (tests/test_tokenizer.py).
"""

from __future__ import annotations

import heapq
import operator
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib.util import find_spec
from itertools import chain, repeat

import regex

from .workers import map_with, share_batches, text_batches

__all__ = [
    "GPT4_ASCII_TWIN",
    "splitter",
    "parallel_chunk_counts",
    "LONG_CHUNK",
    "encode_long_chunk",
    "PythonEncoder",
    "PARALLEL_MIN_CHARS",
    "encode_texts",
    "tiktoken_installed",
    "tiktoken_encoding",
    "tiktoken_ranks_text",
    "byte_to_unicode",
    "huggingface_json",
]

# --- splitting ----------------------------------------------------------------------------------------------

_WS = r"\t\n\x0b\x0c\r "  # what the regex package's \s matches in ASCII text (re's \s also takes \x1c-\x1f)
GPT4_ASCII_TWIN = (
    rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]+|[0-9]{{1,3}}| ?[^{_WS}A-Za-z0-9]++[\r\n]*"""
    rf"""|[{_WS}]*[\r\n]|[{_WS}]+(?![^{_WS}])|[{_WS}]+"""
)  # gptlib.tokenizer.GPT4_PATTERN for ASCII text: \p{L} is [A-Za-z], \p{N} is [0-9], \s is [\t\n\v\f\r ]


def splitter(pattern: str, ascii_twin: str | None = None) -> Callable[[str], list[str]]:
    """The function that splits a text into chunks: `regex.compile(pattern).findall`, or, for a pure-ASCII
    text when `ascii_twin` is given, `re.compile(ascii_twin).findall`, which splits ASCII text alike and runs
    about twice as fast (`re` has the possessive quantifiers `?+` and `++` since Python 3.11; the regex
    package's Unicode classes \\p{L} and \\p{N} are what it lacks). A bad pattern raises `regex.error`."""
    findall = regex.compile(pattern).findall
    if ascii_twin is None or sys.version_info < (3, 11):
        return findall
    ascii_findall = re.compile(ascii_twin).findall

    def split(text: str) -> list[str]:
        return ascii_findall(text) if text.isascii() else findall(text)

    return split


def _count_batch(texts: list[str], pattern: str, ascii_twin: str | None) -> tuple[list[str], list[int]]:
    """The distinct chunks of some documents and their counts, as two lists: what a helper process sends
    back (two lists pickle faster than a Counter)."""
    counts = Counter(chain.from_iterable(map(splitter(pattern, ascii_twin), texts)))
    return list(counts), list(counts.values())


def parallel_chunk_counts(
    texts: Iterable[str],
    pattern: str,
    ascii_twin: str | None = None,
    *,
    workers: int,
    batch_chars: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Counter:
    """`Counter(chunk for text in texts for chunk in splitter(pattern, ascii_twin)(text))`, with batches of
    documents (about `batch_chars` characters each) split in `workers` processes: `workers - 1` helpers and
    this process (`gptlib.workers.share_batches`). `progress(n_chars)` is called after each batch."""
    split, total = splitter(pattern, ascii_twin), Counter()

    def add(batch: list[str], counted) -> None:  # counted: a helper's two lists, or None if counted here
        if counted is not None:  # total[chunk] += count, in C (Counter.update loops in Python on a mapping)
            chunks, counts = counted
            dict.update(total, zip(chunks, map(operator.add, map(total.get, chunks, repeat(0)), counts)))
        if progress is not None:
            progress(sum(map(len, batch)))

    def count_here(text: str) -> None:
        total.update(split(text))

    share_batches(
        text_batches(texts, batch_chars, workers),
        _count_batch,
        (pattern, ascii_twin),
        here=count_here,
        done=add,
        workers=workers,
    )
    return total


# --- the pure-Python encoder ----------------------------------------------------------------------------

LONG_CHUNK = 64  # bytes: longer chunks are encoded by `encode_long_chunk`
CACHE_CHUNKS = 1 << 20  # distinct chunks whose ids the encoder remembers (least recently used first out)


def encode_long_chunk(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's encoding rule (`gptlib.tokenizer.encode_chunk`) in O(n log n) instead of O(n^2), for long
    chunks (web text has chunks of thousands of bytes: a base64 blob, a run of dashes). The parts are kept
    as a linked list over their start positions and the candidate merges in a heap of (rank, position): the
    lowest rank first and, among equal ranks, the leftmost, as the rule says. A merge changes only the two
    candidates beside it; entries that went stale are skipped when they come up."""
    if piece in ranks:
        return [ranks[piece]]
    n = len(piece)
    parts = [piece[i : i + 1] for i in range(n)]  # parts[i]: the part starting at byte i, None inside one
    after, before = list(range(1, n + 1)), list(range(-1, n - 1))  # the next and previous part's start
    heap = [(rank, i) for i in range(n - 1) if (rank := ranks.get(parts[i] + parts[i + 1])) is not None]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = after[i]
        if parts[i] is None or j >= n or ranks.get(parts[i] + parts[j]) != rank:
            continue  # stale: one of the two parts has changed since this entry was pushed
        parts[i], parts[j], after[i] = parts[i] + parts[j], None, after[j]
        if after[i] < n:
            before[after[i]] = i
            if (right := ranks.get(parts[i] + parts[after[i]])) is not None:
                heapq.heappush(heap, (right, i))
        if before[i] >= 0 and (left := ranks.get(parts[before[i]] + parts[i])) is not None:
            heapq.heappush(heap, (left, before[i]))
    return [ranks[part] for part in parts if part is not None]


class PythonEncoder:
    """The pure-Python encoder of a vocabulary: split the text, then look every chunk up in a cache of
    chunk -> ids (the last `CACHE_CHUNKS` distinct chunks); a chunk not seen yet goes through
    `encode_chunk(piece, ranks)` (the tokenizer's rule) or, above `LONG_CHUNK` bytes, `encode_long_chunk`.
    Text rarely has new chunks once the cache is warm, so the cache is most of the speed."""

    def __init__(self, split: Callable[[str], list[str]], ranks: dict[bytes, int], encode_chunk: Callable):
        self.split, self.ranks, self.encode_short = split, ranks, encode_chunk
        self.encode_chunk = lru_cache(maxsize=CACHE_CHUNKS)(self._encode_chunk)

    def _encode_chunk(self, chunk: str) -> tuple[int, ...]:
        piece = chunk.encode("utf-8")
        encode = self.encode_short if len(piece) <= LONG_CHUNK else encode_long_chunk
        return tuple(encode(piece, self.ranks))

    def encode(self, text: str) -> list[int]:
        "The ids of `text`, chunk by chunk."
        try:
            return list(chain.from_iterable(map(self.encode_chunk, self.split(text))))
        except UnicodeEncodeError:  # lone surrogates have no UTF-8: U+FFFD instead, as in tiktoken
            return self.encode(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))


PARALLEL_MIN_CHARS = 1 << 22  # below this many characters, `encode_texts` starts no processes


def encode_texts(tokenizer, texts: list[str], allowed, workers: int) -> list[list[int]]:
    """`[tokenizer.encode(text, allowed) for text in texts]`, in `workers` processes when the texts hold at
    least `PARALLEL_MIN_CHARS` characters and the tokenizer encodes in Python (each process gets its own copy
    of the tokenizer, pickled, and so its own cache); below that, starting processes costs more than it
    saves. tiktoken's encoder, which runs in Rust, encodes here."""
    if tokenizer.backend == "tiktoken" or workers == 1 or sum(map(len, texts)) < PARALLEL_MIN_CHARS:
        return [tokenizer.encode(text, allowed) for text in texts]
    return map_with(tokenizer, type(tokenizer).encode, texts, allowed, workers=workers)


# --- tiktoken -------------------------------------------------------------------------------------------


def tiktoken_installed() -> bool:
    return find_spec("tiktoken") is not None


def tiktoken_encoding(name: str, pattern: str, ranks: dict[bytes, int], special_tokens: dict[str, int]):
    """A `tiktoken.Encoding` of the vocabulary: the same rule in Rust, the same ids. Its regex engine
    (fancy-regex) may reject a pattern the regex package takes: that raises ValueError."""
    import tiktoken

    return tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special_tokens)


# --- other tools' files ---------------------------------------------------------------------------------


def tiktoken_ranks_text(ranks: dict[bytes, int]) -> str:
    "tiktoken's ranks file (`base64(token) rank` a line), as `tiktoken.load.load_tiktoken_bpe` reads it."
    import base64

    return "".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in ranks.items())


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for bytes, which byte-level BPE in Hugging Face `tokenizers` uses:
    printable Latin-1 bytes stand for themselves, the others map to code points from 256 up."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def huggingface_json(
    pattern: str, tokens: list[bytes], merges: list[tuple[int, int]], special_tokens: dict[str, int]
) -> dict:
    """A Hugging Face `tokenizer.json` with the same ids as gptlib's: split with `pattern`, byte-level BPE
    with `merges` over `tokens` (the bytes of every id but the specials), and `ignore_merges`, so that a
    chunk that is a whole token stays one token, as in tiktoken's rule."""
    table = byte_to_unicode()
    shown = ["".join(table[byte] for byte in token) for token in tokens]
    added = [
        {
            "id": token_id,
            "content": name,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for name, token_id in special_tokens.items()
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {token: i for i, token in enumerate(shown)},
            "merges": [f"{shown[a]} {shown[b]}" for a, b in merges],
        },
    }
