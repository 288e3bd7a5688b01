"""Checks of the pieces written in lesson 02 (token shards), and how later notebooks run them.

Hand-written tooling of the course, not part of the installed package. Each piece has the signature of the
`gptlib.data` function of the same name, which is its reference:

- `frame(ids, bos_id, eos_id, dtype) -> np.ndarray`: `[bos_id, *ids, eos_id]` as a 1-D array of `dtype`;
- `shuffle_documents(n_documents, seed) -> np.ndarray`: the int64 permutation of `0 .. n_documents-1` that
  `np.random.default_rng(seed)` draws (the order make run's shards are written in);
- `split_documents(order, val_fraction) -> {"train": array, "val": array}`: val is the first
  `min(N - 1, max(1, round(N * val_fraction)))` entries of `order`, train the rest;
- `plan_shards(lengths, shard_tokens) -> [(first, end), ...]`: half-open ranges of document indices, each
  closed by the document that brings its shard to at least `shard_tokens` tokens, the rest a last shard;
- `write_shard(folder, name, documents, dtype, tok_name, root=None) -> dict`: the three files of a DataTrove
  shard in `folder` (`name.ds` tokens, `name.ds.index` cumulative uint64 ends, `name.ds.metadata`), and the
  record `gptlib.shards.shard_record` makes of them;
- `TokenSplit`: the class of `gptlib.data` whose method `read(start, stop)` the learner writes (the rest stays
  the lesson's): the split's tokens `[start, stop)`, a view of one shard's map when the range lies in it, the
  parts of several shards joined otherwise.

Where they run later: in the lesson (and the learner's workbook) `prepare` is defined by an export cell, so it
calls whatever `frame`, `shuffle_documents`, `split_documents`, `plan_shards` and `write_shard` the notebook
holds, the learner's once their checks passed; it must then make exactly the shards `make run` trains on. In
another notebook, `prepare_with(names)` gives that same `prepare` running on the names of a namespace, e.g.
`course.collect().namespaces["02_data"]` (gptlib.data's names, with the learner's passing pieces in place).
"""

from __future__ import annotations

import tempfile
import types
from pathlib import Path

import numpy as np

from course.pieces import exercise


def _expect(condition: bool, hint: str) -> None:
    "An assert that survives `python -O`: a check must fail even where asserts are stripped."
    if not condition:
        raise AssertionError(hint)


def _rebound(function: types.FunctionType, names: dict) -> types.FunctionType:
    "`function` with its global names looked up in `names` instead of its module."
    copy = types.FunctionType(
        function.__code__, names, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__, copy.__doc__ = function.__kwdefaults__, function.__doc__
    return copy


def prepare_with(names: dict):
    """`gptlib.data.prepare` (and the two passes it runs) calling the pieces found in `names`, a namespace
    holding gptlib.data's names: `prepare_with(names)(cfg, progress=False)` prepares shards with them."""
    import gptlib.data

    names = dict(names)
    for name in ("tokenize_stream", "write_splits", "prepare"):
        names[name] = _rebound(getattr(gptlib.data, name), names)
    return names["prepare"]


# --- framing ------------------------------------------------------------------------------------------------


@exercise("02_data", reference="gptlib.data:frame", minutes=5)
def frame(fn) -> str:
    from gptlib.data import frame as reference

    cases = [
        ([5, 6, 7], 9, 8, np.dtype("<u2")),
        ([], 510, 511, np.dtype("<u2")),  # an empty document is still framed
        ([65_535, 0], 7, 8, np.dtype("<u2")),  # the largest uint16 id
        (np.array([70_000, 3]), 100_001, 100_002, np.dtype("<u4")),  # a vocabulary beyond 65,536 ids
    ]
    for ids, bos, eos, dtype in cases:
        got, want = fn(ids, bos, eos, dtype), reference(ids, bos, eos, dtype)
        ids = [int(i) for i in ids]
        call = f"frame({ids}, bos_id={bos}, eos_id={eos}, dtype={dtype.name})"
        _expect(
            isinstance(got, np.ndarray),
            f"{call} returned a {type(got).__name__}: return a numpy array, whose bytes the shard stores",
        )
        _expect(
            got.dtype == want.dtype,
            f"{call} is {got.dtype}: the frame must be of `dtype` ({dtype.name}), the dtype the shard "
            "stores; np.array of Python ints defaults to int64, four times the bytes on disk",
        )
        values, expected = got.reshape(-1).tolist(), want.tolist()
        if values == expected and got.ndim == 1:
            continue
        _expect(got.ndim == 1, f"{call} has shape {got.shape}: a frame is one 1-D array")
        _expect(values != [eos, *ids, bos], f"{call} gave {values}: bos_id comes first, eos_id last")
        _expect(values[:1] == [bos], f"{call} gave {values}: the frame starts with bos_id ({bos})")
        _expect(values[-1:] == [eos], f"{call} gave {values}: the frame ends with eos_id ({eos})")
        _expect(False, f"{call} gave {values}, expected {expected}: the document's ids go between the two")
    return "uint16 and uint32 frames, an empty document too"


# --- the seeded permutation and the split -----------------------------------------------------------------


@exercise("02_data", reference="gptlib.data:shuffle_documents", minutes=5)
def shuffle_documents(fn) -> str:
    from gptlib.data import shuffle_documents as reference

    got, want = fn(42, 1337), reference(42, 1337)
    _expect(
        isinstance(got, np.ndarray), f"shuffle_documents returned a {type(got).__name__}: return an array"
    )
    _expect(
        sorted(got.tolist()) == list(range(42)),
        "shuffle_documents(42, 1337) is not a permutation of 0..41: every document exactly once (drawing "
        "indices one by one, with replacement, repeats some and loses others)",
    )
    _expect(
        np.array_equal(fn(42, 1337), got),
        "two calls with seed 1337 gave two orders: draw from a generator seeded with `seed`, so that the "
        "shards, and which documents are held out, are the same on every run",
    )
    _expect(not np.array_equal(fn(42, 1338), got), "seeds 1337 and 1338 gave the same order: use the seed")
    _expect(
        not np.array_equal(got, np.random.RandomState(1337).permutation(42)),
        "that is the legacy generator's order (np.random.seed / RandomState, MT19937): draw from numpy's "
        "Generator, np.random.default_rng(seed) (PCG64)",
    )
    _expect(
        np.array_equal(got, want),
        f"shuffle_documents(42, 1337) starts {got[:5].tolist()}, expected {want[:5].tolist()}: the "
        "permutation of np.random.default_rng(seed), the order make run's shards are written in",
    )
    _expect(
        got.dtype == np.int64,
        f"the permutation is {got.dtype}: return int64, so that permutation.npy holds the same bytes on "
        "every platform",
    )
    return "42 documents, seeds 1337 and 1338"


@exercise("02_data", reference="gptlib.data:split_documents", minutes=5)
def split_documents(fn) -> str:
    from gptlib.data import shuffle_documents as shuffle
    from gptlib.data import split_documents as reference

    order = shuffle(42, 1337)
    cases = [
        (shuffle(10, 3), 0.29),  # round(2.9) = 3 (not 2)
        (order, 0.05),  # the course's split: round(2.1) = 2 plays
        (order, 0.01),  # round(0.42) = 0, but at least one document
        (np.array([4, 7]), 0.9),  # round(1.8) = 2, but training keeps one
    ]
    for order, fraction in cases:
        got, want = fn(order.copy(), fraction), reference(order, fraction)
        shown = order.tolist() if len(order) <= 10 else f"<a permutation of {len(order)}>"
        call = f"split_documents({shown}, {fraction})"
        _expect(
            isinstance(got, dict) and set(got) == {"train", "val"},
            f"{call} returned {type(got).__name__} {list(got) if isinstance(got, dict) else ''}: return "
            'a dict {"train": ..., "val": ...}',
        )
        train, val = [int(i) for i in got["train"]], [int(i) for i in got["val"]]
        n_val = len(want["val"])
        if train == want["train"].tolist() and val == want["val"].tolist():
            continue
        _expect(
            len(val) > 0, f"{call}: no validation document; keep at least one, even when N * fraction < 1"
        )
        _expect(len(train) > 0, f"{call}: no training document; validation takes at most N - 1 documents")
        _expect(
            len(val) == n_val,
            f"{call}: {len(val)} validation documents, expected {n_val}: round(N * val_fraction), at least 1 "
            "and at most N - 1 (int() cuts 2.9 down to 2, ceil raises 2.1 to 3)",
        )
        _expect(
            val != order[-n_val:].tolist(),
            f"{call}: val holds the permutation's last documents; it is its prefix, the first {n_val}",
        )
        _expect(
            val != sorted(order.tolist())[:n_val],
            f"{call}: val holds the lowest document indices; split the permutation `order` itself, whose "
            "first documents are random ones",
        )
        _expect(
            sorted(train + val) == sorted(order.tolist()),
            f"{call}: train and val together must hold every document of `order` exactly once",
        )
        _expect(False, f"{call} gave {got}, expected {want}: val = order[:n_val], train = the rest, in order")
    return "the course's split, and at least one document on each side"


# --- shards -------------------------------------------------------------------------------------------------


def _plan(lengths, target: int, *, strict: bool = False, before: bool = False) -> list[tuple[int, int]]:
    """Two plausible wrong plans: `strict`, a shard full only beyond `target` (> instead of >=); `before`, a
    shard closed before the document that would take it past `target`."""
    ranges, first, filled = [], 0, 0
    for i, n in enumerate(int(v) for v in lengths):
        if before and filled and filled + n > target:
            ranges.append((first, i))
            first, filled = i, 0
        filled += n
        if filled > target or (filled == target and not strict):
            ranges.append((first, i + 1))
            first, filled = i + 1, 0
    return ranges + [(first, len(lengths))] if first < len(lengths) else ranges


@exercise("02_data", reference="gptlib.data:plan_shards", minutes=10)
def plan_shards(fn) -> str:
    from gptlib.data import plan_shards as reference

    cases = [
        ([5, 5, 5, 5, 5], 10),
        ([6, 6, 6], 10),  # the shard that reaches the target may exceed it
        ([10, 10], 10),  # exactly full is full
        ([30, 1, 1], 10),  # a long document makes a shard of its own
        ([3], 100),  # one short shard
        (np.array([4, 4, 4, 4]), 8),  # lengths as a numpy array, as prepare passes them
    ]
    for lengths, target in cases:
        got, want = fn(lengths, target), reference(lengths, target)
        call = f"plan_shards({[int(n) for n in lengths]}, {target})"
        got = [tuple(int(v) for v in r) for r in got]
        if got == want:
            continue
        _expect(
            got != want[:-1],
            f"{call} gave {got}: the documents left at the end make one last, smaller shard",
        )
        _expect(
            got != [(a, b - 1) for a, b in want],
            f"{call} gave {got}: ranges are half-open, (first, end) with end not included (the next first)",
        )
        _expect(
            got != _plan(lengths, target, strict=True),
            f"{call} gave {got}: a shard holding exactly shard_tokens tokens is full (>=, not >)",
        )
        _expect(
            got != _plan(lengths, target, before=True),
            f"{call} gave {got}: a shard closes *after* the document that brings it to shard_tokens (it may "
            "exceed the target by one document); closing before it leaves shards below the target",
        )
        _expect(False, f"{call} gave {got}, expected {want}")
    return "6 plans: exact fits, overflowing documents, the last short shard"


def _documents(dtype) -> list[np.ndarray]:
    "Three framed documents (bos 9 ... eos 8; ids above 65,535 for uint32), every token distinct in place."
    big = 100_000 if np.dtype(dtype).itemsize == 4 else 0
    docs = [[9, 1, 2, 8], [9, 3, 4, 5, 6, 7, 8], [9, 8]]
    return [np.array([t + big if 0 < t < 8 else t for t in doc], dtype=dtype) for doc in docs]


def _written(folder: Path, name: str) -> dict:
    "The bytes of the three shard files in `folder` (None for a missing one)."
    suffixes = (".ds", ".ds.index", ".ds.metadata")
    return {
        s: (folder / f"{name}{s}").read_bytes() if (folder / f"{name}{s}").is_file() else None
        for s in suffixes
    }


def _shard_hint(got: dict, want: dict, docs: list[np.ndarray], dtype: np.dtype, tok_name: str) -> str | None:
    "What is wrong with the files `got` (against the reference's `want`), or None when they agree."
    lengths = [len(d) for d in docs]
    ends, starts = np.cumsum(lengths), np.cumsum([0] + lengths[:-1])
    if got[".ds"] is None:
        return "no name.ds in `folder`: write the tokens there (folder / f'{name}.ds')"
    if got[".ds"] != want[".ds"]:
        if got[".ds"] == b"":
            return (
                "name.ds is empty: `documents` is an iterator, read once (prepare streams them from a memory "
                "map); write each document's tokens as you go through it"
            )
        if got[".ds"] == np.concatenate(docs).astype(np.int64).tobytes():
            return f"name.ds holds int64 tokens: write them as `dtype` ({dtype.name}), tokens.tobytes()"
        return "name.ds is not the documents' tokens end to end, in the order they come, as `dtype`"
    index = got[".ds.index"]
    if index is None:
        return "no name.ds.index: write the documents' cumulative ends there"
    if index != want[".ds.index"]:
        if len(index) == 4 * len(docs):
            return (
                "name.ds.index holds 4-byte numbers: one little-endian uint64 per end ('<u8'), 8 bytes each"
            )
        if len(index) % 8 == 0:
            values = np.frombuffer(index, dtype="<u8").tolist()
            if values == starts.tolist():
                return (
                    f"name.ds.index holds {values}, where the documents start: DataTrove's index holds where "
                    f"each one ends, {ends.tolist()} (the first start, 0, is implicit)"
                )
            if values == lengths:
                return f"name.ds.index holds the lengths {values}: it holds cumulative ends, {ends.tolist()}"
            if values == [0, *ends.tolist()]:
                return f"name.ds.index holds {values}: one end per document, no leading 0"
            return f"name.ds.index holds {values}, expected the cumulative ends {ends.tolist()}"
        return "name.ds.index is not a whole number of uint64 ends (8 bytes each)"
    metadata = got[".ds.metadata"]
    if metadata is None:
        return "no name.ds.metadata: write metadata_text(tok_name, token_size, n_tokens) there"
    if metadata != want[".ds.metadata"]:
        shown = metadata.decode("utf-8", "replace").replace("\n", "\\n")
        expected = want[".ds.metadata"].decode().replace("\n", "\\n")
        size = "token_size is in bytes (dtype.itemsize), " if f"|{8 * dtype.itemsize}" in shown else ""
        return f"name.ds.metadata reads {shown!r}, expected {expected!r}: {size}metadata_text(...).encode()"
    return None


@exercise("02_data", reference="gptlib.data:write_shard", minutes=15)
def write_shard(fn) -> str:
    from gptlib.data import write_shard as reference

    tok_name = "gptlib-bpe-check"
    for dtype in (np.dtype("<u2"), np.dtype("<u4")):
        docs = _documents(dtype)
        with tempfile.TemporaryDirectory(prefix="gptlib-check-") as tmp:
            ours, yours = Path(tmp) / "reference", Path(tmp) / "yours"
            want_record = reference(ours / "train", "train_00003", iter(docs), dtype, tok_name, root=ours)
            error = None
            try:  # a generator, as prepare passes them: it can be read once
                record = fn(yours / "train", "train_00003", (d for d in docs), dtype, tok_name, root=yours)
            except NotImplementedError:
                raise
            except Exception as e:  # inspect the files first: they usually say what went wrong
                record, error = None, e
            hint = _shard_hint(
                _written(yours / "train", "train_00003"),
                _written(ours / "train", "train_00003"),
                docs,
                dtype,
                tok_name,
            )
            _expect(hint is None, f"write_shard(folder, 'train_00003', documents, {dtype.name}, ...): {hint}")
            _expect(error is None, f"write_shard raised {type(error).__name__}: {error}")
            _expect(
                record == want_record,
                f"write_shard returned {record}, expected the record shard_record makes: keep its last line",
            )
    return "3 documents in uint16 and uint32: .ds, .ds.index and .ds.metadata byte for byte"


# --- reading a split back -----------------------------------------------------------------------------------


def _split_of(folder: Path, sizes: tuple[int, ...]):
    """The manifest of a split of shards of `sizes` tokens written in `folder` (every token distinct), and the
    split's tokens as one array."""
    from gptlib.data import write_shard as reference

    tokens = (np.arange(sum(sizes)) * 3 + 10).astype(np.uint16)
    records, at = [], 0
    for i, size in enumerate(sizes):
        shard = [tokens[at : at + size]]
        records.append(reference(folder / "train", f"train_{i:05d}", shard, np.uint16, "check", root=folder))
        at += size
    return {"tokens": {"dtype": "uint16"}, "splits": {"train": {"shards": records}}}, tokens


@exercise("02_data", reference="gptlib.data:TokenSplit", minutes=10)
def TokenSplit(cls) -> str:
    with tempfile.TemporaryDirectory(prefix="gptlib-check-") as tmp:
        manifest, tokens = _split_of(Path(tmp), (10, 4, 7))  # shards start at 0, 10 and 14; 21 tokens
        split = cls(Path(tmp), manifest, "train")
        ranges = {
            "within shard 0": (2, 8),
            "a whole shard": (10, 14),
            "starting exactly at shard 1's first token": (10, 12),
            "across one boundary": (7, 12),
            "across two boundaries": (8, 17),
            "the whole split": (0, 21),
            "the empty range at the very end": (21, 21),
            "an empty range inside": (5, 5),
        }
        for what, (start, stop) in ranges.items():
            call = f"read({start}, {stop}) ({what}; shards start at 0, 10, 14 of 21 tokens)"
            try:
                got = split.read(start, stop)
            except NotImplementedError:
                raise
            except RecursionError:
                raise AssertionError(
                    f"{call} recursed forever: a start equal to a shard's first offset belongs to that "
                    'shard, np.searchsorted(self.starts, start, side="right") - 1'
                ) from None
            except IndexError as e:
                raise AssertionError(
                    f"{call} raised IndexError ({e}): the empty range at the very end belongs to the last "
                    "shard (min(..., len(self.paths) - 1))"
                ) from None
            want = tokens[start:stop]
            _expect(isinstance(got, np.ndarray), f"{call} returned a {type(got).__name__}: return an array")
            if got.tolist() != want.tolist():
                crosses = what.startswith("across") or what == "the whole split"
                _expect(
                    not (crosses and 0 < len(got) < len(want) and got.tolist() == want[: len(got)].tolist()),
                    f"{call} gave {len(got)} of the {len(want)} tokens: a range across a shard boundary "
                    "joins the parts of each shard it covers (np.concatenate)",
                )
                _expect(
                    False,
                    f"{call} gave {got.tolist()}, expected {want.tolist()}: shard s holds the split's tokens "
                    "self.starts[s] to self.starts[s + 1] - 1, at positions counted from self.starts[s] in "
                    "its map",
                )
            if what == "within shard 0":
                _expect(
                    np.shares_memory(got, split.shards[0]),
                    f"{call} is a copy: within one shard return a slice of its map, a view (the loader reads "
                    "every window of every epoch this way; a copy each time would copy the corpus)",
                )
    return "ranges within a shard (views), across one and two boundaries, and the empty ones"
