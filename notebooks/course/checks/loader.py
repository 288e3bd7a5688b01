"""Checks of the pieces written in lesson 03 (the batch loader), and how later notebooks run them.

Hand-written tooling of the course, not part of the installed package. Each piece has the signature of the
`gptlib.loader` object of the same name, which is its reference:

- `batch_xy(tokens, starts, context) -> (x, y)`: for a `TokenSplit` and B token offsets, the windows of
  `context + 1` tokens as `x` (B, T) and `y` (B, T), contiguous int64 tensors, `y` one token ahead of `x`;
- `epoch_permutation(n_windows, seed, epoch) -> np.ndarray`: the permutation of `0 .. n_windows-1` that
  `np.random.default_rng([seed, epoch])` draws;
- `rank_windows(order, rank, world_size) -> np.ndarray`: `order[rank : (len(order) // world_size) *
  world_size : world_size]`, one rank's interleaved share, the same size for every rank;
- `WindowBatches`: the class of `gptlib.loader` whose method `windows(step)` the learner writes (its
  `__init__` and `__getitem__` stay the lesson's): the window indices of batch `step`, this rank's share of
  epoch `step // batches_per_epoch`'s order, entries `position * B` to `(position + 1) * B`.

Where they run later: in the lesson (and the learner's workbook) `WindowBatches` and `BatchLoader` are defined
by export cells, so they call whatever `batch_xy`, `epoch_permutation`, `rank_windows` and `WindowBatches`
the notebook holds, the learner's once their checks passed. In another notebook, `loader_with(names, ...)`
makes a `gptlib.loader.BatchLoader` whose batches come from the pieces of a namespace, e.g.
`course.collect().namespaces["03_loader"]`; `batches_with(names, tokens, ...)` the same for one dataset.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import numpy as np

from course.checks.data import _expect, _rebound
from course.pieces import exercise


def _class_with(cls: type, names: dict) -> type:
    "A subclass of `cls` whose methods look their global names up in `names` instead of their module."
    methods = {k: _rebound(v, names) for k, v in vars(cls).items() if callable(v) and hasattr(v, "__code__")}
    return type(cls.__name__, (cls,), methods)


def batches_with(names: dict, tokens, batch_size: int, context: int, **kwargs):
    """A `WindowBatches` over `tokens` made of the pieces in `names` (the learner's class when it passed,
    and their `batch_xy`, `epoch_permutation` and `rank_windows`): `dataset[k]` is their batch `k`."""
    return _class_with(names["WindowBatches"], names)(tokens, batch_size, context, **kwargs)


def loader_with(names: dict, shards, split: str, batch_size: int, context: int, **kwargs):
    """A `gptlib.loader.BatchLoader` (endless, resumable) whose batches come from the pieces in `names`.
    `num_workers=0` (the default here): batches made in the calling process."""
    import gptlib.loader

    names = {**names, "WindowBatches": _class_with(names["WindowBatches"], names)}
    loader = _class_with(gptlib.loader.BatchLoader, names)
    return loader(shards, split, batch_size, context, **{"num_workers": 0, **kwargs})


_FOLDER: list[Path] = []  # the split the checks read, made once per process


def _split():
    """A split of three shards (40, 25 and 60 tokens), every token distinct from its neighbours, so that any
    shift shows, and windows that cross both shard boundaries."""
    from gptlib.data import TokenSplit, write_shard

    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="gptlib-check-loader-")))
        atexit.register(shutil.rmtree, _FOLDER[0], ignore_errors=True)
    folder = _FOLDER[0]
    tokens = (np.arange(125) * 7 + 100).astype(np.uint16)  # 100, 107, 114, ...
    sizes, records, at = (40, 25, 60), [], 0
    for i, size in enumerate(sizes):
        shard = [tokens[at : at + size]]
        records.append(
            write_shard(folder / "train", f"train_{i:05d}", shard, np.uint16, "check", root=folder)
        )
        at += size
    manifest = {"tokens": {"dtype": "uint16"}, "splits": {"train": {"shards": records}}}
    return TokenSplit(folder, manifest, "train"), tokens


# --- windows -> (x, y) ------------------------------------------------------------------------------------


@exercise("03_loader", reference="gptlib.loader:batch_xy", minutes=15)
def batch_xy(fn) -> str:
    import torch

    split, tokens = _split()
    T = 8
    cases = {
        "within one shard": [0, 9, 48, 70],
        "across a shard boundary": [36, 62],  # 36..44 crosses 40; 62..70 crosses 65
        "ending at the last token": [len(tokens) - T - 1],
    }
    for what, starts in cases.items():
        want_x = torch.tensor(np.stack([tokens[s : s + T] for s in starts]).astype(np.int64))
        want_y = torch.tensor(np.stack([tokens[s + 1 : s + T + 1] for s in starts]).astype(np.int64))
        call = f"batch_xy(tokens, starts={starts}, context={T}) ({what})"
        try:
            x, y = fn(split, np.array(starts), T)
        except NotImplementedError:
            raise
        except Exception as e:
            _expect(
                what == "within one shard",
                f"{call} raised {type(e).__name__}: {e}. A window may start in one shard and end in the "
                "next: tokens[a:b] (or tokens.read(a, b)) reads across the boundary",
            )
            raise
        for name, got in (("x", x), ("y", y)):
            _expect(
                isinstance(got, torch.Tensor), f"{call}: {name} is a {type(got).__name__}, not a torch tensor"
            )
            _expect(
                tuple(got.shape) != (len(starts), T + 1),
                f"{call}: {name} has shape {tuple(got.shape)}; x and y are (B, T): a window is T + 1 tokens, "
                "x its first T and y its last T",
            )
            _expect(
                tuple(got.shape) == (len(starts), T),
                f"{call}: {name} has shape {tuple(got.shape)}, expected (B, T) = {(len(starts), T)}",
            )
            _expect(
                got.dtype == torch.int64,
                f"{call}: {name} is {got.dtype}; token ids go to nn.Embedding and cross_entropy as int64 "
                "(torch.long); uint16 is only how they are stored on disk",
            )
        if not (torch.equal(x, want_x) and torch.equal(y, want_y)) and what == "across a shard boundary":
            _expect(
                False,
                f"{call}: wrong tokens for windows that cross a shard boundary; tokens[a:b] (or "
                "tokens.read(a, b)) joins the two shards, one shard's map alone ends too early",
            )
        _expect(not torch.equal(y, x), f"{call}: y equals x; y holds the next token of each input, one ahead")
        _expect(
            not (torch.equal(x, want_y) and torch.equal(y, want_x)),
            f"{call}: x and y are swapped; x is the window's first T tokens, y its last T",
        )
        _expect(
            torch.equal(x, want_x),
            f"{call}: x = {x.tolist()}; row b of x is tokens[starts[b] : starts[b] + T]",
        )
        _expect(
            torch.equal(y, want_y),
            f"{call}: y = {y.tolist()}; y is x shifted one token ahead, "
            "tokens[starts[b] + 1 : starts[b] + T + 1]",
        )
        for name, got in (("x", x), ("y", y)):
            _expect(
                got.is_contiguous(),
                f"{call}: {name} is a strided view (a slice of the windows' columns); make it contiguous "
                "(.contiguous(), or a copy): the loss flattens y with view(-1), which needs contiguous "
                "memory",
            )
    return "windows within a shard, across both shard boundaries, and the last one"


# --- the order of an epoch, and a rank's share ------------------------------------------------------------


@exercise("03_loader", reference="gptlib.loader:epoch_permutation", minutes=5)
def epoch_permutation(fn) -> str:
    from gptlib.loader import epoch_permutation as reference

    got = fn(50, 1, 0)
    _expect(
        isinstance(got, np.ndarray), f"epoch_permutation returned a {type(got).__name__}: return an array"
    )
    _expect(
        sorted(np.asarray(got).tolist()) == list(range(50)),
        "epoch_permutation(50, 1, 0) is not a permutation of 0..49: in an epoch every window once (drawing "
        "windows with replacement repeats some and never shows others)",
    )
    _expect(
        np.array_equal(fn(50, 1, 0), got),
        "two calls of epoch_permutation(50, 1, 0) gave two orders: seed a generator with (seed, epoch), so "
        "batch k of a run is a pure function of k and a resumed run sees the same batches",
    )
    _expect(
        not np.array_equal(fn(50, 1, 1), got),
        "epochs 0 and 1 have the same order: the permutation must be seeded by the epoch too, a fresh order "
        "every epoch",
    )
    _expect(not np.array_equal(fn(50, 2, 0), got), "seeds 1 and 2 gave the same order: use the seed")
    _expect(
        not np.array_equal(fn(50, 0, 1), got),
        "seed 1 at epoch 0 and seed 0 at epoch 1 gave the same order: seed + epoch collides; seed the "
        "generator with the pair [seed, epoch] (np.random.default_rng takes a list)",
    )
    for seed, epoch in ((1, 0), (1337, 3), (0, 7)):
        _expect(
            np.array_equal(fn(50, seed, epoch), reference(50, seed, epoch)),
            f"epoch_permutation(50, {seed}, {epoch}) differs from the permutation of "
            f"np.random.default_rng([{seed}, {epoch}]), the order make run trains in",
        )
    return "fresh every epoch, the same on every call, and (seed, epoch) pairs that never collide"


@exercise("03_loader", reference="gptlib.loader:rank_windows", minutes=5)
def rank_windows(fn) -> str:
    from gptlib.loader import rank_windows as reference

    order = np.random.default_rng(3).permutation(11)  # 11 windows: 3 ranks of 3, two left over
    for world in (1, 2, 3, 4):
        shares = [np.asarray(fn(order, r, world)) for r in range(world)]
        want = [reference(order, r, world) for r in range(world)]
        if all(np.array_equal(s, w) for s, w in zip(shares, want)):
            continue
        call = f"rank_windows(order, rank, {world}) for order = {order.tolist()}"
        sizes = [len(s) for s in shares]
        _expect(
            len(set(sizes)) == 1,
            f"{call}: the ranks get {sizes} windows; every rank must get the same number, len(order) // "
            "world_size (the rest left out), or DDP would wait forever for the rank with fewer batches",
        )
        _expect(
            sizes[0] == len(order) // world,
            f"{call}: {sizes[0]} windows a rank, expected len(order) // world_size = {len(order) // world}",
        )
        per = len(order) // world
        _expect(
            not all(np.array_equal(s, order[r * per : (r + 1) * per]) for r, s in enumerate(shares)),
            f"{call}: each rank takes a block of the order; take every world_size-th entry from `rank` "
            "(interleaved), so that at each step the ranks together take the order's next B * R windows",
        )
        _expect(
            not any(np.array_equal(s, np.arange(r, per * world, world)) for r, s in enumerate(shares)),
            f"{call}: a rank got window positions, not windows; take the entries of `order` themselves",
        )
        _expect(False, f"{call} gave {[s.tolist() for s in shares]}, expected {[w.tolist() for w in want]}")
    return "1 to 4 ranks over 11 windows: interleaved, equal shares"


# --- batch k ---------------------------------------------------------------------------------------------


@exercise("03_loader", reference="gptlib.loader:WindowBatches", minutes=10)
def WindowBatches(cls) -> str:
    import torch

    from gptlib.loader import WindowBatches as Reference

    split, _ = _split()
    for world in (1, 2):
        for rank in range(world):
            yours, ours = (
                cls(split, 3, 4, seed=5, rank=rank, world_size=world),
                Reference(split, 3, 4, seed=5, rank=rank, world_size=world),
            )
            per = ours.batches_per_epoch
            # in order, across epochs, back to the start, and one resumed straight into a later epoch
            steps = [0, 1, per - 1, per, per + 1, 0, 3 * per + 2, 2 * per]
            for k in steps:
                got, want = np.asarray(yours.windows(k)), ours.windows(k)
                if np.array_equal(got, want):
                    continue
                where = f"WindowBatches(split, 3, 4, seed=5, rank={rank}, world_size={world}).windows({k})"
                epoch, position = divmod(k, per)
                _expect(
                    len(got) == 3,
                    f"{where} holds {len(got)} windows, expected B = 3 (position {position} of epoch "
                    f"{epoch})",
                )
                previous = Reference(split, 3, 4, seed=5, rank=rank, world_size=world).windows(position)
                _expect(
                    not (epoch > 0 and np.array_equal(got, previous)),
                    f"{where}: batch {k} (epoch {epoch}) has the windows of epoch 0; compute the epoch's "
                    "order again whenever the epoch changes (self._epoch says which one self._order holds)",
                )
                whole = np.random.default_rng([5, epoch]).permutation(ours.n_windows)
                _expect(
                    not (world > 1 and np.array_equal(got, whole[position * 3 : position * 3 + 3])),
                    f"{where}: the batch comes from the whole order; each rank takes its share of it "
                    "(rank_windows(order, self.rank, self.world_size))",
                )
                _expect(
                    False,
                    f"{where} gave {got.tolist()}, expected {want.tolist()}: epoch, position = divmod(step, "
                    "self.batches_per_epoch), then entries position * B to (position + 1) * B of this rank's "
                    "share of the epoch's order",
                )
            x, y = yours[per + 1]
            _expect(
                torch.equal(x, ours[per + 1][0]) and torch.equal(y, ours[per + 1][1]), "dataset[k] is batch k"
            )
    return "1 and 2 ranks, across epochs, and a stream resumed in a later epoch"
