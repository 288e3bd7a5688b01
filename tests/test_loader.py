"""The batch loader (gptlib.loader): windows, seeded order, exact resume with and without workers,
distributed sharding, evaluation batches and clear errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from gptlib.data import DataConfig, open_split, prepare
from gptlib.errors import GptlibError
from gptlib.loader import (
    BatchLoader,
    LoaderError,
    WindowBatches,
    batch_xy,
    epoch_permutation,
    eval_batches,
    rank_windows,
)
from gptlib.shards import ShardError
from gptlib.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def shards(tmp_path_factory, shakespeare_texts):
    """Shards of 8 short Shakespeare excerpts with a 300-id tokenizer: about 25k tokens, several shards."""
    root = tmp_path_factory.mktemp("loader")
    plays = sorted(shakespeare_texts.glob("*_gut.txt"))[:8]
    (root / "corpus").mkdir()
    for path in plays:
        (root / "corpus" / path.name).write_text(
            path.read_text(encoding="utf-8")[5_000:15_000], encoding="utf-8"
        )
    tok = Tokenizer.train(
        [p.read_text(encoding="utf-8")[:50_000] for p in plays[:2]], vocab_size=300, workers=1
    )
    tok.save(root / "tokenizer")
    cfg = DataConfig(
        corpus=str(root / "corpus"),
        tokenizer=root / "tokenizer",
        out=root / "shards",
        val_fraction=0.25,
        shard_tokens=6_000,
        workers=1,
        seed=5,
    )
    prepare(cfg, progress=False)
    return root / "shards"


def take(loader, n):
    return [next(loader) for _ in range(n)]


def same_batches(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b)
    )


def test_windows_are_context_plus_one_tokens_shifted_by_one(shards):
    tokens = open_split(shards, "train")
    whole = np.asarray(tokens).astype(np.int64)
    T = 32
    boundary = int(tokens.starts[1])
    starts = [0, T, 7 * T, boundary - 10]  # the last one straddles two shards
    x, y = batch_xy(tokens, starts, T)
    assert x.shape == y.shape == (4, T) and x.dtype == y.dtype == torch.int64
    assert x.is_contiguous() and y.is_contiguous()
    for row, s in enumerate(starts):
        assert x[row].tolist() == whole[s : s + T].tolist()
        assert y[row].tolist() == whole[s + 1 : s + T + 1].tolist()


def test_every_token_after_the_first_is_a_target_once_per_epoch(shards):
    tokens = open_split(shards, "val")
    batches = WindowBatches(tokens, batch_size=1, context=16)
    targets = [batches[k][1] for k in range(batches.batches_per_epoch)]
    starts = sorted(int(w) for k in range(batches.batches_per_epoch) for w in batches.windows(k))
    assert starts == list(range(batches.n_windows)), "an epoch visits every window once"
    covered = sum(t.numel() for t in targets)
    assert covered == batches.n_windows * 16 and batches.n_windows == (len(tokens) - 1) // 16


def test_batches_are_a_pure_function_of_seed_and_step(shards):
    tokens = open_split(shards, "train")
    a = WindowBatches(tokens, 4, 32, seed=11)
    b = WindowBatches(pickle.loads(pickle.dumps(tokens)), 4, 32, seed=11)
    for k in (5, 0, a.batches_per_epoch + 3, 2):
        assert torch.equal(a[k][0], b[k][0])
    assert not torch.equal(a[0][0], WindowBatches(tokens, 4, 32, seed=12)[0][0])


def test_each_epoch_has_its_own_seeded_order():
    e0, e1 = epoch_permutation(1000, 3, 0), epoch_permutation(1000, 3, 1)
    assert np.array_equal(np.sort(e0), np.arange(1000)) and not np.array_equal(e0, e1)
    assert np.array_equal(e0, epoch_permutation(1000, 3, 0))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restored_state_yields_exactly_the_following_batches(shards, workers):
    straight = BatchLoader(shards, "train", batch_size=4, context=32, seed=2, num_workers=workers)
    per_epoch = straight.batches_per_epoch
    take(straight, per_epoch - 2)  # the resume point sits just before an epoch boundary
    state = straight.state_dict()
    assert state == {"epoch": 0, "position": per_epoch - 2, "seed": 2}
    expected = take(straight, 5)  # crosses into epoch 1
    assert straight.state_dict() == {"epoch": 1, "position": 3, "seed": 2}

    resumed = BatchLoader(shards, "train", batch_size=4, context=32, seed=0, num_workers=workers)
    take(resumed, 3)  # a fresh process that already ran (and prefetched) somewhere else
    resumed.load_state_dict(state)
    assert same_batches(take(resumed, 5), expected)
    straight.close()
    resumed.close()


def test_resume_across_worker_counts_is_bit_identical(shards):
    with_workers = BatchLoader(shards, "train", batch_size=8, context=16, seed=4, num_workers=2)
    take(with_workers, 7)
    state = with_workers.state_dict()
    after = take(with_workers, 6)
    in_process = BatchLoader(shards, "train", batch_size=8, context=16, seed=4, num_workers=0)
    in_process.load_state_dict(state)
    assert same_batches(take(in_process, 6), after)
    with_workers.load_state_dict(state)  # mid-stream on the same loader: prefetched batches are dropped
    assert same_batches(take(with_workers, 6), after)
    with_workers.close()


def test_starting_workers_leaves_the_global_random_state_alone(shards):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    loader = BatchLoader(shards, "train", batch_size=8, context=16, seed=4, num_workers=2)
    take(loader, 3)
    loader.load_state_dict(loader.state_dict())  # restarting the workers draws no seed either
    take(loader, 2)
    loader.close()
    assert torch.equal(torch.get_rng_state(), before), "dropout would differ with and without workers"


def test_state_is_three_json_ints_and_bad_states_are_refused(shards):
    loader = BatchLoader(shards, "train", batch_size=4, context=32, num_workers=0)
    take(loader, 3)
    state = loader.state_dict()
    assert set(state) == {"epoch", "position", "seed"} and all(type(v) is int for v in state.values())
    with pytest.raises(ValueError, match="keys epoch, position, seed"):
        loader.load_state_dict({"epoch": 0, "position": 1})
    with pytest.raises(ValueError, match="loader state epoch must be at least 0"):
        loader.load_state_dict({"epoch": -1, "position": 0, "seed": 0})
    with pytest.raises(ValueError, match="another batch size"):
        loader.load_state_dict({"epoch": 0, "position": loader.batches_per_epoch, "seed": 0})


def test_distributed_ranks_see_disjoint_windows_that_cover_the_data(shards):
    tokens = open_split(shards, "train")
    world = 3
    ranks = [WindowBatches(tokens, 2, 16, seed=9, rank=r, world_size=world) for r in range(world)]
    assert len({r.batches_per_epoch for r in ranks}) == 1, "every rank steps the same number of times"
    for epoch in (0, 1):
        steps = range(epoch * ranks[0].batches_per_epoch, (epoch + 1) * ranks[0].batches_per_epoch)
        seen = [np.concatenate([r.windows(k) for k in steps]) for r in ranks]
        union = np.concatenate(seen)
        assert len(np.unique(union)) == len(union), "no window is seen by two ranks"
        assert len(union) >= ranks[0].n_windows - world * 2 - world, "together they cover all but a remainder"
    shares = [rank_windows(np.arange(10), r, 3) for r in range(3)]
    assert [s.tolist() for s in shares] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match="rank"):
        WindowBatches(tokens, 2, 16, rank=3, world_size=3)


def test_loader_ranks_match_their_datasets(shards):
    loaders = [
        BatchLoader(shards, "train", 2, 16, seed=1, rank=r, world_size=2, num_workers=0) for r in range(2)
    ]
    first = [next(loader)[0] for loader in loaders]
    assert not torch.equal(first[0], first[1])
    assert torch.equal(
        first[1], WindowBatches(open_split(shards, "train"), 2, 16, seed=1, rank=1, world_size=2)[0][0]
    )


def test_the_loader_is_endless_and_lands_on_the_device(shards):
    loader = BatchLoader(shards, "val", batch_size=4, context=64, num_workers=0, device="cpu")
    n = loader.batches_per_epoch * 3 + 1
    for _ in range(n):
        x, y = next(loader)
    assert x.device.type == "cpu" and x.shape == (4, 64)
    assert loader.state_dict()["epoch"] == 3 and loader.step == n
    assert iter(loader) is loader


def test_workers_receive_file_names_not_tokens(shards):
    loader = BatchLoader(shards, "train", batch_size=4, context=32, num_workers=0)
    next(loader)  # memory maps are open in this process now
    assert len(pickle.dumps(loader.dataset)) < 20_000


def test_eval_batches_are_deterministic_and_in_order(shards):
    split = open_split(shards, "val")
    tokens = np.asarray(split).astype(np.int64)
    batches = list(eval_batches(split, batch_size=3, context=20, max_batches=4))
    assert len(batches) == 4 and same_batches(batches, list(eval_batches(split, 3, 20, 4)))
    x, y = batches[1]
    assert x[0].tolist() == tokens[3 * 20 : 4 * 20].tolist() and y[0].tolist() == tokens[61:81].tolist()
    everything = list(eval_batches(split, batch_size=3, context=20))
    n_windows = (len(tokens) - 1) // 20
    assert len(everything) == -(-n_windows // 3) and sum(len(x) for x, _ in everything) == n_windows, (
        "every window once"
    )
    assert everything[-1][0][-1].tolist() == tokens[(n_windows - 1) * 20 : n_windows * 20].tolist()


def test_eval_batches_of_a_tiny_split_give_one_smaller_batch(shards):
    tokens = open_split(shards, "val")
    context = (len(tokens) - 1) // 2  # exactly two windows
    (only,) = list(eval_batches(tokens, batch_size=8, context=context))
    assert only[0].shape == (2, context)
    with pytest.raises(ValueError, match="not one window"):
        eval_batches(tokens, batch_size=8, context=len(tokens))


def test_a_split_too_small_for_one_batch_is_a_clear_error(shards):
    with pytest.raises(LoaderError, match="fewer than one batch") as refused:
        BatchLoader(shards, "val", batch_size=10_000, context=64, num_workers=0)
    assert isinstance(refused.value, GptlibError), "the user's batch size or context, not a bug: one line"
    with pytest.raises(ValueError, match="num_workers"):
        BatchLoader(shards, "val", batch_size=2, context=64, num_workers=-1)
    with pytest.raises(ValueError, match="context"):
        BatchLoader(shards, "val", batch_size=2, context=0, num_workers=0)


def test_the_loader_refuses_shards_of_another_tokenizer(shards, tmp_path):
    other = Tokenizer.train(["a completely different little corpus " * 50], vocab_size=270, workers=1)
    with pytest.raises(ShardError, match="tokenizer mismatch"):
        BatchLoader(shards, "train", 2, 16, num_workers=0, tokenizer=other)
