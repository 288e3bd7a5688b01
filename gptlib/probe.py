"""A new run's probe: real steps timed, the precision chosen, a time budget made steps.

Hand-written plumbing, not generated from a notebook: 06_training shows what the probe says; timing is
bookkeeping. A training step's time is a property of the machine, not of the recipe: the same `cpu` preset
takes 0.2 s a step on one 2-core CPU and 0.34 s on another. So a run that must fit a time, or choose between
bf16 and fp32, measures the step it will take rather than guessing it from a proxy (one matrix product
says bf16 is twice as fast on a CPU whose real bf16 steps are no faster at a small shape).

- `measure(cfg, dist, budget, build=..., folder=...)`: before a new run's first step, a few of its real steps
  timed (its model, batch, context, precision, wrapped for DDP when it is; eager even when the run compiles),
  in each precision worth timing, on copies of the model and optimizer built by the run's own set-up under
  a fork of the random generators: the run itself then computes exactly what it would have computed
  without the probe. With a budget, one validation and one checkpoint are timed as well. The result is a
  `Probe`, recorded with the run (its first log record and every checkpoint), so that a resume decides as
  the run began (`recorded(meta)`);
- `precisions_to_time(requested, device, budget)`: which precisions are worth a step: fp32 and bf16 when a
  CPU's `auto` must choose, a 16-bit format asked for on a CPU beside fp32 (so that a warning can say what
  it costs when it is the slower), the one precision that will run when only the budget needs a time;
- `steps_within(budget_s, probe, ...)`: the most optimizer steps whose steps, validations and checkpoints
  fit `budget_s` seconds (a pure function of the probe's times);
- `Budget`: a new run's minutes, made once (`Budget.of(cfg, started)`); `plan` sets `max_steps` from the
  probe's times and what is left once the set-up and the probe are done, so that warmup and the decay end
  when the time does; `replan` moves the end as the run goes, while its learning rate holds, to what fits
  at the rate of its own latest steps. `resumed_config(cfg, meta)` keeps the steps a resumed run was
  planned with;
- `describe(...)`, `start_line(...)`: the probe and the plan in words, and the run's first log line.
"""

from __future__ import annotations

import math
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from .errors import ConfigError
from .files import temporary_name
from .optim import CPU_UNITS, _tensor_cores, choose_precision, cpu_features  # one rule for tensor cores
from .run_folder import save_checkpoint

__all__ = [
    "Probe",
    "WARMUP_STEPS",
    "TIMED_STEPS",
    "hardware_features",
    "precisions_to_time",
    "time_steps",
    "measure",
    "run_cost",
    "steps_within",
    "Budget",
    "resumed_config",
    "recorded",
    "describe",
    "start_line",
]

WARMUP_STEPS = 2  # untimed: the first steps allocate, pick their kernels and (bf16 on a CPU) pack weights
TIMED_STEPS = 5  # per precision; the median, so that one step disturbed by other work does not decide
MAX_TIMING_S = 20.0  # the timed rounds stop early past this (a slow format such as fp16 without units)
# a precision whose first step takes this many times the fastest first step cannot be the faster one (first
# steps carry their own warm-up, so the fastest's is no faster than its later ones): it is timed no further.
# A CPU without bf16 units (AMD EPYC Zen 2: avx2 only) took 19.6 s a bf16 step against fp32's 0.56 s, and
# timing its warm-up and two rounds in full cost 80 s of a 9-minute budget
HOPELESS = 5.0
EVAL_TIMED_BATCHES = 3  # validation batches timed; a validation's time is their mean times its batch count


@dataclass(frozen=True)
class Probe:
    """What a new run measured before its first step. Times are seconds on this machine (averaged over the
    ranks of a torchrun group, so that every rank plans the same run)."""

    step_s: dict[str, float]  # one optimizer step (all its micro-batches), per precision timed: the median
    features: tuple[str, ...] = ()  # the CPU's bf16/fp16 units, or a GPU's name and tensor cores
    eval_s: float = 0.0  # one validation of `eval_batches` batches (every window when 0); 0: not timed
    save_s: float = 0.0  # one checkpoint written; 0: not timed
    precisions: tuple[str, ...] = ()  # the order the precisions were timed in

    def to_dict(self) -> dict:
        "As JSON: what the run's start record and its checkpoints hold."
        return {**asdict(self), "features": list(self.features), "precisions": list(self.precisions)}

    @classmethod
    def from_dict(cls, d: dict) -> Probe:
        "The probe a run recorded (`to_dict`)."
        return cls(
            step_s={str(k): float(v) for k, v in d["step_s"].items()},
            features=tuple(d.get("features", ())),
            eval_s=float(d.get("eval_s", 0.0)),
            save_s=float(d.get("save_s", 0.0)),
            precisions=tuple(d.get("precisions", d["step_s"])),
        )


def recorded(meta: dict) -> Probe | None:
    "The probe a checkpoint's metadata `meta` recorded, or None (a run that needed none, or saved before)."
    return Probe.from_dict(meta["probe"]) if isinstance(meta.get("probe"), dict) else None


def hardware_features(device) -> tuple[str, ...]:
    """What the first log line names of the hardware the steps were timed on: a CPU's bf16/fp16 units
    (`gptlib.optim.cpu_features`), a CUDA GPU's name and 16-bit tensor cores (the ones `choose_precision`
    decides by), nothing elsewhere."""
    device = torch.device(device)
    if device.type == "cpu":
        return cpu_features()
    if device.type == "cuda":
        return (torch.cuda.get_device_name(device), *_tensor_cores(device))
    return ()


def precisions_to_time(requested: str, device, budget: bool) -> tuple[str, ...]:
    """The precisions whose steps a new run should time; () when nothing is to be decided: a precision that
    was asked for and is not suspect, and no budget that needs the step's time."""
    device = torch.device(device)
    if device.type == "cpu":
        if requested == "auto":  # the choice itself: bf16 pays only where its steps are faster here
            return ("fp32", "bf16")
        if requested in CPU_UNITS:
            # a 16-bit format is timed beside fp32, so that the warning can give what it costs: without units
            # for it oneDNN converts to fp32 and back, and units may still lose to fp32 at the run's shape
            # (bf16 runs 0.7x fp32's speed on an Intel Xeon whose AMX is hidden, avx512_bf16 alone)
            return (requested, "fp32")
        return (requested,) if budget else ()
    # a GPU's (or MPS's) precision follows from its hardware: a step is timed only for a budget
    return (choose_precision(device, requested).name,) if budget else ()


def time_steps(steps: dict, most=None) -> dict[str, float]:
    """Seconds per call of each of `steps` (precision -> a function running one optimizer step): the
    median of up to TIMED_STEPS rounds, after WARMUP_STEPS untimed ones. The precisions take turns
    within each round, so that other work on a shared machine slows them alike. A precision whose first
    step took HOPELESS times the fastest first step stops there: its time is that step's.

    In a torchrun group each step is a collective (DDP averages the gradients), so every rank must call
    each step as often as the others, or one would wait for the rest forever: `most(values)` gives each of
    `values` at its largest over the ranks (`_most_on_every_rank`; None: one process), and the two choices
    that depend on a clock, which precisions are hopeless and when the rounds stop, are made on those."""
    most = most or (lambda values: values)
    first = dict(zip(steps, most([_timed(run_step) for run_step in steps.values()])))
    hopeless = {name: s for name, s in first.items() if s > HOPELESS * min(first.values())}
    started = time.perf_counter()  # MAX_TIMING_S counts the steps still to time
    timed = {name: run_step for name, run_step in steps.items() if name not in hopeless}
    for _ in range(WARMUP_STEPS - 1):
        for run_step in timed.values():
            run_step()
    times = {name: [] for name in timed}
    for rounds in range(1, TIMED_STEPS + 1):
        for name, run_step in timed.items():
            times[name].append(_timed(run_step))
        if rounds >= 2 and most([time.perf_counter() - started])[0] > MAX_TIMING_S:
            break
    return {name: hopeless[name] if name in hopeless else statistics.median(times[name]) for name in steps}


def _timed(function) -> float:
    "Seconds `function()` takes."
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


def measure(cfg, dist, budget: Budget | None, *, build, folder) -> Probe | None:
    """Time real training steps of the new run `cfg` (see the module docstring) in each precision worth timing
    (`precisions_to_time`); None when nothing depends on them (a precision asked for and no budget). The
    caller (`gptlib.train.train`) hands in its own set-up, so that what is timed is what the run does:
    `build(precision)` is a fresh `gptlib.train.Training` of the run in that precision (model, optimizer,
    scaler, loader, validation split, and `forward`, DDP-wrapped as the run's, never compiled), whose
    `step(batches, lr, cfg)` and `validate(cfg, dist, n)` are the run's own. Eager: compiling every copy would
    cost a compile per precision (half a minute each from an empty cache), and a compiled run's own steps,
    faster than the probe's, move its end while its rate holds (`Budget.replan`).

    With a `budget`, a validation and a checkpoint (written under a temporary name in `folder`, then removed)
    are timed too. Every random generator is restored afterwards: the copies' initial weights, dropout and
    batches leave no trace in the run."""
    device = dist.device
    precisions = precisions_to_time(cfg.precision, device, budget is not None)
    if not precisions:
        return None
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        trials = {name: build(name) for name in precisions}
        try:
            steps = {name: _finished(device, cfg, t) for name, t in trials.items()}
            step_s = time_steps(steps, most=lambda values: _most_on_every_rank(dist, values))
            step_s = _same_on_every_rank(dist, step_s)
            eval_s = save_s = 0.0
            if budget is not None:
                chosen = trials[_chosen(cfg, device, step_s)]
                chosen.validate(cfg, dist, 1)  # warm: the first forward pass in eval mode picks its kernels
                n, batches = EVAL_TIMED_BATCHES, len(chosen.val_batches(cfg, dist))  # the loader's count
                eval_s = _timed(lambda: chosen.validate(cfg, dist, n)) / n * batches
                save_s = _save_seconds(chosen, folder) if dist.is_main else 0.0
                eval_s, save_s = _eval_and_save_on_every_rank(dist, eval_s, save_s)
        finally:
            for training in trials.values():
                training.loader.close()  # worker processes, if the run reads with them
    return Probe(
        step_s=step_s,
        features=hardware_features(device),
        eval_s=eval_s,
        save_s=save_s,
        precisions=tuple(precisions),
    )


def _finished(device, cfg, training):
    """One optimizer step of `training`, as the run's loop takes it (at the first step's learning rate), that
    returns when the device has done it: a GPU runs its kernels after the call has returned (the run's
    loop reads nothing back between steps), so it is waited for."""
    batches = iter(training.loader)

    def run_step() -> None:
        training.step(batches, cfg.lr(0), cfg)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return run_step


def _chosen(cfg, device, step_s: dict[str, float]) -> str:
    "The precision the run will train in, decided from the measured steps as its set-up will decide it."
    return choose_precision(device, cfg.precision, step_seconds=step_s if device.type == "cpu" else None).name


def _save_seconds(training, folder) -> float:
    """Seconds to write one checkpoint of `training` (its weights, AdamW's moments and the scaler) under a
    temporary name in `folder`, removed afterwards (or, after a kill, at the run folder's next opening)."""
    scratch = temporary_name(Path(folder) / "probe")
    scratch.mkdir(parents=True)
    try:
        state = {"optimizer": training.optimizer.state_dict(), "scaler": training.scaler.state_dict()}
        return _timed(lambda: save_checkpoint(scratch, 0, training.model, state, {"val_loss": None}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _same_on_every_rank(dist, step_s: dict[str, float]) -> dict[str, float]:
    "The step times averaged over the ranks: each rank then chooses the same precision and the same steps."
    if dist.world_size == 1:
        return step_s
    names = sorted(step_s)
    total = dist.all_reduce_sum(torch.tensor([step_s[n] for n in names], dtype=torch.float64).to(dist.device))
    return {n: float(t) / dist.world_size for n, t in zip(names, total.tolist())}


def _eval_and_save_on_every_rank(dist, eval_s: float, save_s: float) -> tuple[float, float]:
    "The validation time averaged over the ranks, and rank 0's checkpoint time (only rank 0 writes)."
    if dist.world_size == 1:
        return eval_s, save_s
    total = dist.all_reduce_sum(torch.tensor([eval_s, save_s], dtype=torch.float64).to(dist.device))
    return float(total[0]) / dist.world_size, float(total[1])


def run_cost(
    n: int,
    step_s: float,
    eval_s: float,
    save_s: float,
    eval_every: int,
    checkpoint_every: int,
    start: int = 0,
):
    """Seconds of the optimizer steps after `start` up to step `n`, with their validations and checkpoints:
    one of each every `eval_every` and `checkpoint_every` steps, and one more at the end when `n` is not a
    multiple (the loop's rule)."""
    evals = math.ceil(n / eval_every) - start // eval_every
    saves = math.ceil(n / checkpoint_every) - start // checkpoint_every
    return (n - start) * step_s + evals * eval_s + saves * save_s


def steps_within(
    budget_s: float, probe: Probe, *, precision: str, eval_every: int, checkpoint_every: int, start: int = 0
) -> int:
    """The last step of a run whose optimizer steps after `start`, with their validations and checkpoints, fit
    `budget_s` seconds in `precision` at the probe's times; `start` when not one more step fits."""
    step_s = probe.step_s[precision]

    def cost(n: int) -> float:
        return run_cost(n, step_s, probe.eval_s, probe.save_s, eval_every, checkpoint_every, start)

    per_step = step_s + probe.eval_s / eval_every + probe.save_s / checkpoint_every
    # the averaged cost first; the exact one counts the extras at the end
    n = start + max(0, int(budget_s / per_step))
    while n > start and cost(n) > budget_s:
        n -= 1
    while cost(n + 1) <= budget_s:
        n += 1
    return n


REPLAN_WINDOWS = 5  # log intervals whose step times set a re-plan's rate: their median, as in the probe


class Budget:
    """A new run's time budget: `minutes` of training, counted from `started` (`time.perf_counter()` when the
    run began: its set-up and probe spend from it). `Budget.of` makes it: where a run's start asks whether it
    has a budget (`TrainConfig.budget`, checked as the config was made: 0 is none, at most a year). A resumed
    run has none: it keeps the steps its checkpoint planned (`resumed_config`).

    - `plan(cfg, probe, precision, dist)`: `cfg` with `max_steps` set to the steps, validations and
      checkpoints that fit what is left once the set-up and the probe are done (the most any rank spent, so
      that all plan the same run): its decay then ends when the time does;
    - `replan(cfg, step, step_s)`: while no step already taken depends on the end (through the warmup, and
      the hold at max_lr when `cooldown` < 1), the end moved at each log line to what fits the rest at the
      rate of the run's latest steps. The probe's few steps can be wrong
      for the rest of the run: a host whose speed drifts (by a third in minutes, on this project's
      machines), or compiled steps faster than the probe's eager ones. The move is exact because every step
      before the decay trains at max_lr whatever the end (warmup-stable-decay): a move changes nothing the
      run has computed, so the run is the run of its final `max_steps`, which a rerun with `--max-steps`
      reproduces bit for bit. Once the decay has begun, the end is fixed. The warmup's steps do not depend
      on the end either, so a whole-run cosine (`cooldown` 1) re-plans too, at the last log line of its
      warmup, from the intervals it has."""

    def __init__(self, minutes: float, started: float):
        self.minutes, self.started = minutes, started
        self.probe = self.precision = self.dist = None  # set by `plan`
        self.planned = None  # the probe's plan (max_steps), for the line that fixes the end
        self.recent: list[float] = []  # the step seconds of the last log intervals
        self.windows = 0  # log intervals seen
        self.fixed = False

    @classmethod
    def of(cls, cfg, started: float) -> Budget | None:
        "The budget of a new run of `cfg` begun at `started`, or None (`cfg.budget` 0: `max_steps` as given)."
        if not cfg.budget:
            return None
        if cfg.decay_steps:  # the budget decides where the cosine ends: a second answer would contradict it
            raise ConfigError("--budget sets where the learning-rate decay ends: leave --decay-steps at 0")
        return cls(cfg.budget, started)

    def spent(self) -> float:
        "Seconds of the budget spent so far (the most over the ranks, so that all plan the same run)."
        return _most_on_any_rank(self.dist, time.perf_counter() - self.started)

    def left(self) -> float:
        "Seconds of the budget left now."
        return self.minutes * 60 - self.spent()

    def plan(self, cfg, probe: Probe, precision: str, dist):
        "`cfg` with the `max_steps` that fit the budget in `precision` at the probe's times (see the class)."
        assert precision in probe.step_s, "a budget needs the probe's time of this precision"
        self.probe, self.precision, self.dist = probe, precision, dist
        left = self.left()
        steps = steps_within(
            left, probe, precision=precision, eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every
        )
        if steps < 1:
            raise ConfigError(
                f"a budget of {self.minutes:g} min fits no training step: the set-up took "
                f"{self.minutes * 60 - left:.1f} s and a step takes {probe.step_s[precision]:.2f} s here"
            )
        self.planned = steps
        return replace(cfg, max_steps=steps)

    def replan(self, cfg, step: int, step_s: float):
        """`(cfg, line)`: `cfg` with the end that fits, after `step` steps, the latest of them `step_s`
        seconds each (this rank's); `line` says where the run ends once the decay has begun (else None).
        Called at the same steps on every rank (its log lines), which all plan the same end."""
        if self.fixed:
            return cfg, None
        if step > cfg.decay_start() or step >= cfg.max_steps:  # the decay has begun: say where the run ends
            self.fixed = True
            return cfg, self._fixed_line(cfg)
        if cfg.max_steps < cfg.warmup_steps:  # shorter than its warmup, whose slope then depends on the end
            return cfg, None
        self.windows += 1
        if self.windows > 1:  # the first interval is the run's first steps: they allocate and warm up
            self.recent = (self.recent + [step_s])[-REPLAN_WINDOWS:]
        # the rate of the last REPLAN_WINDOWS intervals; fewer at the last log line before the decay begins (a
        # whole-run cosine holds only through its warmup: on a GPU, compiled steps faster than the probe's)
        last_chance = step + cfg.log_every > cfg.decay_start()
        if len(self.recent) < (1 if last_chance else REPLAN_WINDOWS):
            return cfg, None
        rate = _most_on_any_rank(self.dist, statistics.median(self.recent))
        # this step's own validation and checkpoint, if it has them, come after this call
        pending = step % cfg.eval_every == 0, step % cfg.checkpoint_every == 0
        left = self.left() - pending[0] * self.probe.eval_s - pending[1] * self.probe.save_s
        end = steps_within(
            left,
            replace(self.probe, step_s={self.precision: rate}),
            precision=self.precision,
            eval_every=cfg.eval_every,
            checkpoint_every=cfg.checkpoint_every,
            start=step,
        )
        end = max(end, step + 1, cfg.warmup_steps)  # the warmup's slope stays the one its steps trained at
        while cfg.decay_start(end) < step:  # slower than the time left allows: the decay begins now
            end += 1
        return (cfg if end == cfg.max_steps else replace(cfg, max_steps=end)), None

    def _fixed_line(self, cfg) -> str:
        line = (
            f"budget: the decay began at step {cfg.decay_start():,d}, the run ends at step {cfg.max_steps:,d}"
        )
        if not self.recent:  # the decay began before enough steps were timed to re-plan
            return f"{line} (as planned)"
        rate, probed = statistics.median(self.recent), self.probe.step_s[self.precision]
        moved = "as planned" if cfg.max_steps == self.planned else f"the probe planned {self.planned:,d}"
        return f"{line} ({moved}: steps took {rate * 1e3:,.0f} ms, the probe's {probed * 1e3:,.0f} ms)"


def _most_on_any_rank(dist, seconds: float) -> float:
    "The largest of every rank's `seconds`."
    return _most_on_every_rank(dist, [seconds])[0]


def _most_on_every_rank(dist, values: list[float]) -> list[float]:
    """Each of `values` at its largest over the ranks (gloo has no max: each rank sums its own into its
    row, and the rows' maximum is taken)."""
    if dist.world_size == 1:
        return list(values)
    shares = torch.zeros(dist.world_size, len(values), dtype=torch.float64)
    shares[dist.rank] = torch.tensor(values, dtype=torch.float64)
    return dist.all_reduce_sum(shares.to(dist.device)).max(dim=0).values.tolist()


def resumed_config(cfg, meta: dict):
    """`cfg` for a run that resumes from a checkpoint with metadata `meta`: a run planned by a budget keeps
    the budget, the steps and so the schedule its checkpoint holds (its start's plan, or the last move of
    its end before the checkpoint: `Budget.replan`), whatever budget the resuming command gives (or none:
    `train start` without `--budget`), never a new plan from a new measurement."""
    saved = meta.get("config") or {}
    if not saved.get("budget") or "max_steps" not in saved:
        return cfg
    planned = {"budget": saved["budget"], "max_steps": saved["max_steps"]}
    return replace(cfg, **planned, decay_steps=saved.get("decay_steps", 0))


def describe(probe: Probe, precision: str, *, times: bool, max_steps: int, budget_min: float) -> str:
    """The probe in words, for the run's first log line: with `times`, the step times and the CPU's units
    (where the precision's reason does not already give them: a precision asked for, a resumed run), and
    what a budget made of them; "" when there is nothing to add."""
    parts = []
    if times:
        measured = ", ".join(f"{name} {probe.step_s[name] * 1e3:,.0f} ms" for name in probe.precisions)
        parts.append(f"probe: a step takes {measured} ({', '.join(probe.features) or 'no bf16/fp16 units'})")
    if budget_min:
        steps = f"{max_steps:,d} step{'s' if max_steps != 1 else ''}"
        parts.append(
            f"budget {budget_min:g} min: {steps} of {probe.step_s[precision] * 1e3:,.0f} ms, "
            f"validations of {probe.eval_s:.1f} s, checkpoints of {probe.save_s:.1f} s"
        )
    return " | ".join(parts)


def start_line(cfg, dist, training, resumed, compiled: str, peak: tuple[float, str]) -> str:
    """What a run's first log line says: how it starts (`resumed`: the checkpoint's path, or None), the
    model's size, where and how it computes (`compiled`: `gptlib.runtime.training_module`'s note), the peak
    its MFU is measured against, and what its probe measured (the CPU's bf16/fp16 units, the step times) and
    made of a budget."""
    model, precision = training.model, training.precision
    begun = f"new run (from the best checkpoint of {cfg.init_from})" if cfg.init_from else "new run"
    line = (
        f"{begun if resumed is None else f'resuming from {resumed.name}'} in {Path(cfg.out)} | "
        f"{model.num_params(False):,d} parameters | {dist.device} x {dist.world_size} | "
        f"{precision.name} ({precision.reason}) | {compiled} | "
        f"{cfg.micro_batch * cfg.grad_accum * cfg.context * dist.world_size:,d} tokens/step | "
        f"peak {peak[0] / 1e9:,.0f} GFLOP/s ({peak[1]})"
    )
    if training.probe is None:
        return line
    # auto's reason gives the times it chose on; a precision asked for, or a resume, gets them here
    times = resumed is not None or cfg.precision != "auto"
    plan = describe(
        training.probe, precision.name, times=times, max_steps=cfg.max_steps, budget_min=cfg.budget
    )
    return f"{line} | {plan}" if plan else line
