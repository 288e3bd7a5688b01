"""The checks of lesson 01's pieces (notebooks/course/checks/bpe.py): each accepts its reference (gptlib's, or
the lesson's own code), says "not done" for an untouched stub, and rejects plausible wrong answers with the
hint that names the mistake."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from course import pieces
from tools.checking import rejects

PIECES = ["count_pairs", "merge", "naive_train", "train_merges", "encode_chunk"]


def stub(*args, **kwargs):
    raise NotImplementedError(pieces.STUB_MESSAGE)


def test_lesson_01_registers_its_five_pieces():
    taught = [name for name, piece in pieces._registry().items() if piece.notebook == "01_bpe"]
    assert taught == PIECES


@pytest.mark.parametrize("name", PIECES)
def test_each_check_accepts_the_reference_and_reports_the_stub(name):
    reference = pieces._registry()[name].reference_object()
    assert pieces.run_check(name, reference).status == "passed"
    assert pieces.run_check(name, stub).status == "not done"


def test_the_exported_references_are_gptlibs():
    import gptlib.tokenizer

    assert pieces._registry()["train_merges"].reference_object() is gptlib.tokenizer.train_merges
    assert pieces._registry()["encode_chunk"].reference_object() is gptlib.tokenizer.encode_chunk


# --- count_pairs -----------------------------------------------------------------------------------------


def count_pairs_without_overlaps(ids, counts=None):
    counts, i = {} if counts is None else counts, 0
    while i < len(ids) - 1:
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1  # skips as a merge would: [5, 5, 5] counts (5, 5) once
    return counts


def count_pairs_ignoring_counts(ids, counts=None):
    return dict(Counter(zip(ids, ids[1:])))


def count_pairs_missing_the_last(ids, counts=None):
    return dict(Counter(zip(ids[:-1], ids[1:-1])))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (count_pairs_without_overlaps, "count every position"),
        (count_pairs_ignoring_counts, "add to the dict `counts` when it is given"),
        (count_pairs_missing_the_last, "the last pair is missing"),
    ],
)
def test_count_pairs_check_names_the_mistake(wrong, hint):
    rejects("count_pairs", wrong, hint)


# --- merge -----------------------------------------------------------------------------------------------


def _merge(ids, pair, new_id):
    "The right merge, for the wrong answers' shared part."
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i : i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_first_only(ids, pair, new_id):
    starts = [i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair]
    return ids[: starts[0]] + [new_id] + ids[starts[0] + 2 :] if starts else list(ids)


def merge_overlapping(ids, pair, new_id):
    starts = {i for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == pair}
    covered = starts | {i + 1 for i in starts}
    return [new_id if i in starts else ids[i] for i in range(len(ids)) if i in starts or i not in covered]


def merge_right_to_left(ids, pair, new_id):
    return _merge(ids[::-1], pair[::-1], new_id)[::-1]


def merge_in_place(ids, pair, new_id):
    ids[:] = _merge(ids, pair, new_id)
    return ids


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (merge_first_only, "only the first (1, 2) was replaced"),
        (merge_overlapping, "the two pairs overlap"),
        (merge_right_to_left, "merge left to right, so it is [256, 5]"),
        (merge_in_place, "merge changed the list it was given"),
    ],
)
def test_merge_check_names_the_mistake(wrong, hint):
    rejects("merge", wrong, hint)


# --- naive_train ---------------------------------------------------------------------------------------


def naive_train_with(*, ties="smallest", first_id=256, stop=True):
    "A textbook loop with one mistake: the tie-break, the first new id, or no stop when no pair is left."

    def naive_train(ids, n_merges):
        merges = []
        for new_id in range(first_id, first_id + n_merges):
            counts = Counter(zip(ids, ids[1:]))
            if stop and not counts:
                break
            if ties == "smallest":
                pair = min(counts, key=lambda p: (-counts[p], p))
            else:
                pair = max(counts, key=counts.get)  # among equal counts, the first pair counted
            ids = _merge(ids, pair, new_id)
            merges.append(pair)
        return merges

    return naive_train


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (naive_train_with(ties="first seen"), "ties go to the smallest pair, (97, 98)"),
        (naive_train_with(first_id=0), "merge i makes id 256 + i"),
        (naive_train_with(stop=False), "stop when no pair is left"),
    ],
)
def test_naive_train_check_names_the_mistake(wrong, hint):
    rejects("naive_train", wrong, hint)


# --- train_merges ---------------------------------------------------------------------------------------


def chunk_trainer_with(*, ties="smallest", weighted=True, across_chunks=False, first_id=256, unit="bytes"):
    """A recounting trainer over chunks with one mistake (or none): the tie-break, each distinct chunk
    counted once, the chunks joined into one text, merge i making id i, or characters instead of bytes."""

    def train_merges(chunk_counts, n_merges):
        def ids_of(chunk):
            return list(chunk.encode()) if unit == "bytes" else [ord(c) for c in chunk]

        if across_chunks:
            words = {tuple(ids_of("".join(chunk * count for chunk, count in chunk_counts.items()))): 1}
        else:
            words = {tuple(ids_of(chunk)): count if weighted else 1 for chunk, count in chunk_counts.items()}
        merges = []
        for new_id in range(first_id, first_id + n_merges):
            counts = Counter()
            for word, weight in words.items():
                for pair in zip(word, word[1:]):
                    counts[pair] += weight
            if not counts:
                break
            if ties == "smallest":
                pair = min(counts, key=lambda p: (-counts[p], p))
            else:
                pair = max(counts, key=lambda p: (counts[p], p))  # among equal counts, the largest pair
            merged = Counter()
            for word, weight in words.items():
                merged[tuple(_merge(list(word), pair, new_id))] += weight
            words = merged
            merges.append(pair)
        return merges

    return train_merges


def incremental_counting_overlaps(chunk_counts, n_merges):
    """An incremental trainer whose count update treats every position holding the pair as merged, also
    the overlapping ones (in aaa, both (a, a)), so that its counts drift from the words."""
    words = [list(chunk.encode()) for chunk in chunk_counts]
    weights = list(chunk_counts.values())
    counts = Counter()
    for word, weight in zip(words, weights):
        for pair in zip(word, word[1:]):
            counts[pair] += weight
    merges = []
    for new_id in range(256, 256 + n_merges):
        if not +counts:
            break
        pair = min(+counts, key=lambda p: (-counts[p], p))
        for w, word in enumerate(words):
            for i in range(len(word) - 1):
                if (word[i], word[i + 1]) == pair:  # every position, overlapping ones too
                    if i:
                        counts[(word[i - 1], word[i])] -= weights[w]
                        counts[(word[i - 1], new_id)] += weights[w]
                    if i + 2 < len(word):
                        counts[(word[i + 1], word[i + 2])] -= weights[w]
                        counts[(new_id, word[i + 2])] += weights[w]
            words[w] = _merge(word, pair, new_id)
        del counts[pair]
        merges.append(pair)
    return merges


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (chunk_trainer_with(ties="largest"), "ties go to the smallest pair"),
        (chunk_trainer_with(weighted=False), "a chunk's pairs count as often as the chunk occurs"),
        (chunk_trainer_with(across_chunks=True), "pairs never span two chunks"),
        (chunk_trainer_with(first_id=0), "merge i makes id 256 + i"),
        (chunk_trainer_with(unit="characters"), "BPE works on each chunk's bytes"),
        (incremental_counting_overlaps, "pairs overlap in runs like aaa"),
    ],
)
def test_train_merges_check_names_the_mistake(wrong, hint):
    rejects("train_merges", wrong, hint)


def test_train_merges_check_refuses_a_trainer_that_recounts_everything():
    # right merges, but every pair recounted at every merge: many minutes on the course corpus
    rejects("train_merges", chunk_trainer_with(), "Recount nothing")


# --- encode_chunk ----------------------------------------------------------------------------------------


def encode_with(*, order="rank", lookup=True, rounds=math.inf, stop=True, ids=True):
    "tiktoken's rule with one mistake: the leftmost pair first, no whole-chunk lookup, one round, no stop."

    def encode_chunk(piece, ranks):
        if lookup and piece in ranks:
            return [ranks[piece]] if ids else [piece]
        parts, done = [piece[i : i + 1] for i in range(len(piece))], 0
        while (len(parts) > 1 or not stop) and done < rounds:
            joined = [ranks.get(a + b, math.inf) for a, b in zip(parts, parts[1:])]
            if order == "rank":
                best = min(joined)  # min() of an empty list raises when nothing stops the loop
                i = joined.index(best)
            else:
                i = next((j for j, rank in enumerate(joined) if rank < math.inf), None)
                best = math.inf if i is None else joined[i]
            if best == math.inf:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
            done += 1
        return [ranks[part] for part in parts] if ids else parts

    return encode_chunk


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            encode_with(order="leftmost"),
            "the pair that joins into the lowest id (the earliest merge) goes first",
        ),
        (encode_with(lookup=False), "a piece that is itself a token is that one id"),
        (encode_with(rounds=1), "keep joining while two adjacent parts make a token"),
        (encode_with(stop=False), "with fewer than two bytes there is nothing to join"),
        (encode_with(ids=False), "return a list of int ids"),
    ],
)
def test_encode_chunk_check_names_the_mistake(wrong, hint):
    rejects("encode_chunk", wrong, hint)
