"""The character-level peer of benchmarks/train.py held to wall time: its cosine clocked by time is nanoGPT's
cosine clocked by iterations when the iterations are even, and `train_for` stops when the minutes do."""

import math
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _peer  # noqa: E402


def test_learning_rate_in_time_is_the_cosine_of_even_iterations():
    # iterations of 0.05 s each, 2,000 of them in the budget: the time clock gives nanoGPT's rate at every one
    step_s, iters = 0.05, 2000
    warmup = _peer.RECIPE["warmup_iters"]
    for it in (0, 50, warmup - 1, warmup, 700, 1500, iters - 1):
        by_time = _peer.learning_rate_in_time(it, it * step_s, warmup * step_s, iters * step_s)
        assert by_time == pytest.approx(_peer.learning_rate(it, iters), rel=1e-9)
    assert _peer.learning_rate_in_time(iters + 5, iters * step_s + 1, warmup * step_s, iters * step_s) == (
        pytest.approx(_peer.RECIPE["min_lr"])
    )


def test_learning_rate_in_time_refuses_a_warmup_that_outlasts_the_budget():
    with pytest.raises(ValueError, match="warmup"):
        _peer.learning_rate_in_time(_peer.RECIPE["warmup_iters"], 10.0, 10.0, 10.0)


class FakeRun:
    "A peer run whose iterations take `step_s` of a fake clock; it keeps the rates it was given."

    def __init__(self, clock, step_s: float):
        self.clock, self.step_s, self.rates = clock, step_s, []

    def step(self, lr, autocast):
        self.rates.append(lr)
        self.clock[0] += self.step_s
        return 1.0


def test_train_for_stops_when_the_wall_time_is_spent(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(_peer.time, "perf_counter", lambda: clock[0])
    run = FakeRun(clock, step_s=0.25)
    iterations, wall_s, loss = _peer.train_for(run, 60.0, nullcontext)
    assert iterations == 240 and wall_s == pytest.approx(60.0) and loss == 1.0
    warmup = _peer.RECIPE["warmup_iters"]
    assert run.rates[warmup] == pytest.approx(_peer.RECIPE["learning_rate"])  # the cosine starts at its peak
    last = run.rates[-1]  # the last iteration starts 0.25 s before the end: all but done decaying
    assert _peer.RECIPE["min_lr"] < last < _peer.RECIPE["min_lr"] * 1.01
    assert all(a >= b for a, b in zip(run.rates[warmup:], run.rates[warmup + 1 :]))


def test_train_for_trains_the_real_peer_and_returns_its_loss():
    data = np.random.default_rng(0).integers(0, 259, 5000).astype(np.uint16)
    run = _peer.PeerRun(259, data, seed=0)
    iterations, wall_s, loss = _peer.train_for(run, 0.5, nullcontext)
    assert iterations >= 1 and wall_s >= 0.5 and math.isfinite(loss)
