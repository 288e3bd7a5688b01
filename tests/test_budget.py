"""gptlib.probe: a time budget becomes max_steps, the precision comes from real steps, and neither leaves a
trace in what the run computes (a rerun with the recorded steps reproduces it; a resume keeps the plan)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import gptlib.probe
from gptlib.cli import config_from_args
from gptlib.cli import main as cli_main
from gptlib.config import ConfigError
from gptlib.optim import lr_at
from gptlib.probe import (
    Budget,
    Probe,
    describe,
    precisions_to_time,
    recorded,
    run_cost,
    steps_within,
)
from gptlib.run_folder import list_checkpoints, read_checkpoint_meta, read_metrics
from gptlib.runtime import Distributed
from gptlib.train import train
from gptlib.train_config import TrainConfig

ONE_PROCESS = Distributed(0, 1, 0, torch.device("cpu"))


def tiny(small_data, out, **overrides) -> TrainConfig:
    base = {
        "shards": str(small_data / "shards"),
        "tokenizer": str(small_data / "tokenizer"),
        "out": str(out),
        "log_every": 1,
        "eval_every": 6,
        "eval_batches": 2,
        "checkpoint_every": 4,
        "micro_batch": 4,
        "context": 32,
        "vocab_size": 300,  # small_data's tokenizer
        "precision": "fp32",
    }
    return TrainConfig.preset("tiny", **{**base, **overrides})


def losses(history):
    return [(r["step"], r["loss"]) for r in history if r["kind"] == "train"]


def start_of(history) -> dict:
    "The record of the run's latest start (its first line: a new run, or a resume)."
    starts = [r for r in history if r["kind"] == "event" and "max_steps" in r]
    return [r for r in starts if not r["message"].startswith("budget:")][-1]


def end_of(history) -> int:
    "The run's `max_steps` as its records last said it (a budget's re-plan may have moved it)."
    return [r for r in history if r["kind"] == "event" and "max_steps" in r][-1]["max_steps"]


# --- the arithmetic of a budget ---------------------------------------------------------------------------


@pytest.mark.parametrize("budget_s", [0.5, 3.0, 10.0, 37.3, 100.0])
def test_steps_within_is_the_most_steps_whose_validations_and_checkpoints_fit(budget_s):
    probe = Probe(step_s={"bf16": 0.1}, eval_s=0.7, save_s=0.3, precisions=("bf16",))
    n = steps_within(budget_s, probe, precision="bf16", eval_every=7, checkpoint_every=5)

    def cost(k):
        return run_cost(k, 0.1, 0.7, 0.3, 7, 5)

    assert n == 0 or cost(n) <= budget_s
    assert cost(n + 1) > budget_s


def test_run_cost_counts_a_validation_and_a_checkpoint_at_the_end_of_an_odd_length():
    # 10 steps, validations at 4, 8 and the end (10), checkpoints at 5 and 10
    assert run_cost(10, 1.0, 2.0, 3.0, 4, 5) == pytest.approx(10 + 3 * 2 + 2 * 3)
    assert run_cost(8, 1.0, 2.0, 3.0, 4, 5) == pytest.approx(8 + 2 * 2 + 2 * 3)


def test_a_budget_is_refused_where_it_fits_no_step_or_contradicts_decay_steps(small_data, tmp_path):
    probe = Probe(step_s={"fp32": 5.0}, precisions=("fp32",))
    import time

    with pytest.raises(ConfigError, match="fits no training step"):
        cfg = tiny(small_data, tmp_path, budget=0.01)
        Budget.of(cfg, time.perf_counter()).plan(cfg, probe, "fp32", ONE_PROCESS)
    with pytest.raises(ConfigError, match="decay-steps"):
        Budget.of(tiny(small_data, tmp_path, budget=5.0, decay_steps=40), time.perf_counter())
    assert Budget.of(tiny(small_data, tmp_path), 0.0) is None  # no budget: max_steps as given


def test_what_is_timed_depends_on_what_must_be_decided(monkeypatch):
    monkeypatch.setattr(gptlib.probe, "cpu_features", lambda: ("avx512_bf16",))
    assert precisions_to_time("auto", "cpu", budget=False) == ("fp32", "bf16")  # auto chooses by the steps
    assert precisions_to_time("fp32", "cpu", budget=False) == ()  # nothing to decide, nothing timed
    assert precisions_to_time("fp32", "cpu", budget=True) == ("fp32",)  # the budget needs its step time
    assert precisions_to_time("fp16", "cpu", budget=False) == ("fp16", "fp32")  # no fp16 units: its cost
    # bf16 units, yet a step may still be slower than fp32's at the run's shape: timed beside it
    assert precisions_to_time("bf16", "cpu", budget=False) == ("bf16", "fp32")
    monkeypatch.setattr(gptlib.probe, "cpu_features", lambda: ())
    assert precisions_to_time("bf16", "cpu", budget=False) == ("bf16", "fp32")


def test_a_precision_far_slower_in_its_first_step_is_timed_no_further(monkeypatch):
    """A CPU without bf16 units runs bf16 steps some 35 times slower than fp32's: timing its warm-up and
    rounds in full would spend a budget's minute. Its first step decides; the other is timed in full."""
    clock, calls = [0.0], {"fp32": 0, "bf16": 0}

    def step(name: str, seconds: float):
        def run() -> None:
            calls[name] += 1
            clock[0] += seconds

        return run

    monkeypatch.setattr(gptlib.probe.time, "perf_counter", lambda: clock[0])
    times = gptlib.probe.time_steps({"fp32": step("fp32", 0.5), "bf16": step("bf16", 20.0)})
    assert times == {"fp32": 0.5, "bf16": 20.0} and list(times) == ["fp32", "bf16"]
    assert calls == {"fp32": gptlib.probe.WARMUP_STEPS + gptlib.probe.TIMED_STEPS, "bf16": 1}
    # a precision only somewhat slower (a first step with its own warm-up in it) is timed in full
    calls.update(fp32=0, bf16=0)
    times = gptlib.probe.time_steps({"fp32": step("fp32", 0.5), "bf16": step("bf16", 1.5)})
    assert times == {"fp32": 0.5, "bf16": 1.5} and calls["bf16"] == calls["fp32"] > 2


def test_every_rank_times_as_many_steps_as_the_others(monkeypatch):
    """In a torchrun group each timed step is a collective: a rank that found bf16 hopeless, or ran out of
    timing time, while another did not would leave the other waiting in its next step. Two ranks whose
    clocks disagree on both choices (rank 0: bf16's first step 6x fp32's, and slow rounds; rank 1: 3x, and
    fast ones) share their times first and call each step as often as each other."""
    import threading

    clocks = threading.local()
    barrier = threading.Barrier(2, timeout=10)  # a rank left waiting breaks it: the test fails, never hangs
    shared: list = [None, None]
    calls = [{"fp32": 0, "bf16": 0}, {"fp32": 0, "bf16": 0}]

    def most_for(rank: int):
        def most(values):  # the all-reduce: every rank's values, then the largest of each
            shared[rank] = list(values)
            barrier.wait()
            largest = [max(pair) for pair in zip(*shared)]
            barrier.wait()
            return largest

        return most

    def rank_times(rank: int, seconds: dict[str, float], out: list):
        clocks.now = 0.0

        def step(name: str):
            def run() -> None:
                calls[rank][name] += 1
                clocks.now += seconds[name]

            return run

        out[rank] = gptlib.probe.time_steps({n: step(n) for n in seconds}, most=most_for(rank))

    monkeypatch.setattr(gptlib.probe.time, "perf_counter", lambda: clocks.now)
    results: list = [None, None]
    ranks = [
        threading.Thread(target=rank_times, args=(0, {"fp32": 8.0, "bf16": 48.0}, results)),
        threading.Thread(target=rank_times, args=(1, {"fp32": 1.0, "bf16": 3.0}, results)),
    ]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(timeout=30)
    assert not barrier.broken and calls[0] == calls[1], calls
    assert calls[0]["bf16"] == 1  # the largest first steps: 48 s against 8 s, hopeless on both ranks


def test_the_budget_is_a_flag_of_train_start_and_of_run():
    cfg = config_from_args(["--budget", "8", "--shards", "s", "--tokenizer", "t", "--out", "o"])
    assert cfg.budget == 8.0 and cfg.max_steps == TrainConfig.preset("tiny").max_steps
    with pytest.raises(ConfigError, match="budget"):
        config_from_args(["--budget", "-1"])
    assert cli_main(["run", "--budget", "soon"]) == 2  # a usage error, before any work
    assert cli_main(["run", "--budget", "-1"]) == 2  # refused before the corpus is fetched


# --- a run with a budget ------------------------------------------------------------------------------------


def set_up_costs_nothing(monkeypatch) -> None:
    """The set-up's seconds off the budget counted as none: on a busy machine they alone can pass a test's
    budget of a second or two, which must leave room for tens of tiny steps (the probe still times them)."""
    monkeypatch.setattr(gptlib.probe.Budget, "spent", lambda self: 0.0)


def test_a_budget_sets_max_steps_that_a_rerun_without_it_reproduces_exactly(
    small_data, tmp_path, monkeypatch
):
    """The probe times real steps on copies under a fork of the random generators: the budget's run computes
    what a run told the same number of steps computes, bit for bit; the plan is recorded with the run."""
    set_up_costs_nothing(monkeypatch)
    cfg = tiny(small_data, tmp_path / "budget", budget=0.03)  # 1.8 s: some tens of tiny steps
    history = train(cfg, log=None, progress=False)
    start = start_of(history)
    steps, final = start["max_steps"], end_of(history)  # planned; moved at the warmup's end (faster steps)
    assert steps > 0 and losses(history)[-1][0] == final
    saved = json.loads((Path(cfg.out) / "config.json").read_text())
    assert saved["max_steps"] == final and saved["budget"] == 0.03
    meta = read_checkpoint_meta(list_checkpoints(cfg.out)[-1])
    probe = recorded(meta)
    assert probe is not None and probe.step_s["fp32"] > 0 and probe.eval_s > 0 and probe.save_s > 0
    assert f"{steps:,d} steps of" in start["message"] and "probe: a step takes fp32" in start["message"]
    # the plan fits the budget at the probe's own times (what it could know when it planned)
    assert run_cost(steps, probe.step_s["fp32"], probe.eval_s, probe.save_s, 6, 4) <= 0.03 * 60
    assert not any(p.name.startswith(".probe") for p in Path(cfg.out).iterdir())  # its scratch is gone
    rerun = train(
        replace(cfg, out=str(tmp_path / "rerun"), budget=0.0, max_steps=final), log=None, progress=False
    )
    assert losses(rerun) == losses(history)
    val = [(r["step"], r["val_loss"]) for r in history if r["kind"] == "val"]
    assert val == [(r["step"], r["val_loss"]) for r in rerun if r["kind"] == "val"]


def test_a_compiled_budget_run_compiles_its_own_model_once_and_times_eager_copies(
    small_data, tmp_path, monkeypatch
):
    """On a CPU compiling costs tens of seconds (30-42 s for the `cpu` preset from an empty cache): the probe
    times its copies eager, and only the run's own model is compiled, once, inside the budget (a GPU's
    probe compiles one copy: `test_a_compiled_run_is_planned_at_its_compiled_steps_and_fills_its_minutes`)."""
    set_up_costs_nothing(monkeypatch)
    compiled = []

    def counted_compile(model, **kwargs):  # stands in for inductor: records what is compiled, runs eager
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", counted_compile)
    cfg = tiny(small_data, tmp_path / "run", budget=0.03, compile=True, precision="auto")
    history = train(cfg, log=None, progress=False)
    start = start_of(history)
    assert "torch.compile on (" in start["message"] and " s to compile)" in start["message"]
    assert len(compiled) == 1, f"compiled {len(compiled)} models: the probe's copies must stay eager"
    assert set(recorded(read_checkpoint_meta(list_checkpoints(cfg.out)[-1])).step_s) == {"fp32", "bf16"}


def test_a_compiled_run_is_planned_at_its_compiled_steps_and_fills_its_minutes(monkeypatch):
    """On one H200, `train start --precision bf16 --compile true --micro-batch 32 --grad-accum 1 --budget 1`
    planned 2,014 steps from eager steps of 18 ms; compiled, they took 12 ms, and the run used well under
    its minute. A GPU's probe times the compiled step too (its compile spent from the budget before the
    plan): the plan counts what the run runs, and the run fills 90-100 % of its minutes."""
    clock = Clock()
    monkeypatch.setattr(gptlib.probe, "time", clock)
    probe = Probe(
        step_s={"bf16": 0.018},
        eval_s=0.4,
        save_s=0.5,
        precisions=("bf16",),
        compiled_s={"bf16": 0.012},
        compile_s=15.0,
    )
    cfg = TrainConfig.preset(
        "gpt-25m", precision="bf16", compile=True, micro_batch=32, grad_accum=1, budget=1
    )
    began, before_plan = clock.now, 6.0 + 15.0 + 2.0  # set-up, the probe's compile, its steps and checks

    def used(planned) -> float:  # the share of the minute a run of `planned` uses at the compiled step
        cost = run_cost(planned.max_steps, 0.012, 0.4, 0.5, cfg.eval_every, cfg.checkpoint_every)
        return (before_plan + cost) / 60

    clock.now = began + before_plan
    compiled = Budget(1.0, began).plan(cfg, probe, "bf16", ONE_PROCESS)
    assert 0.9 <= used(compiled) <= 1.0, used(compiled)
    # planned at the eager step, as before, the same run stops short of 90 % of its minute
    eager = Budget(1.0, began).plan(replace(cfg, compile=False), probe, "bf16", ONE_PROCESS)
    assert used(eager) < 0.9 and eager.max_steps < compiled.max_steps
    assert probe.step_time("bf16", compiled=True) == 0.012 and probe.step_time("bf16") == 0.018


def test_a_run_that_compiles_plans_at_the_probes_compiled_step_and_says_so(small_data, tmp_path, monkeypatch):
    """The plan of a run that compiles takes the probe's compiled step, and its first line says which step
    it was planned at (torch.compile stands in as eager here: no compiler needed)."""
    set_up_costs_nothing(monkeypatch)
    probe = Probe(
        step_s={"fp32": 0.2},
        eval_s=0.05,
        save_s=0.05,
        precisions=("fp32",),
        compiled_s={"fp32": 0.1},
        compile_s=3.0,
    )
    monkeypatch.setattr("gptlib.train.measure", lambda *args, **kwargs: probe)
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)
    cfg = tiny(small_data, tmp_path / "run", budget=0.03, compile=True)
    start = start_of(train(cfg, log=None, progress=False))
    planned = steps_within(1.8, probe, precision="fp32", eval_every=6, checkpoint_every=4, compiled=True)
    assert (
        start["max_steps"]
        == planned
        > steps_within(1.8, probe, precision="fp32", eval_every=6, checkpoint_every=4)
    )
    assert f"budget 0.03 min: {planned:,d} steps of 100 ms compiled" in start["message"], start["message"]


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile on CPU needs a C/C++ compiler (inductor generates C++)",
)
def test_a_compiled_run_is_reproduced_bit_for_bit(small_data, tmp_path):
    """The `cpu` preset compiles, and a budget's run promises that `--max-steps` trains it again exactly:
    inductor's CPU kernels must then add in the same order every time (gptlib.runtime.compile_or_fallback)."""
    runs = []
    for name in ("first", "second"):
        cfg = tiny(small_data, tmp_path / name, compile=True, max_steps=12, precision="bf16")
        history = train(cfg, log=None, progress=False)
        assert "torch.compile on" in start_of(history)["message"]
        runs.append((losses(history), [r["val_loss"] for r in history if r["kind"] == "val"]))
        assert not torch.are_deterministic_algorithms_enabled()  # the caller's setting, given back
    assert runs[0] == runs[1]


def test_a_resumed_budget_run_keeps_its_plan_and_does_not_probe_again(small_data, tmp_path, monkeypatch):
    set_up_costs_nothing(monkeypatch)
    cfg = tiny(small_data, tmp_path / "run", budget=0.03)
    first = train(cfg, until_step=4, log=None, progress=False)
    assert first[-1].get("stopped")
    steps = start_of(first)["max_steps"]

    def no_second_probe(*args, **kwargs):
        raise AssertionError("a resumed run measured again")

    monkeypatch.setattr(gptlib.probe, "measure", no_second_probe)
    monkeypatch.setattr("gptlib.train.measure", no_second_probe)
    # resumed by a command that gives another budget, or none: the plan of the run's start still holds
    resumed = train(replace(cfg, budget=0.0), log=None, progress=False)
    assert losses(resumed)[-1][0] == steps and start_of(resumed)["max_steps"] == steps
    assert (
        "resuming" in start_of(resumed)["message"]
        and "probe: a step takes fp32" in start_of(resumed)["message"]
        and "budget 0.03 min" in start_of(resumed)["message"]
    )
    monkeypatch.undo()
    reference = train(
        replace(cfg, out=str(tmp_path / "reference"), budget=0.0, max_steps=steps), log=None, progress=False
    )
    assert losses(resumed) == losses(reference)


# --- a budget's run re-planned while its learning rate holds -----------------------------------------------


def test_a_cooldown_holds_max_lr_and_keeps_the_cosine_for_the_last_steps():
    cosine = TrainConfig.preset("tiny", max_steps=100, warmup_steps=10)
    rates = dict(max_lr=cosine.max_lr, min_lr=cosine.min_lr, warmup_steps=10, decay_steps=100)
    assert [cosine.lr(s) for s in range(120)] == [lr_at(s, **rates) for s in range(120)]  # cooldown 1
    held = replace(cosine, cooldown=0.25)
    assert held.decay_start() == 75
    lrs = [held.lr(s) for s in range(120)]
    assert lrs[:10] == [cosine.lr(s) for s in range(10)]  # the same warmup
    assert lrs[10:76] == [held.max_lr] * 66 and lrs[100:] == [held.min_lr] * 20
    # the cosine itself, delayed: step 75 + k is step 10 + k of a run whose cosine spans 25 steps
    assert lrs[75:101] == [replace(cosine, max_steps=35).lr(10 + k) for k in range(26)]
    # what the steps before the decay train at does not depend on where the run ends
    assert [replace(held, max_steps=140).lr(s) for s in range(76)] == lrs[:76]
    with pytest.raises(ConfigError, match="cooldown"):
        replace(cosine, cooldown=1.5)


@pytest.mark.parametrize("start", [0, 33, 35])
def test_steps_within_counts_the_cost_after_a_start(start):
    probe = Probe(step_s={"bf16": 0.1}, eval_s=0.7, save_s=0.3, precisions=("bf16",))

    def cost(n):
        return run_cost(n, 0.1, 0.7, 0.3, 7, 5, start)

    n = steps_within(10.0, probe, precision="bf16", eval_every=7, checkpoint_every=5, start=start)
    assert n > start and cost(n) <= 10.0 < cost(n + 1)
    assert steps_within(0.0, probe, precision="bf16", eval_every=7, checkpoint_every=5, start=start) == start
    if start % 35 == 0:  # on both grids, the cost after `start` is the whole cost less the cost before it
        assert cost(70) == pytest.approx(
            run_cost(70, 0.1, 0.7, 0.3, 7, 5) - run_cost(start, 0.1, 0.7, 0.3, 7, 5)
        )


class Clock:
    "A stand-in for the `time` module of gptlib.probe: seconds pass only when a test says so."

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


def planned(budget: Budget, probe: Probe, precision: str, steps: int) -> Budget:
    "`budget` as `Budget.plan` leaves it, for a plan of `steps` steps made from `probe` in one process."
    budget.probe, budget.precision, budget.dist, budget.planned = probe, precision, ONE_PROCESS, steps
    return budget


def test_a_replan_moves_the_end_to_what_fits_while_the_rate_holds(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(gptlib.probe, "time", clock)
    probe = Probe(step_s={"bf16": 0.1}, eval_s=1.0, save_s=0.5, precisions=("bf16",))
    cfg = TrainConfig.preset(
        "tiny", budget=1.0, max_steps=500, warmup_steps=5, cooldown=0.25, eval_every=100, checkpoint_every=100
    )
    said, saved = [], []
    plan = planned(Budget(1.0, clock.now), probe, "bf16", 500)

    def log_line(cfg, step, step_s):  # the loop's call, `step_s` seconds a step since the last one
        clock.now += 10 * step_s
        moved, line = plan.replan(cfg, step, step_s)
        if moved is not cfg or line:  # what the loop does with it: config.json, and a line at the decay
            saved.append(moved.to_dict())
        if line:
            said.append(((step, line), {"max_steps": moved.max_steps, "precision": "bf16"}))
        return moved

    # steps twice as fast as the probe's: the first interval is left out, the next five set the rate
    for step in range(10, 60, 10):
        assert log_line(cfg, step, 0.05) is cfg  # too few intervals yet: the plan stands
    faster = log_line(cfg, 60, 0.05)
    left = 60 - (clock.now - 1000.0)
    assert faster.max_steps > 500 and saved[-1]["max_steps"] == faster.max_steps
    assert run_cost(faster.max_steps, 0.05, 1.0, 0.5, 100, 100, 60) <= left
    assert run_cost(faster.max_steps + 1, 0.05, 1.0, 0.5, 100, 100, 60) > left
    # at step 100, its own validation and checkpoint are still to come: they count against the time left
    cfg = faster
    for step in range(70, 110, 10):
        cfg = log_line(cfg, step, 0.05)
    left = 60 - (clock.now - 1000.0) - 1.5
    assert run_cost(cfg.max_steps, 0.05, 1.0, 0.5, 100, 100, 100) <= left
    assert run_cost(cfg.max_steps + 1, 0.05, 1.0, 0.5, 100, 100, 100) > left
    # the machine slows down: the end comes closer, never before the steps already taken at max_lr
    for step in range(110, 400, 10):
        cfg = log_line(cfg, step, 0.5)
        assert cfg.decay_start() >= step or said
    assert said, "the decay never began"
    (step, line), details = said[0]
    assert step > cfg.decay_start() and details == {"max_steps": cfg.max_steps, "precision": "bf16"}
    assert f"the run ends at step {cfg.max_steps:,d} (the probe planned 500" in line
    assert saved[-1]["max_steps"] == cfg.max_steps
    assert log_line(cfg, step + 10, 0.01) is cfg and len(said) == 1  # fixed once the decay has begun


def test_a_replan_past_the_time_begins_the_decay_at_once(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(gptlib.probe, "time", clock)
    probe = Probe(step_s={"fp32": 0.1}, eval_s=0.0, save_s=0.0, precisions=("fp32",))
    cfg = TrainConfig.preset("tiny", budget=0.5, max_steps=300, warmup_steps=5, cooldown=0.5)
    plan = planned(Budget(0.5, clock.now), probe, "fp32", 300)
    for step in range(10, 60, 10):
        plan.replan(cfg, step, 0.1)
    clock.now += 3600.0  # an hour past the budget
    late, _ = plan.replan(cfg, 60, 0.1)
    assert late.decay_start() == 60  # the steps taken stay at max_lr; the rest is the decay
    short = replace(cfg, max_steps=3)  # shorter than its warmup: its warmup's slope is its end's
    assert plan.replan(short, 2, 0.1) == (short, None)


@pytest.mark.parametrize("resume", [False, True])
def test_a_budget_run_whose_probe_was_wrong_moves_its_end_and_equals_a_rerun_of_its_final_steps(
    small_data, tmp_path, monkeypatch, resume
):
    """A probe that says 0.2 s a step, several times a tiny step's real time with its logging (a host that
    sped up after the probe): the run moves its end while max_lr holds, and is bit for bit the run a rerun
    told its final steps computes; the end is said, saved with the run and in its checkpoints. Stopped
    during the hold and resumed, a run keeps its checkpoint's end (moved already) and still equals a rerun."""
    slow = Probe(step_s={"fp32": 0.2}, eval_s=0.05, save_s=0.05, precisions=("fp32",))
    monkeypatch.setattr("gptlib.train.measure", lambda *args, **kwargs: slow)
    cfg = tiny(small_data, tmp_path / "budget", budget=0.1, cooldown=0.2)
    history = train(cfg, until_step=8 if resume else None, log=None, progress=False)
    planned = [r for r in history if r["kind"] == "event" and "max_steps" in r][0]["max_steps"]
    if resume:
        moved = read_checkpoint_meta(list_checkpoints(cfg.out)[-1])["config"]["max_steps"]
        assert history[-1].get("stopped") and moved > planned, (planned, moved)
        history = train(cfg, log=None, progress=False)
        final = history[-1]["step"]
        assert final == moved and not any("the decay began" in r.get("message", "") for r in history)
    else:
        plans = [r for r in history if r["kind"] == "event" and "max_steps" in r]
        final = plans[-1]["max_steps"]
        assert final > planned, (planned, final)
        assert f"the run ends at step {final:,d} (the probe planned {planned:,d}" in plans[-1]["message"]
        assert json.loads((Path(cfg.out) / "config.json").read_text())["max_steps"] == final
    assert losses(history)[-1][0] == final
    assert read_checkpoint_meta(list_checkpoints(cfg.out)[-1])["config"]["max_steps"] == final
    rerun = train(
        replace(cfg, out=str(tmp_path / "rerun"), budget=0.0, max_steps=final), log=None, progress=False
    )
    assert losses(rerun) == losses(history)
    val = [(r["step"], r["val_loss"]) for r in history if r["kind"] == "val"]
    assert val == [(r["step"], r["val_loss"]) for r in rerun if r["kind"] == "val"]


def test_a_whole_run_cosine_moves_its_end_at_the_last_log_line_of_its_warmup(
    small_data, tmp_path, monkeypatch
):
    """A schedule that decays from the end of its warmup (`cooldown` 1, the `gpt-25m` preset's) holds no step
    at max_lr, but its warmup's steps do not depend on the end either: a probe that was wrong (on a GPU, eager
    steps slower than the compiled run's) is corrected at the warmup's last log line, from the intervals
    there are, and the run is the run of its final steps, bit for bit."""
    slow = Probe(step_s={"fp32": 0.2}, eval_s=0.05, save_s=0.05, precisions=("fp32",))
    monkeypatch.setattr("gptlib.train.measure", lambda *args, **kwargs: slow)
    cfg = tiny(small_data, tmp_path / "budget", budget=0.1, cooldown=1.0, warmup_steps=8, log_every=2)
    history = train(cfg, log=None, progress=False)
    plans = [r for r in history if r["kind"] == "event" and "max_steps" in r]
    planned, final = plans[0]["max_steps"], plans[-1]["max_steps"]
    assert final > planned and "the decay began at step 8" in plans[-1]["message"], plans
    assert losses(history)[-1][0] == final
    rerun = train(
        replace(cfg, out=str(tmp_path / "rerun"), budget=0.0, max_steps=final), log=None, progress=False
    )
    assert losses(rerun) == losses(history)


# --- the precision from real steps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("times", "expected"),
    [({"fp32": 0.30, "bf16": 0.10}, "bf16"), ({"fp32": 0.10, "bf16": 0.095}, "fp32")],
)
def test_auto_keeps_the_faster_timed_step_and_says_so(small_data, tmp_path, monkeypatch, times, expected):
    monkeypatch.setattr(gptlib.probe, "time_steps", lambda steps, most: dict(times))
    cfg = tiny(small_data, tmp_path / "run", precision="auto", max_steps=4)
    history = train(cfg, log=None, progress=False)
    start = start_of(history)
    assert start["precision"] == expected
    assert "fp32 300 ms" in start["message"] or "fp32 100 ms" in start["message"]  # the times it chose on
    meta = read_checkpoint_meta(list_checkpoints(cfg.out)[-1])
    assert meta["precision"] == expected and recorded(meta).step_s == times
    assert read_metrics(cfg.out)[-1]["step"] == 4


def test_fp16_on_a_cpu_without_fp16_units_is_warned_with_its_measured_cost(small_data, tmp_path, monkeypatch):
    import gptlib.optim

    monkeypatch.setattr(gptlib.probe, "cpu_features", lambda: ())
    monkeypatch.setattr(gptlib.optim, "cpu_features", lambda *a: ())
    monkeypatch.setattr(gptlib.probe, "time_steps", lambda steps, most: {"fp16": 2.1, "fp32": 0.1})
    history = train(
        tiny(small_data, tmp_path / "run", precision="fp16", max_steps=2), log=None, progress=False
    )
    message = start_of(history)["message"]
    assert "no fp16 units" in message and "21.0x fp32's" in message, message


def test_run_hands_its_budget_to_the_pipeline(monkeypatch, shakespeare_texts):
    import gptlib.cli.run
    from gptlib.errors import GptlibError

    asked = []

    def run_pipeline(preset, **kwargs):
        asked.append((preset, kwargs["config"]))
        raise GptlibError("stop here")  # the stages themselves are the pipeline's tests

    monkeypatch.setattr(gptlib.cli.run, "run_pipeline", run_pipeline)
    assert cli_main(["run", "--budget", "8"]) == 2
    assert cli_main(["run", "--preset", "tiny"]) == 2
    assert asked == [("cpu", TrainConfig.preset("cpu", budget=8.0)), ("tiny", TrainConfig.preset("tiny"))]


@pytest.mark.slow
def test_every_rank_of_a_torchrun_group_plans_the_same_budget(small_data, tmp_path):
    """Each rank times its own steps; the times and the set-up's seconds are shared before anything is
    decided, so every rank trains in one precision for one number of steps (else the group would hang at
    the first collective one rank skips)."""
    import os
    import subprocess
    import sys

    flags = {
        "shards": small_data / "shards",
        "tokenizer": small_data / "tokenizer",
        "out": tmp_path / "two",
        "vocab-size": 300,
        "context": 32,
        "micro-batch": 4,
        "eval-every": 6,
        "eval-batches": 2,
        "checkpoint-every": 6,
        "budget": 0.4,  # starting a group takes seconds on a busy machine
        "cooldown": 0.5,  # so that the ranks re-plan the end as they go, and must agree on it
        "precision": "auto",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "gptlib",
    ]
    cmd += ["train", "start", "--preset", "tiny", *(f"--{k}={v}" for k, v in flags.items())]
    # no progress bar: a failing rank's own lines, not the bar's, are what stderr's tail keeps
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    repo = Path(__file__).resolve().parent.parent
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(tmp_path / "two")
    plans = [r for r in records if r["kind"] == "event" and "max_steps" in r]  # the start's, the final one
    assert "cpu x 2" in plans[0]["message"] and "budget 0.4 min" in plans[0]["message"]
    assert [r["step"] for r in records if r["kind"] == "train"][-1] == plans[-1]["max_steps"]
    assert read_checkpoint_meta(list_checkpoints(tmp_path / "two")[-1])["world_size"] == 2


def test_the_first_line_names_a_gpus_tensor_cores_where_it_named_none(monkeypatch):
    """On a GPU the probe's line said "no bf16/fp16 units" of an H200, which has both: it names the GPU and
    the tensor cores `choose_precision` decides by (the device faked: no GPU here)."""
    import gptlib.probe

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    features = gptlib.probe.hardware_features("cuda")
    assert features == ("NVIDIA H200", "fp16_tensor_cores", "bf16_tensor_cores")
    probe = Probe(step_s={"bf16": 0.012}, features=features, precisions=("bf16",))
    line = describe(probe, "bf16", times=True, max_steps=100, budget_min=1.0)
    assert "bf16 12 ms (NVIDIA H200, fp16_tensor_cores, bf16_tensor_cores)" in line, line
    assert "no bf16/fp16 units" not in line


def test_a_cpu_runs_plan_is_not_called_compiled_when_its_probe_timed_eager_steps():
    "A CPU's probe times eager steps only: the first line names the step it planned at as what it was."
    from gptlib.probe import describe

    eager = Probe(step_s={"bf16": 0.149}, eval_s=1.9, save_s=0.1, precisions=("bf16",))
    line = describe(eager, "bf16", times=False, max_steps=3454, budget_min=9, compiled=True)
    assert "3,454 steps of 149 ms, " in line
    timed = Probe(
        step_s={"bf16": 0.149}, eval_s=1.9, save_s=0.1, precisions=("bf16",), compiled_s={"bf16": 0.12}
    )
    line = describe(timed, "bf16", times=False, max_steps=3454, budget_min=9, compiled=True)
    assert "3,454 steps of 120 ms compiled, " in line
