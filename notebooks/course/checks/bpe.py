"""Checks of the pieces the learner writes in lesson 01 (byte-level BPE), and what each piece is.

Hand-written tooling of the course, not part of the installed package. The pieces, in the order the lesson
builds them; later cells, and workbook 06, call them with exactly these signatures:

- `count_pairs(ids, counts=None) -> dict[tuple[int, int], int]`: how often each adjacent pair of the list of
  ids `ids` occurs, at every position (`[5, 5, 5]` holds `(5, 5)` twice), added into `counts` when given
  (the same dict is returned). A teaching piece: the lesson's own code is the reference.
- `merge(ids, pair, new_id) -> list[int]`: a new list, `ids` with every occurrence of `pair` replaced by
  `new_id`, left to right without overlaps (`[5, 5, 5]` becomes `[new_id, 5]`); `ids` is left as it was.
  A teaching piece.
- `naive_train(ids, n_merges) -> list[tuple[int, int]]`: the textbook loop on one list of byte ids (count,
  merge the most frequent pair into id 256 + i, ties to the smallest pair, repeat; stop when no pair is
  left). A teaching piece.
- `train_merges(chunk_counts, n_merges) -> list[tuple[int, int]]`: the merges learned from distinct chunks
  (str) and their counts, exactly gptlib's (and rustbpe's), incremental enough for the course corpus.
  Reference: `gptlib.tokenizer.train_merges`. The learner's tokenizer is
  `Tokenizer(train_merges(count_chunks(texts), vocab_size - 259))`.
- `encode_chunk(piece, ranks) -> list[int]`: the ids of a chunk's bytes under tiktoken's rule, `ranks` being
  token bytes -> id (`Vocabulary.mergeable_ranks()`). Reference: `gptlib.tokenizer.encode_chunk`. A text is
  encoded with it chunk by chunk: `[i for c in regex.findall(pattern, text) for i in encode_chunk(c.encode(),
  ranks)]`.

Each check runs the piece on small fixed inputs and compares it with the reference (gptlib, rustbpe where it
is installed, or golden values worked out by hand); it raises AssertionError with a hint that names the
mistake, or returns what passed. tests/test_course_bpe.py shows each one rejecting plausible mistakes.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from course.pieces import exercise

# A few lines of Hamlet: real text for small tokenizers whose merges and ids the pieces must match.
HAMLET = """To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them. To die, to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to: 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep, perchance to dream. Ay, there's the rub."""
GOLDEN_TEXT = "aaabdaaabac"  # minbpe's and Wikipedia's example, one chunk: merges worked out by hand below
# aa 4 -> 256; then Za and ab tie at 2, the smaller pair (a, b) -> 257; then ZY 2 -> 258; then every pair
# occurs once and the smallest wins each time: (a, c) -> 259, (d, 258) -> 260, (258, 260) -> 261.
GOLDEN_MERGES = [(97, 97), (97, 98), (256, 257), (97, 99), (100, 258), (258, 260)]


def _fail(hint: str):
    raise AssertionError(hint)


def _expect(condition: bool, hint: str) -> None:
    "An assert that survives `python -O`: a check must fail even when asserts are stripped."
    if not condition:
        _fail(hint)


def _pairs(merges) -> list[tuple[int, int]]:
    "A piece's merges as a list of int pairs (tuples or lists of two ints), or a hint naming the shape."
    try:
        return [(int(a), int(b)) for a, b in merges]
    except (TypeError, ValueError):
        _fail(f"the merges must be a list of pairs of ids (a, b), got {merges!r:.120}")


def _new_ids_below_256(merges, inputs) -> None:
    "Fail when a merge uses an id below 256 that is no byte of the input: merge i must make id 256 + i."
    seen = set(inputs)
    if any(x < 256 and x not in seen for pair in merges for x in pair):
        _fail(
            f"your merges {merges[:6]}... use ids the input never held: merge i makes id 256 + i (ids 0 to "
            "255 are the bytes), so the first merge makes 256"
        )


def _first_difference(got, expected) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


# --- counting pairs --------------------------------------------------------------------------------------


@exercise("01_bpe", reference="lesson", minutes=5)
def count_pairs(fn) -> str:
    "`count_pairs(ids, counts=None)`: every adjacent pair counted, added into `counts` when it is given."
    for ids, expected in (
        ([1, 2, 3, 1, 2], {(1, 2): 2, (2, 3): 1, (3, 1): 1}),
        ([5, 5, 5], {(5, 5): 2}),
        ([7, 1, 7, 1, 7], {(7, 1): 2, (1, 7): 2}),
    ):
        given = list(ids)
        got = fn(given, None)
        _expect(given == ids, f"count_pairs changed the list it was given ({ids} became {given})")
        _expect(got is not None, f"count_pairs({ids}) returned None: return the dict of counts")
        got = dict(got)
        if ids == [5, 5, 5] and got == {(5, 5): 1}:
            _fail(
                "count_pairs([5, 5, 5]) counted (5, 5) once: count every position, so the pair at 0-1 and "
                "the pair at 1-2 both count (zip(ids, ids[1:]) gives every adjacent pair)"
            )
        _expect(
            got != dict(Counter(zip(ids[:-1], ids[1:-1]))),
            f"count_pairs({ids}) gave {got}: the last pair is missing; it is (ids[-2], ids[-1])",
        )
        _expect(got == expected, f"count_pairs({ids}) gave {got}, expected {expected}")
    for ids in ([], [42]):
        got = fn(list(ids), None)
        _expect(got is not None and dict(got) == {}, f"count_pairs({ids}) gave {got!r}: no pairs, so {{}}")
    counts = {(1, 2): 3, (8, 9): 1}
    got = fn([1, 2, 1], counts)
    _expect(
        got is not None and dict(got) == {(1, 2): 4, (2, 1): 1, (8, 9): 1},
        f"count_pairs([1, 2, 1], counts={{(1, 2): 3, (8, 9): 1}}) gave {got}: add to the dict `counts` when "
        "it is given (that is how the pairs of many lists are counted into one table), and return it",
    )
    return "every position counted, added into a given table"


# --- one merge ---------------------------------------------------------------------------------------------


@exercise("01_bpe", reference="lesson", minutes=10)
def merge(fn) -> str:
    "`merge(ids, pair, new_id)`: a new list, each occurrence of `pair` replaced, left to right, no overlaps."

    def run(ids, pair, new_id):
        given = list(ids)
        got = fn(given, pair, new_id)
        _expect(
            given == list(ids),
            f"merge changed the list it was given ({list(ids)} became {given}): build a new list, as the "
            "caller may still need the old one",
        )
        _expect(isinstance(got, list), f"merge returned a {type(got).__name__}, not a list")
        return got

    got = run([1, 2, 3, 1, 2], (1, 2), 256)
    _expect(
        got != [256, 3, 1, 2],
        "only the first (1, 2) was replaced: replace every occurrence of the pair",
    )
    _expect(got == [256, 3, 256], f"merge([1, 2, 3, 1, 2], (1, 2), 256) gave {got}, expected [256, 3, 256]")
    got = run([5, 5, 5], (5, 5), 256)
    _expect(
        got != [256, 256],
        "merge([5, 5, 5], (5, 5), 256) gave [256, 256]: the two pairs overlap, and a byte can go into one "
        "token only; after a merge, move on past both ids",
    )
    _expect(
        got != [5, 256],
        "merge([5, 5, 5], (5, 5), 256) gave [5, 256]: merge left to right, so it is [256, 5]",
    )
    _expect(got == [256, 5], f"merge([5, 5, 5], (5, 5), 256) gave {got}, expected [256, 5]")
    got = run([2, 1, 2, 1], (1, 2), 300)
    _expect(got == [2, 300, 1], f"merge([2, 1, 2, 1], (1, 2), 300) gave {got}, expected [2, 300, 1]")
    for ids in ([], [7], [1, 3, 2]):
        got = run(ids, (1, 2), 256)
        _expect(
            got == ids, f"merge({ids}, (1, 2), 256) gave {got}: without the pair, the ids stay as they are"
        )
    got = run([5, 5, 5, 5], (5, 5), 256)
    _expect(got == [256, 256], f"merge([5, 5, 5, 5], (5, 5), 256) gave {got}, expected [256, 256]")
    return "every occurrence, left to right, without overlaps, a new list"


# --- the textbook loop -------------------------------------------------------------------------------------


@exercise("01_bpe", reference="lesson", minutes=10)
def naive_train(fn) -> str:
    "`naive_train(ids, n_merges)`: count, merge the most frequent pair (ties: the smallest), repeat."
    from gptlib.tokenizer import train_merges

    golden = list(GOLDEN_TEXT.encode())
    got = _pairs(fn(list(golden), 6))
    _new_ids_below_256(got, golden)
    if got[:2] == [(97, 97), (256, 97)]:
        _fail(
            f"naive_train({GOLDEN_TEXT!r}, 6) picked (256, 97) as merge 1: after merge 0 the pairs (256, 97) "
            "and (97, 98) both occur twice, and ties go to the smallest pair, (97, 98), as in rustbpe "
            "(max(counts, key=counts.get) and Counter.most_common keep the first pair seen instead)"
        )
    _expect(
        got == GOLDEN_MERGES,
        f"naive_train({GOLDEN_TEXT!r}, 6) gave {got}; worked out by hand it is {GOLDEN_MERGES}",
    )
    try:
        got = _pairs(fn([1, 2, 1, 2], 5))
    except (ValueError, IndexError, KeyError) as e:
        _fail(
            f"naive_train([1, 2, 1, 2], 5) raised {e!r}: after two merges one id is left and no pair; stop "
            "when no pair is left (count_pairs then gives an empty dict)"
        )
    _expect(
        got == [(1, 2), (256, 256)],
        f"naive_train([1, 2, 1, 2], 5) gave {got}, expected [(1, 2), (256, 256)]: after two merges one id "
        "is left; stop when no pair is left",
    )
    _expect(_pairs(fn([7], 3)) == [], "naive_train([7], 3) must give []: one id holds no pair")
    text = HAMLET[:400]
    expected = train_merges({text: 1}, 40)  # the whole text as one chunk: no split, exactly this loop
    got = _pairs(fn(list(text.encode()), 40))
    _expect(
        got == expected,
        f"on 400 bytes of Hamlet your merges differ from gptlib's from merge "
        f"{_first_difference(got, expected)}"
        f" on: {got[:8]}... vs {expected[:8]}...",
    )
    return "the worked example, stopping early, and 40 merges of Hamlet equal to gptlib's"


# --- the merge loop over chunks -----------------------------------------------------------------------------


def _small_cases(n: int = 120, seed: int = 0) -> list[dict[str, int]]:
    """Small chunk tables over a tiny alphabet, seeded: runs (aaaa), repeats (abab), two-byte characters (é),
    and pairs next to their own merge, the cases an incremental trainer gets wrong."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        chunks = {}
        for _ in range(rng.randint(1, 8)):
            chunk = "".join(rng.choice("aabé ") for _ in range(rng.randint(1, 10)))
            chunks[chunk] = chunks.get(chunk, 0) + rng.randint(1, 9)
        cases.append(chunks)
    return cases


def _many_chunks(n: int = 3000, seed: int = 0) -> dict[str, int]:
    "A larger seeded table of distinct words with counts, for timing: a few thousand chunks, as in a play."
    rng, counts = random.Random(seed), {}
    while len(counts) < n:
        word = " " + "".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9)))
        counts[word] = counts.get(word, 0) + rng.randint(1, 50)
    return counts


def _rustbpe_merges(texts: list[str], n_merges: int) -> list[bytes] | None:
    "rustbpe's tokens (bytes, in rank order) trained on `texts` with GPT-4's pattern, or None without it."
    try:
        import rustbpe
    except ImportError:
        return None
    from gptlib.tokenizer import GPT4_PATTERN

    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(texts, 256 + n_merges, pattern=GPT4_PATTERN)
    return [token for token, _ in sorted(trainer.get_mergeable_ranks(), key=lambda t: t[1])]


@exercise("01_bpe", reference="gptlib.tokenizer:train_merges", minutes=60)
def train_merges(fn) -> str:
    "`train_merges(chunk_counts, n_merges)`: gptlib's merges exactly, and fast enough for the course corpus."
    from gptlib.tokenizer import Vocabulary, count_chunks
    from gptlib.tokenizer import train_merges as reference

    def run(chunk_counts, n_merges):
        given = dict(chunk_counts)
        got = _pairs(fn(given, n_merges))
        _expect(given == chunk_counts, "train_merges changed the table of chunk counts it was given")
        held = b"".join(chunk.encode() for chunk in chunk_counts)
        characters = {ord(c) for chunk in chunk_counts for c in chunk} - set(held)
        _expect(
            not any(x in characters for pair in got for x in pair),
            f"on {chunk_counts} your merges {got} use code points of characters, not bytes: BPE works on "
            "each chunk's bytes, chunk.encode('utf-8'), so é is the two ids 195 and 169",
        )
        _new_ids_below_256(got, held)
        return got

    _expect(run({}, 10) == [], "train_merges({}, 10) must give []: no chunks, no pairs")
    _expect(
        run({"a": 5, "b": 2}, 10) == [],
        "train_merges({'a': 5, 'b': 2}, 10) must give []: each chunk is one byte, so no chunk holds a pair "
        "(pairs never span two chunks)",
    )
    got = run({"ab": 1, "cd": 3}, 1)
    _expect(
        got != [(97, 98)],
        "on {'ab': 1, 'cd': 3} you merged (a, b) first: a chunk's pairs count as often as the chunk occurs "
        "(its count in chunk_counts), so (c, d) occurs 3 times",
    )
    got = run({"ab": 2, "cd": 1}, 3)
    _expect(
        (98, 99) not in got,
        "on {'ab': 2, 'cd': 1} you merged (b, c): pairs never span two chunks; count and merge inside each "
        "chunk, which is the point of pre-splitting",
    )
    _expect(
        got == [(97, 98), (99, 100)],
        f"on {{'ab': 2, 'cd': 1}} with 3 merges asked you gave {got}: two merges, then no pair is left",
    )
    for chunks, expected in (  # no ties here: every step has one best pair
        ({"aaa": 1}, [(97, 97), (256, 97)]),
        ({"aaaa": 1}, [(97, 97), (256, 256)]),
        ({"abab": 2, "ba": 1}, [(97, 98), (256, 256), (98, 97)]),
    ):
        got = run(chunks, 5)
        _expect(
            got == expected,
            f"on {chunks} you gave {got}, expected {expected}: pairs overlap in runs like aaa and repeats "
            "like abab; a merge replaces them left to right without overlaps, and the counts must follow "
            "(the pairs of a word before it is rewritten lose its count, the pairs after gain it)",
        )
    got = run({GOLDEN_TEXT: 1}, 6)
    _expect(
        got[:2] != [(97, 97), (256, 97)],
        f"on {{{GOLDEN_TEXT!r}: 1}} merge 1 is (256, 97): it ties with (97, 98) at 2, and ties go to the "
        "smallest pair, (97, 98), as in rustbpe",
    )
    _expect(got == GOLDEN_MERGES, f"on {{{GOLDEN_TEXT!r}: 1}} you gave {got}; by hand it is {GOLDEN_MERGES}")
    got = run({"é": 3, "éa": 1}, 2)
    _expect(
        got[:1] == [(195, 169)],
        f"on {{'é': 3, 'éa': 1}} the first merge must be (195, 169), the two UTF-8 bytes of é, not "
        f"{got[:1]}: BPE works on each chunk's bytes, chunk.encode('utf-8'), not on its characters",
    )
    for chunks in _small_cases():
        got, expected = run(chunks, 30), reference(chunks, 30)
        if got != expected:
            i = _first_difference(got, expected)
            _fail(
                f"on chunk_counts={chunks} your merge {i} is {got[i] if i < len(got) else None}, gptlib's "
                f"{expected[i] if i < len(expected) else None} (you made {len(got)} merges, gptlib "
                f"{len(expected)}): check how counts change around a merge, especially in runs (aaa) and "
                "where a pair touches its own merge"
            )
    counts = count_chunks([HAMLET], workers=1)
    got, expected = run(counts, 120), reference(counts, 120)
    _expect(
        got == expected,
        f"on the chunks of a passage of Hamlet your merges differ from gptlib's from merge "
        f"{_first_difference(got, expected)}",
    )
    theirs = _rustbpe_merges([HAMLET], 120)
    if theirs is not None:
        vocabulary = Vocabulary(got)
        ours = [vocabulary.token_bytes(i) for i in range(256 + len(got))]
        _expect(ours == theirs, "your merges of Hamlet differ from rustbpe's")
    many = _many_chunks()
    reference_seconds = float("inf")
    for _ in range(3):  # the best of three: one run on a busy machine can be slow
        started = time.perf_counter()
        expected = reference(many, 400)
        reference_seconds = min(reference_seconds, time.perf_counter() - started)
    started = time.perf_counter()
    got = run(many, 400)
    seconds = time.perf_counter() - started
    _expect(
        got == expected,
        f"on 3,000 chunks your merges differ from gptlib's from merge {_first_difference(got, expected)}",
    )
    _expect(
        # a recount takes ~150 times gptlib's time, 1.9 s on the fastest CPU met (a Zen 5): the floor under
        # the ratio, for a machine so busy that gptlib's own time is noise, must stay below that
        seconds < 1.0 or seconds < 60 * reference_seconds,
        f"400 merges of 3,000 distinct chunks took {seconds:.1f} s (gptlib: {reference_seconds:.2f} s): at "
        "that pace the course's 3,837 merges of 5 MB take many minutes. Recount nothing: keep the pair "
        "counts, and after a merge change only the counts of the pairs in the words that held it",
    )
    against = "rustbpe" if theirs is not None else "gptlib"
    tables = f"worked examples, {len(_small_cases())} random tables, Hamlet (as {against})"
    return f"{tables}, 3,000 chunks in {seconds:.2f} s"


# --- encoding a chunk ------------------------------------------------------------------------------------


def _ranks(merges) -> dict[bytes, int]:
    "Token bytes -> id for the bytes and the tokens that `merges` make (merge i makes id 256 + i)."
    from gptlib.tokenizer import Vocabulary

    return Vocabulary(merges).mergeable_ranks()


@exercise("01_bpe", reference="gptlib.tokenizer:encode_chunk", minutes=20)
def encode_chunk(fn) -> str:
    "`encode_chunk(piece, ranks)`: tiktoken's rule, the lowest-ranked joined pair first, leftmost of equals."
    from gptlib.tokenizer import GPT4_PATTERN, Tokenizer
    from gptlib.tokenizer import encode_chunk as reference

    def run(piece: bytes, merges) -> list[int]:
        ranks = _ranks(merges)
        try:
            got = fn(piece, ranks)
        except (IndexError, ValueError) as e:
            if len(piece) < 2:
                _fail(
                    f"encode_chunk({piece!r}, ...) raised {e!r}: with fewer than two bytes there is nothing "
                    "to join; return the ids of the bytes"
                )
            raise
        _expect(
            isinstance(got, list) and all(isinstance(i, int) for i in got),
            f"encode_chunk({piece!r}, ...) returned {got!r:.80}: return a list of int ids (ranks[part] for "
            "each part), not bytes",
        )
        return got

    for piece in (b"", b"a"):
        got = run(piece, [(97, 98)])
        _expect(got == list(piece), f"encode_chunk({piece!r}, ...) gave {got}, expected {list(piece)}")
    got = run(b"ab", [(97, 98)])
    _expect(got == [256], f"with merges [(97, 98)], b'ab' gave {got}: the token ab is id 256, so [256]")
    got = run(b"abc", [(98, 99), (97, 98)])
    _expect(
        got == [97, 256],
        f"with bc (id 256) and ab (id 257), b'abc' gave {got}, expected [97, 256]: the pair that joins into "
        "the lowest id (the earliest merge) goes first, wherever it is; here b+c, so a is left alone",
    )
    got = run(b"aaa", [(97, 97)])
    _expect(
        got == [256, 97],
        f"with aa (id 256), b'aaa' gave {got}, expected [256, 97]: among equal ids the leftmost pair goes "
        "first",
    )
    got = run(b"aaaa", [(97, 97), (256, 97)])
    _expect(
        got == [256, 256],
        f"with aa (256) and aaa (257), b'aaaa' gave {got}, expected [256, 256]: keep joining while two "
        "adjacent parts make a token (a, a joins first, then the other a, a: 256 is below aa + a, 257)",
    )
    got = run(b"abcx", [(98, 99), (97, 98), (257, 99)])  # bc 256, ab 257, abc 258 made from ab + c
    _expect(
        got == [258, 120],
        f"with bc (256), ab (257) and abc (258, made as ab + c), b'abcx' gave {got}, expected [258, 120]: "
        "after b+c, the parts a and bc join into the bytes abc, a token, though it was made from another "
        "pair: join the bytes of two parts and look the joined bytes up in `ranks`",
    )
    got = run(b"abcd", [(98, 99), (97, 98), (99, 100), (257, 258)])  # abcd (259) is ab + cd
    _expect(
        got == [259],
        f"with bc, ab, cd and abcd (259, made as ab + cd), b'abcd' gave {got}, expected [259]: a piece "
        "that is itself a token is that one id (tiktoken looks the whole piece up first); joining the parts "
        "would stop at a, bc, d",
    )
    tokenizer = Tokenizer.train([HAMLET], 256 + 80 + 3, workers=1)
    ranks = tokenizer.mergeable_ranks()
    import regex

    pieces = [chunk.encode() for chunk in regex.findall(GPT4_PATTERN, HAMLET)]
    pieces += [b"x" * 150, "naïve café".encode(), b"thethethe the to be or not"]
    for piece in pieces:
        got, expected = fn(piece, ranks), reference(piece, ranks)
        _expect(
            list(got) == expected,
            f"{piece!r:.60} gave {list(got)}, but tiktoken's rule gives {expected} with a vocabulary "
            "trained on Hamlet (80 merges)",
        )
    return f"8 hand-made cases and {len(pieces)} chunks encoded as tiktoken's rule does"
