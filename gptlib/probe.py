"""A new run's probe: real steps timed; precision, a GPU's shape and a budget's steps chosen.

Hand-written plumbing, not generated from a notebook: 06_training shows what the probe says; timing is
bookkeeping. A training step's time is a property of the machine, not of the recipe: the same `cpu` preset
takes 0.2 s a step on one 2-core CPU and 0.34 s on another. So a run that must fit a time, or choose between
bf16 and fp32, measures the step it will take rather than guessing it from a proxy (one matrix product
says bf16 is twice as fast on a CPU whose real bf16 steps are no faster at a small shape).

- `measure(cfg, dist, budget, build=..., folder=...)`: before a new run's first step, a few of its real steps
  timed (its model, batch, context, precision, wrapped for DDP when it is), in each precision worth timing,
  on copies of the model and optimizer built by the run's own set-up under a fork of the random generators:
  the run itself then computes exactly what it would have computed without the probe. With a budget, one
  validation and one checkpoint are timed as well. The result is a `Probe`, recorded with the run (its first
  log record and every checkpoint), so that a resume decides as the run began (`recorded(meta)`);
- on a CUDA GPU with `precision=auto` the probe also chooses the run's shape (`search`): bf16 and fp16 steps
  (where the GPU has their tensor cores) at each micro-batch from the run's own up to its whole batch a
  process, doubling until one runs out of memory, `grad_accum` shrunk so that the batch stays the run's;
  then the chosen one compiled and timed again. `choose_shape` decides from those facts alone (a pure
  function, tested with a faked device table) and `chosen_config` makes the run's config of its choice. A
  GPU run that compiles, with a budget, times its compiled step too, so that its plan counts what it runs;
- `precisions_to_time(requested, device, budget)`: which precisions are worth a step: fp32 and bf16 when a
  CPU's `auto` must choose, a 16-bit format asked for on a CPU beside fp32 (so that a warning can say what
  it costs when it is the slower), a GPU's 16-bit formats for its `auto`, the one precision that will run
  when only the budget needs a time;
- `steps_within(budget_s, probe, ...)`: the most optimizer steps whose steps, validations and checkpoints
  fit `budget_s` seconds (a pure function of the probe's times);
- `Budget`: a new run's minutes, made once (`Budget.of(cfg, started)`); `plan` sets `max_steps` from the
  probe's times (compiled ones where the run compiles) and what is left once the set-up, the probe and the
  compiling are done, so that warmup and the decay end when the time does; `replan` moves the end as the
  run goes, while its learning rate holds, to what fits at the rate of its own latest steps.
  `resumed_config(cfg, meta)` keeps the steps (and a GPU's chosen shape) a resumed run was planned with;
- `describe(...)`, `start_line(...)`: the probe and the plan in words, and the run's first log line.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from .errors import ConfigError
from .files import temporary_name
from .optim import (  # one rule for tensor cores, one for the precision
    CPU_UNITS,
    STEP_TIME_NOISE,
    _tensor_cores,
    choose_precision,
    cpu_features,
)
from .run_folder import save_checkpoint
from .runtime import memory_bytes, training_module

__all__ = [
    "Trial",
    "Choice",
    "Probe",
    "MEMORY_MARGIN",
    "WARMUP_STEPS",
    "TIMED_STEPS",
    "hardware_features",
    "precisions_to_time",
    "tunes",
    "micro_batches",
    "compile_pays",
    "choose_shape",
    "chosen_config",
    "DeviceMemory",
    "time_steps",
    "search",
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
# the share of a GPU's memory a chosen micro-batch leaves free: the caching allocator's fragments, a
# validation's batches, a compiled graph's buffers and other processes on the GPU are not in a step's peak
MEMORY_MARGIN = 0.1


@dataclass(frozen=True)
class Trial:
    """One shape a GPU run's probe measured: `micro_batch` sequences a pass, `grad_accum` passes a step, in
    `precision`, eager or `compiled`. `step_s`: the median seconds of its optimizer step (None: not timed, as
    it did not fit); `memory`: the most bytes its step held, the model and optimizer included (0 where the
    device does not say; None: it ran out of memory)."""

    precision: str
    micro_batch: int
    grad_accum: int
    compiled: bool = False
    step_s: float | None = None
    memory: int | None = 0

    def fits(self, total: int | None) -> bool:
        "Whether the step ran and held at most 1 - MEMORY_MARGIN of `total` bytes (0 or None: not known)."
        if self.memory is None:
            return False
        return not total or self.memory <= (1 - MEMORY_MARGIN) * total

    @property
    def shape(self) -> str:
        return f"{self.micro_batch} x {self.grad_accum}"

    @classmethod
    def from_dict(cls, d: dict) -> Trial:
        "A trial as `asdict` wrote it, its fields checked."
        step_s, memory = d.get("step_s"), d.get("memory", 0)
        return cls(
            precision=str(d["precision"]),
            micro_batch=int(d["micro_batch"]),
            grad_accum=int(d["grad_accum"]),
            compiled=bool(d.get("compiled", False)),
            step_s=None if step_s is None else float(step_s),
            memory=None if memory is None else int(memory),
        )


@dataclass(frozen=True)
class Choice:
    "What a GPU run's probe chose: the precision, the micro-batch and accumulation, and whether to compile."

    precision: str
    micro_batch: int
    grad_accum: int
    compile: bool


@dataclass(frozen=True)
class Probe:
    """What a new run measured before its first step. Times are seconds on this machine (averaged over the
    ranks of a torchrun group, so that every rank plans the same run)."""

    step_s: dict[str, float]  # one optimizer step (all its micro-batches), per precision timed: the median
    features: tuple[str, ...] = ()  # the CPU's bf16/fp16 units, or a GPU's name and tensor cores
    eval_s: float = 0.0  # one validation of `eval_batches` batches (every window when 0); 0: not timed
    save_s: float = 0.0  # one checkpoint written; 0: not timed
    precisions: tuple[str, ...] = ()  # the order the precisions were timed in
    # a compiled step, per precision timed compiled (the run's, or on a GPU the chosen one's), and the seconds
    # torch.compile took on its first forward and backward pass: {} and 0 when nothing was compiled
    compiled_s: dict[str, float] = field(default_factory=dict)
    compile_s: float = 0.0
    # a GPU's `auto`: every shape measured, the device's memory (bytes) and what was chosen; (), 0 and None
    # elsewhere. `step_s` then holds the times at the chosen micro-batch
    trials: tuple[Trial, ...] = ()
    memory: int = 0
    choice: Choice | None = None

    def step_time(self, precision: str, compiled: bool = False) -> float:
        "Seconds of one step in `precision`: the compiled step's when `compiled` and the probe timed one."
        if compiled and precision in self.compiled_s:
            return self.compiled_s[precision]
        return self.step_s[precision]

    def to_dict(self) -> dict:
        "As JSON: what the run's start record and its checkpoints hold."
        return {
            **asdict(self),
            "features": list(self.features),
            "precisions": list(self.precisions),
            "trials": [asdict(t) for t in self.trials],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Probe:
        "The probe a run recorded (`to_dict`); one recorded before the GPU's choice has none."
        choice = d.get("choice")
        return cls(
            step_s={str(k): float(v) for k, v in d["step_s"].items()},
            features=tuple(d.get("features", ())),
            eval_s=float(d.get("eval_s", 0.0)),
            save_s=float(d.get("save_s", 0.0)),
            precisions=tuple(d.get("precisions", d["step_s"])),
            compiled_s={str(k): float(v) for k, v in d.get("compiled_s", {}).items()},
            compile_s=float(d.get("compile_s", 0.0)),
            trials=tuple(Trial.from_dict(t) for t in d.get("trials", ())),
            memory=int(d.get("memory", 0)),
            choice=None
            if choice is None
            else Choice(
                str(choice["precision"]),
                int(choice["micro_batch"]),
                int(choice["grad_accum"]),
                bool(choice["compile"]),
            ),
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
    if tunes(requested, device):  # a GPU's auto: each 16-bit format its tensor cores run (fp32 without any)
        cores = _tensor_cores(device)
        formats = (("bf16", "bf16_tensor_cores"), ("fp16", "fp16_tensor_cores"))
        return tuple(name for name, core in formats if core in cores) or ("fp32",)
    # a precision asked for on a GPU (or anything on MPS) follows from its hardware: timed only for a budget
    return (choose_precision(device, requested).name,) if budget else ()


def tunes(requested: str, device) -> bool:
    """Whether a new run's probe chooses its shape (`search`): on a CUDA GPU, when the precision is left to
    it (`auto`). A precision asked for keeps the run as configured: `--precision fp16` is the seed's run."""
    return torch.device(device).type == "cuda" and requested == "auto"


def micro_batches(micro_batch: int, grad_accum: int) -> tuple[int, ...]:
    """The micro-batches a GPU's probe tries, smallest first: the run's own, doubled while the doubled one
    still divides the sequences a process takes a step (`micro_batch * grad_accum`, which each one keeps)."""
    per_process, sizes = micro_batch * grad_accum, [micro_batch]
    while per_process % (2 * sizes[-1]) == 0:
        sizes.append(2 * sizes[-1])
    return tuple(sizes)


def compile_pays(eager_s: float, compiled_s: float, compile_s: float, steps: int) -> bool:
    """Whether compiling pays over a run of `steps` steps: a compiled step faster than an eager one by more
    than the noise of timings (STEP_TIME_NOISE), and the compiling plus the compiled steps shorter than the
    eager steps. Where a budget sets the steps, `steps` are those eager steps would fit: a compiled run
    shorter at that count fits more in the same minutes."""
    return compiled_s < (1 - STEP_TIME_NOISE) * eager_s and compile_s + steps * compiled_s < steps * eager_s


def choose_shape(
    trials,
    *,
    requested: str,
    features: tuple[str, ...],
    total_memory: int | None,
    steps: int,
    compile_s: float,
) -> Choice:
    """A GPU run's precision, micro-batch and compiling, from what its probe measured alone (`trials`, each a
    `Trial`; the device's `total_memory` in bytes, None or 0: not known; the GPU's tensor cores `features`,
    as `choose_precision` names them; the run's `steps`; `compile_s` seconds of compiling). Among the eager
    shapes that fit the memory with MEMORY_MARGIN to spare: at each micro-batch the precision
    `choose_precision` keeps from its step times there; then the largest micro-batch whose step is within
    STEP_TIME_NOISE of the fastest (a larger one is as fast or faster on a GPU, and the few percent between
    two timed steps are noise). Compiled when that shape's compiled trial fits and `compile_pays`."""
    eager = [t for t in trials if not t.compiled and t.step_s is not None and t.fits(total_memory)]
    if not eager:
        raise ConfigError(
            "no micro-batch of this run fits the GPU's memory: use a smaller --micro-batch or model"
        )
    at = {}  # micro-batch -> (precision kept there, its step's seconds)
    for mb in sorted({t.micro_batch for t in eager}):
        times = {t.precision: t.step_s for t in eager if t.micro_batch == mb}
        kept = choose_precision("cuda", requested, step_seconds=times, features=features).name
        if kept in times:  # a precision chosen by the cores, not timed here, leaves this micro-batch out
            at[mb] = kept, times[kept]
    if not at:
        raise ConfigError("the GPU's probe timed no step in the precision its tensor cores choose")
    fastest = min(seconds for _, seconds in at.values())
    mb = max(m for m, (_, seconds) in at.items() if seconds <= (1 + STEP_TIME_NOISE) * fastest)
    precision, eager_s = at[mb]
    grad_accum = next(t.grad_accum for t in eager if t.micro_batch == mb)
    compiled = [
        t
        for t in trials
        if t.compiled and t.precision == precision and t.micro_batch == mb and t.step_s is not None
    ]
    compiles = any(
        t.fits(total_memory) and compile_pays(eager_s, t.step_s, compile_s, steps) for t in compiled
    )
    return Choice(precision, mb, grad_accum, compiles)


def chosen_config(cfg, probe: Probe | None):
    """`cfg` as its probe chose it (`probe.choice`; unchanged where the probe chose nothing): the micro-batch,
    the accumulation and compiling, and as many validation batches as validate the windows `cfg` validated
    (20 batches of 8 become 5 of 32: the figure stays comparable, its cost does not grow)."""
    if probe is None or probe.choice is None:
        return cfg
    choice = probe.choice
    assert choice.micro_batch * choice.grad_accum == cfg.micro_batch * cfg.grad_accum, (
        "a probe's choice keeps the sequences a process takes a step"
    )
    windows = cfg.eval_batches * cfg.micro_batch  # 0: every window, whatever the batch
    return replace(
        cfg,
        micro_batch=choice.micro_batch,
        grad_accum=choice.grad_accum,
        compile=choice.compile,
        eval_batches=-(-windows // choice.micro_batch),
    )


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


class DeviceMemory:
    """A device's memory as the probe reads it: `total` bytes (None where the device does not say), and
    `measure(run)`, the most bytes allocated while `run()` ran beyond what was allocated before it (0 off
    CUDA, where torch keeps no such count)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.total = memory_bytes(self.device) if self.device.type == "cuda" else None

    def measure(self, run) -> int:
        if self.device.type != "cuda":
            run()
            return 0
        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        run()
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device) - before

    def release(self) -> None:
        "Hand the blocks a step that ran out of memory left behind back to the device."
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def measure(cfg, dist, budget: Budget | None, *, build, folder, memory=None) -> Probe | None:
    """Time real training steps of the new run `cfg` (see the module docstring) in each precision worth timing
    (`precisions_to_time`); None when nothing depends on them (a precision asked for and no budget). The
    caller (`gptlib.train.train`) hands in its own set-up, so that what is timed is what the run does:
    `build(precision)` is a fresh `gptlib.train.Training` of the run in that precision (model, optimizer,
    scaler, loader, validation split, and `forward`, DDP-wrapped as the run's, never compiled), whose
    `step(batches, lr, cfg)` and `validate(cfg, dist, n)` are the run's own. On a CUDA GPU with `auto`, the
    shape is searched and chosen (`search`); a run on a GPU that compiles and has a budget times one copy
    compiled as well. A CPU's copies stay eager: compiling there costs half a minute from an empty cache,
    and a compiled run's own steps, faster than the probe's, move its end while its rate holds
    (`Budget.replan`). `memory` reads the device's memory (default `DeviceMemory`).

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
            if tunes(cfg.precision, device):
                probe = search(cfg, dist, trials, budget, memory or DeviceMemory(device))
            else:
                probe = _as_configured(cfg, dist, trials, budget)
            if budget is not None:
                run_cfg = chosen_config(cfg, probe)
                chosen = trials[_chosen(run_cfg, device, probe.step_s)]
                # warm: the first forward pass in eval mode picks its kernels
                chosen.validate(run_cfg, dist, 1)
                n, batches = EVAL_TIMED_BATCHES, len(chosen.val_batches(run_cfg, dist))  # the loader's count
                eval_s = _timed(lambda: chosen.validate(run_cfg, dist, n)) / n * batches
                save_s = _save_seconds(chosen, folder) if dist.is_main else 0.0
                eval_s, save_s = _eval_and_save_on_every_rank(dist, eval_s, save_s)
                probe = replace(probe, eval_s=eval_s, save_s=save_s)
        finally:
            for training in trials.values():
                training.loader.close()  # worker processes, if the run reads with them
    return probe


def _as_configured(cfg, dist, trials: dict, budget: Budget | None) -> Probe:
    """The probe of a run whose shape is its config's: each precision's step timed at it, and on a GPU the
    run's precision compiled and timed too when the run compiles and a budget must count its steps."""
    device, most = dist.device, _most_for(dist)
    step_s = time_steps({name: _finished(device, cfg, t) for name, t in trials.items()}, most=most)
    step_s = _same_on_every_rank(dist, step_s)
    probe = Probe(step_s=step_s, features=hardware_features(device), precisions=tuple(trials))
    if budget is not None and cfg.compile and device.type == "cuda":
        name = _chosen(cfg, device, step_s)
        compile_s, compiled = _compiled_trial(cfg, dist, trials[name], cfg.micro_batch, DeviceMemory(device))
        if compiled is not None and compiled.step_s is not None:  # else: failed, or out of memory
            probe = replace(probe, compiled_s={name: compiled.step_s}, compile_s=compile_s)
    return probe


def search(cfg, dist, trials: dict, budget: Budget | None, memory) -> Probe:
    """A GPU run's shape, chosen from its real steps (`trials`: precision -> a `build` copy of the run):

    1. memory: one step of each precision at each of `micro_batches`, smallest first, each copy's model
       stepped without DDP (a rank out of memory must not leave the others waiting in a collective), until
       one runs out of memory (`torch.cuda.OutOfMemoryError`, caught); the most bytes held, over the ranks;
    2. time: the precisions' steps timed in turn (`time_steps`) at each micro-batch that fits;
    3. the eager choice (`choose_shape`), then its shape compiled (the run's own `training_module`, its
       seconds counted) and timed, and the choice made again with it: compiled when that pays.

    A micro-batch k times the run's takes k of the copy's batches side by side: the run's own data and
    loader. `memory` is a `DeviceMemory` (a test hands in a fake). Returns the probe, its `step_s` the
    precisions' times at the chosen micro-batch."""
    device, most, names = dist.device, _most_for(dist), tuple(trials)
    sizes = micro_batches(cfg.micro_batch, cfg.grad_accum)
    per_process = cfg.micro_batch * cfg.grad_accum
    # 1. memory, smallest first: a size that ran out of memory ends the doubling
    held: dict[tuple[str, int], float] = {(n, mb): math.inf for mb in sizes for n in names}  # inf: no
    for mb in sizes:
        for name in names:
            held[name, mb] = _held(device, cfg, trials[name], mb, memory)
        if math.inf in (held[n, mb] for n in names):
            break
    held = dict(zip(held, most(list(held.values()))))  # every rank the same table, in the same order
    # 2. time, at each micro-batch that fits with the margin, up to the first that ran out of memory
    rows = []
    for mb in sizes:
        if rows and math.inf in (held[n, rows[-1].micro_batch] for n in names):
            break
        fitting = {
            n: trials[n]
            for n in names
            if Trial(n, mb, per_process // mb, memory=_bytes(held[n, mb])).fits(memory.total)
        }
        step_s = {}
        if fitting:  # the same precisions on every rank, from the shared table
            timed = time_steps({n: _finished(device, cfg, t, mb) for n, t in fitting.items()}, most=most)
            step_s = _same_on_every_rank(dist, timed)
        rows += [
            Trial(n, mb, per_process // mb, step_s=step_s.get(n), memory=_bytes(held[n, mb])) for n in names
        ]
    # the facts the choice is made from, besides the table: the GPU's cores and memory
    facts = {
        "requested": cfg.precision,
        "features": _tensor_cores(device),
        "total_memory": memory.total,
        "compile_s": 0.0,
    }
    steps = _steps_of(cfg, dist, budget, _eager_seconds(rows, choose_shape(rows, **facts, steps=1)))
    eager = choose_shape(rows, **facts, steps=steps)
    # 3. the eager choice compiled: its compiling counted against the steps it would save
    compile_s, compiled = _compiled_trial(cfg, dist, trials[eager.precision], eager.micro_batch, memory)
    rows += [compiled] if compiled is not None else []
    choice = choose_shape(rows, **{**facts, "compile_s": compile_s}, steps=steps)
    at_choice = {
        t.precision: t.step_s for t in rows if t.micro_batch == choice.micro_batch and not t.compiled
    }
    return Probe(
        step_s={n: s for n, s in at_choice.items() if s is not None},
        features=hardware_features(device),
        precisions=tuple(n for n in names if at_choice.get(n) is not None),
        compiled_s={compiled.precision: compiled.step_s} if compiled and compiled.step_s else {},
        compile_s=compile_s,
        trials=tuple(rows),
        memory=memory.total or 0,
        choice=choice,
    )


def _bytes(held: float) -> int | None:
    "A trial's memory as `Trial` keeps it: None for a step that ran out of memory (or was not tried)."
    return None if math.isinf(held) else int(held)


def _eager_seconds(rows, choice: Choice) -> float:
    "The eager step's seconds of `choice`'s shape and precision among `rows`."
    return next(
        t.step_s
        for t in rows
        if not t.compiled and t.precision == choice.precision and t.micro_batch == choice.micro_batch
    )


def _steps_of(cfg, dist, budget: Budget | None, eager_s: float) -> int:
    """The steps the run will take, as compiling's pay-back counts them: `max_steps`, or with a budget the
    eager steps that fit what is left of it."""
    if budget is None:
        return cfg.max_steps
    left = budget.minutes * 60 - _most_on_any_rank(dist, time.perf_counter() - budget.started)
    return max(1, int(left / eager_s))


def _held(device, cfg, training, micro_batch: int, memory) -> float:
    """The most bytes one step of `training` (its raw model: no collective) at `micro_batch` holds, its model
    and optimizer included; inf when it runs out of memory."""
    resident = _resident_bytes(training)
    # suppressed rather than caught: the error and its traceback, which holds the step's activations alive,
    # are gone once the block ends, before the memory is released below
    with contextlib.suppress(torch.cuda.OutOfMemoryError):
        return (
            memory.measure(_finished(device, cfg, training, micro_batch, forward=training.model)) + resident
        )
    training.optimizer.zero_grad(set_to_none=True)  # out of memory
    memory.release()
    return math.inf


def _finished(device, cfg, training, micro_batch: int | None = None, forward=None):
    """One optimizer step of `training`, as the run's loop takes it (at the first step's learning rate), that
    returns when the device has done it: a GPU runs its kernels after the call has returned (the run's
    loop reads nothing back between steps), so it is waited for. At `micro_batch` (a multiple of the run's:
    its batches side by side, the accumulation shrunk to keep the step's sequences) and through `forward`
    (the model compiled, or the raw model) where given."""
    micro_batch = micro_batch or cfg.micro_batch
    k = micro_batch // cfg.micro_batch
    shaped = replace(cfg, micro_batch=micro_batch, grad_accum=cfg.micro_batch * cfg.grad_accum // micro_batch)
    stepped = training if forward is None else replace(training, forward=forward)
    batches = _side_by_side(iter(training.loader), k)

    def run_step() -> None:
        stepped.step(batches, cfg.lr(0), shaped)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return run_step


def _side_by_side(batches, k: int):
    "Batches of `k` times the rows: each `k` of `batches` (x, y) side by side, (k B, T) each."
    if k == 1:
        yield from batches  # the loader's own batches: it never ends
    while True:
        parts = [next(batches) for _ in range(k)]
        yield torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])  # (k B, T) each


def _compiled_trial(cfg, dist, training, micro_batch: int, memory) -> tuple[float, Trial | None]:
    """`(seconds, trial)`: `training`'s model compiled by the run's own `training_module` (tried on a batch,
    eager when compiling fails) and its step at `micro_batch` timed; the trial None when compiling failed on
    any rank, its step_s and memory None when the compiled step ran out of memory. The run's own compile
    then finds the compiled code ready (the same model class, shapes and precision: torch.compile's cache in
    this process)."""
    device, most = dist.device, _most_for(dist)
    sample = next(_side_by_side(iter(training.loader), micro_batch // cfg.micro_batch))
    began = time.perf_counter()
    forward, note = training_module(
        training.model, dist, training.precision, compile=True, sample_batch=sample
    )
    compile_s, failed = most([time.perf_counter() - began, float(note.startswith("torch.compile failed"))])
    if failed:
        return compile_s, None
    name, grad_accum = training.precision.name, cfg.micro_batch * cfg.grad_accum // micro_batch
    resident, timed = _resident_bytes(training), {}
    step = {name: _finished(device, cfg, training, micro_batch, forward=forward)}
    try:
        held = memory.measure(lambda: timed.update(time_steps(step, most=most))) + resident
    except torch.cuda.OutOfMemoryError:
        held = None
    if held is None:  # outside the except clause, whose traceback held the step's activations
        training.optimizer.zero_grad(set_to_none=True)
        memory.release()
        return compile_s, Trial(name, micro_batch, grad_accum, True, None, None)
    (held,) = most([float(held)])
    return compile_s, Trial(
        name, micro_batch, grad_accum, True, _same_on_every_rank(dist, timed)[name], int(held)
    )


def _resident_bytes(training) -> int:
    "The bytes `training`'s model (weights, buffers, gradients) and optimizer state hold now."
    tensors = [*training.model.parameters(), *training.model.buffers()]
    tensors += [p.grad for p in training.model.parameters() if p.grad is not None]
    tensors += [
        v for state in training.optimizer.state.values() for v in state.values() if torch.is_tensor(v)
    ]
    return sum(t.numel() * t.element_size() for t in tensors)


def _chosen(cfg, device, step_s: dict[str, float]) -> str:
    "The precision the run will train in, decided from the measured steps as its set-up will decide it."
    return choose_precision(device, cfg.precision, step_seconds=step_s).name


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
    budget_s: float,
    probe: Probe,
    *,
    precision: str,
    eval_every: int,
    checkpoint_every: int,
    start: int = 0,
    compiled: bool = False,
) -> int:
    """The last step of a run whose optimizer steps after `start`, with their validations and checkpoints, fit
    `budget_s` seconds in `precision` at the probe's times (its compiled step's when `compiled` and it timed
    one); `start` when not one more step fits."""
    step_s = probe.step_time(precision, compiled)

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
      checkpoints that fit what is left once the set-up, the probe and the run's compiling are done (the most
      any rank spent, so that all plan the same run), at the probe's compiled step where the run compiles
      and the probe timed one (on a GPU: a compiled step there took 12 ms against eager's 18): its decay
      then ends when the time does;
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
        self.compiled = False  # planned at the probe's compiled step (`plan`: the run compiles)
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
        """`cfg` with the `max_steps` that fit the budget in `precision` at the probe's times, compiled ones
        when `cfg.compile` and the probe timed them (see the class)."""
        assert precision in probe.step_s, "a budget needs the probe's time of this precision"
        self.probe, self.precision, self.dist = probe, precision, dist
        self.compiled = bool(cfg.compile)
        step_s = probe.step_time(precision, self.compiled)
        left = self.left()
        steps = steps_within(
            left,
            probe,
            precision=precision,
            eval_every=cfg.eval_every,
            checkpoint_every=cfg.checkpoint_every,
            compiled=cfg.compile,
        )
        if steps < 1:
            raise ConfigError(
                f"a budget of {self.minutes:g} min fits no training step: the set-up took "
                f"{self.minutes * 60 - left:.1f} s and a step takes {step_s:.2f} s here"
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
        rate, probed = statistics.median(self.recent), self.probe.step_time(self.precision, self.compiled)
        moved = "as planned" if cfg.max_steps == self.planned else f"the probe planned {self.planned:,d}"
        return f"{line} ({moved}: steps took {rate * 1e3:,.0f} ms, the probe's {probed * 1e3:,.0f} ms)"


def _most_for(dist):
    "`most(values)` for `time_steps`: each of `values` at its largest over `dist`'s ranks."
    return lambda values: _most_on_every_rank(dist, values)


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
    `train start` without `--budget`), never a new plan from a new measurement. A run whose probe chose its
    shape (a GPU's `auto`: `search`) keeps the micro-batch, accumulation, validation batches and compiling
    it chose, which its checkpoint's config holds."""
    saved = meta.get("config") or {}
    probe = recorded(meta)
    if probe is not None and probe.choice is not None:
        shape = ("micro_batch", "grad_accum", "eval_batches", "compile")
        cfg = replace(cfg, **{name: saved[name] for name in shape if name in saved})
    if not saved.get("budget") or "max_steps" not in saved:
        return cfg
    planned = {"budget": saved["budget"], "max_steps": saved["max_steps"]}
    return replace(cfg, **planned, decay_steps=saved.get("decay_steps", 0))


def describe(
    probe: Probe, precision: str, *, times: bool, max_steps: int, budget_min: float, compiled: bool = False
) -> str:
    """The probe in words, for the run's first log line: with `times`, the step times and the hardware (the
    CPU's units, or the GPU's name and tensor cores: where the precision's reason does not already give
    them: a precision asked for, a resumed run, a GPU), a GPU's choice of shape, and what a budget made of
    them (at the compiled step's time when the run is `compiled`); "" when there is nothing to add."""
    parts = []
    if times:
        measured = ", ".join(f"{name} {probe.step_s[name] * 1e3:,.0f} ms" for name in probe.precisions)
        parts.append(f"probe: a step takes {measured} ({', '.join(probe.features) or 'no bf16/fp16 units'})")
    if probe.choice is not None:
        parts.append(_chose(probe))
    if budget_min:
        steps = f"{max_steps:,d} step{'s' if max_steps != 1 else ''}"
        step_s = probe.step_time(precision, compiled)
        # a CPU's probe times eager steps only: "compiled" where the step timed was
        kind = " compiled" if compiled and precision in (probe.compiled_s or {}) else ""
        parts.append(
            f"budget {budget_min:g} min: {steps} of {step_s * 1e3:,.0f} ms{kind}, "
            f"validations of {probe.eval_s:.1f} s, checkpoints of {probe.save_s:.1f} s"
        )
    return " | ".join(parts)


def _chose(probe: Probe) -> str:
    """A GPU's choice in words: the shapes that ran (their steps in the chosen precision, eager) and the most
    memory one held, the chosen one, and compiling's times."""
    choice, gb = probe.choice, 1e9

    def ran(t: Trial) -> str:
        if t.step_s is not None:
            return f"{t.shape} {t.step_s * 1e3:,.0f} ms"
        return f"{t.shape} {'out of memory' if t.memory is None else f'{t.memory / gb:,.0f} GB: too large'}"

    eager = [t for t in probe.trials if not t.compiled and t.precision == choice.precision]
    held = max((t.memory or 0 for t in eager if t.micro_batch == choice.micro_batch), default=0)
    line = f"shape {choice.micro_batch} x {choice.grad_accum} of {choice.precision} steps "
    line += ", ".join(ran(t) for t in eager)
    if probe.memory:
        line += f" ({held / gb:,.1f} of {probe.memory / gb:,.0f} GB)"
    if choice.precision in probe.compiled_s:
        compiled = (
            f"{probe.compiled_s[choice.precision] * 1e3:,.0f} ms compiled after {probe.compile_s:.0f} s"
        )
        line += f", {compiled}: {'compiled' if choice.compile else 'eager'}"
    elif probe.compile_s:  # compiling failed, or its step ran out of memory
        line += f", no compiled step after {probe.compile_s:.0f} s of compiling: eager"
    return line


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
    # a CPU's auto gives the times it chose on in its reason; a GPU, a precision asked for, a resume: here
    times = resumed is not None or cfg.precision != "auto" or dist.device.type != "cpu"
    plan = describe(
        training.probe,
        precision.name,
        times=times,
        max_steps=cfg.max_steps,
        budget_min=cfg.budget,
        compiled=compiled.startswith("torch.compile on"),
    )
    return f"{line} | {plan}" if plan else line
