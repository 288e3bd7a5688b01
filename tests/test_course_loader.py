"""The checks of lesson 03's pieces (notebooks/course/checks/loader.py): each accepts gptlib's reference, says
"not done yet" for an untouched stub, and rejects plausible wrong answers with the hint that names the
mistake; `batches_with` and `loader_with` batch with the pieces they are given."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from course.checks import loader as checks
from course.pieces import run_check
from tools.checking import rejects

import gptlib.loader
from gptlib.loader import WindowBatches

PIECES = ["batch_xy", "epoch_permutation", "rank_windows", "WindowBatches"]


def stub(*args, **kwargs):
    raise NotImplementedError("your code here")


class StubBatches(WindowBatches):
    def windows(self, step):
        raise NotImplementedError("your code here")


@pytest.mark.parametrize("name", PIECES)
def test_each_check_accepts_gptlibs_reference_and_calls_a_stub_not_done(name):
    assert run_check(name, getattr(gptlib.loader, name)).passed
    assert run_check(name, StubBatches if name == "WindowBatches" else stub).status == "not done"


# --- windows -> (x, y) -----------------------------------------------------------------------------------


def windows(tokens, starts, T, dtype=np.int64):
    return np.stack([tokens[int(s) : int(s) + T + 1] for s in starts]).astype(dtype)  # (B, T + 1)


def xy_as_stored(tokens, starts, T):
    w = torch.from_numpy(windows(tokens, starts, T, np.int32))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def xy_whole_windows(tokens, starts, T):
    w = torch.from_numpy(windows(tokens, starts, T))
    return w, w


def xy_not_shifted(tokens, starts, T):
    x = torch.from_numpy(windows(tokens, starts, T)[:, :-1].copy())
    return x, x.clone()


def xy_swapped(tokens, starts, T):
    w = torch.from_numpy(windows(tokens, starts, T))
    return w[:, 1:].contiguous(), w[:, :-1].contiguous()


def xy_strided_views(tokens, starts, T):
    w = torch.from_numpy(windows(tokens, starts, T))
    return w[:, :-1], w[:, 1:]


def xy_from_one_shard(tokens, starts, T):
    rows = []
    for s in starts:
        k = int(np.searchsorted(tokens.starts, s, side="right")) - 1
        local = int(s - tokens.starts[k])
        rows.append(tokens.shards[k][local : local + T + 1])  # ends too early across a boundary
    w = torch.from_numpy(np.stack(rows).astype(np.int64))
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (xy_as_stored, "token ids go to nn.Embedding and cross_entropy as int64"),
        (xy_whole_windows, "a window is T + 1 tokens, x its first T and y its last T"),
        (xy_not_shifted, "y equals x; y holds the next token of each input"),
        (xy_swapped, "x and y are swapped"),
        (xy_strided_views, "is a strided view"),
        (xy_from_one_shard, "A window may start in one shard and end in the next"),
    ],
)
def test_batch_xy_check_names_the_mistake(wrong, hint):
    rejects("batch_xy", wrong, hint)


def test_a_not_implemented_error_that_is_not_the_stub_propagates():
    def half_done(tokens, starts, T):
        raise NotImplementedError("uint16 is not supported by this op")

    with pytest.raises(NotImplementedError, match="uint16"):
        run_check("batch_xy", half_done)


# --- the order of an epoch, and a rank's share ----------------------------------------------------------


def order_seeded_by_seed_only(n, seed, epoch):
    return np.random.default_rng(seed).permutation(n)


def order_seeded_by_the_sum(n, seed, epoch):
    return np.random.default_rng(seed + epoch).permutation(n)


def order_unseeded(n, seed, epoch):
    return np.random.default_rng().permutation(n)


def order_with_replacement(n, seed, epoch):
    return np.random.default_rng([seed, epoch]).integers(0, n, size=n)


def order_of_the_legacy_generator(n, seed, epoch):
    return np.random.RandomState(seed * 1000 + epoch).permutation(n)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (order_seeded_by_seed_only, "epochs 0 and 1 have the same order"),
        (order_seeded_by_the_sum, "seed + epoch collides"),
        (order_unseeded, "gave two orders"),
        (order_with_replacement, "is not a permutation of 0..49"),
        (order_of_the_legacy_generator, "differs from the permutation of np.random.default_rng([1, 0])"),
    ],
)
def test_epoch_permutation_check_names_the_mistake(wrong, hint):
    rejects("epoch_permutation", wrong, hint)


def share_unequal(order, rank, world_size):
    return order[rank::world_size]


def share_in_blocks(order, rank, world_size):
    per = len(order) // world_size
    return order[rank * per : (rank + 1) * per]


def share_of_positions(order, rank, world_size):
    per = len(order) // world_size
    return np.arange(rank, per * world_size, world_size)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (share_unequal, "every rank must get the same number"),
        (share_in_blocks, "each rank takes a block of the order"),
        (share_of_positions, "a rank got window positions, not windows"),
    ],
)
def test_rank_windows_check_names_the_mistake(wrong, hint):
    rejects("rank_windows", wrong, hint)


# --- batch k ---------------------------------------------------------------------------------------------


class OrderComputedOnce(WindowBatches):
    def windows(self, step):
        epoch, position = divmod(step, self.batches_per_epoch)
        if self._order is None:  # never refreshed: every epoch repeats the first one asked for
            order = gptlib.loader.epoch_permutation(self.n_windows, self.seed, epoch)
            self._order = gptlib.loader.rank_windows(order, self.rank, self.world_size)
        return self._order[position * self.batch_size : (position + 1) * self.batch_size]


class EveryRankTheWholeOrder(WindowBatches):
    def windows(self, step):
        epoch, position = divmod(step, self.batches_per_epoch)
        order = gptlib.loader.epoch_permutation(self.n_windows, self.seed, epoch)
        return order[position * self.batch_size : (position + 1) * self.batch_size]


class EpochsOfBatchSize(WindowBatches):
    def windows(self, step):
        epoch, position = divmod(step, self.batch_size)
        order = gptlib.loader.epoch_permutation(self.n_windows, self.seed, epoch)
        order = gptlib.loader.rank_windows(order, self.rank, self.world_size)
        return order[position * self.batch_size : (position + 1) * self.batch_size]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (OrderComputedOnce, "has the windows of epoch 0; compute the epoch's order again"),
        (EveryRankTheWholeOrder, "each rank takes its share of it"),
        (EpochsOfBatchSize, "epoch, position = divmod(step, self.batches_per_epoch)"),
    ],
)
def test_window_batches_check_names_the_mistake(wrong, hint):
    rejects("WindowBatches", wrong, hint)


# --- the pieces at work ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shakespeare_texts):
    from gptlib.data import DataConfig, prepare
    from gptlib.tokenizer import Tokenizer

    root = tmp_path_factory.mktemp("course-loader")
    (root / "corpus").mkdir()
    for play in sorted(shakespeare_texts.glob("*_gut.txt"))[:4]:
        (root / "corpus" / play.name).write_text(play.read_text(encoding="utf-8")[:6_000], encoding="utf-8")
    tok = Tokenizer.train(
        [p.read_text(encoding="utf-8") for p in (root / "corpus").iterdir()], 300, workers=1
    )
    tok.save(root / "tokenizer")
    cfg = DataConfig(corpus=str(root / "corpus"), tokenizer=root / "tokenizer", out=root / "shards")
    prepare(cfg, progress=False, tokenizer=tok)
    return root / "shards"


def test_the_pieces_given_are_the_ones_that_make_the_batches(shards):
    calls = []

    def counting_batch_xy(tokens, starts, context):  # a learner's batch_xy, as far as the loader can tell
        calls.append(len(starts))
        return gptlib.loader.batch_xy(tokens, starts, context)

    names = {**vars(gptlib.loader), "batch_xy": counting_batch_xy}
    theirs = checks.loader_with(names, shards, "train", 4, 16, seed=3)
    ours = gptlib.loader.BatchLoader(shards, "train", 4, 16, seed=3, num_workers=0)
    for _ in range(3):
        assert all(torch.equal(a, b) for a, b in zip(next(theirs), next(ours)))
    state = theirs.state_dict()
    theirs.load_state_dict({**state, "seed": 4})  # a new dataset, made of the same pieces
    next(theirs)
    assert calls == [4, 4, 4, 4], "every batch came from the batch_xy given"
    split = gptlib.data.open_split(shards, "train")
    dataset = checks.batches_with(names, split, 4, 16, seed=3)
    assert torch.equal(dataset[5][0], WindowBatches(split, 4, 16, seed=3)[5][0]) and len(calls) == 5
