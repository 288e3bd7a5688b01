"""The lab: did a change help? Baseline against candidate, judged so that noise cannot fool it.

Hand-written, not generated from a notebook: the lab is a tool built on `gptlib.train` (lesson 06), and it
teaches no new idea of GPTs; it teaches how to read a training result honestly.

An **experiment** is two arms, a baseline and a candidate, each a `TrainConfig` (the command line gives them
as `train start` flags over a shared base: every TrainConfig field is a flag, so a variant of the model or
the optimizer the library offers, such as `--positions sinusoidal`, is a flag value, and no second registry
of named variants is needed). Both arms train

- at the **same pinned steps and precision**: `max_steps` given, no `budget`, a precision other than
  `auto`, compiled the same way, validated on the same held-out split. Host speed then cannot enter: on a
  busy machine a run is slower, not different. `pin` turns a budget into those numbers once, by training
  the baseline to its budget on this machine and reading the steps and precision it planned;
- with **paired seeds**: trial i trains both arms with the seed `first_seed + i`, which draws the same
  initial weights (where the shapes agree) and the same order of batches in both. The noise of one seed
  against another then cancels in the paired difference, and only what the change did is left;
- judged by a **rule declared before the runs** (`Rule`, stored in the ledger before the first trial, and
  refused if an experiment of the same name was declared with another): the difference of trial i is
  `d_i = baseline bits/byte - candidate bits/byte` over the whole held-out split at the last step (positive:
  the candidate is better). After `min_seeds` pairs, and after each pair added up to `max_seeds`, the lab
  looks at the mean difference and its one-sided Student t bounds (`judge`): **keep** when the lower bound
  is above `min_effect` (the candidate is better by more than the smallest effect worth keeping), **reject**
  when the upper bound is below it (whatever the candidate does, it is less than that), else one more
  seed; at the cap it is **undecided**. Each look tests at `level / looks` (Bonferroni over the looks the
  rule allows), so that looking again after every seed cannot raise the chance of keeping a candidate that
  is no better than `min_effect` above `level`; the same holds for rejecting one that is better.

The **ledger** (`lab.jsonl`) keeps everything, one JSON object a line, rewritten under a temporary name and
renamed for each line added, so a kill leaves the ledger as it was or with its new line, never half a line:
the experiment's declaration (both configs, the rule, the seeds), then every trial (the arm's config, its
seed, its bits per byte, its steps and precision, the code's fingerprint and git commit, the CPU kind, the
threads, the load of the machine, the seconds it took), then every look (per-seed results, the mean, the
interval, the decision). A trial is named by the digest of what decides its bits (its config without the
folder, the code, the CPU kind, torch's version, the threads): a trial already in the ledger is not trained
again (a killed experiment goes on where it stopped, and two experiments that need the same arm share it),
and an arm killed half-way resumes from its run folder's checkpoint, bit for bit.

**A/A**: the baseline against itself shows nothing with paired seeds, as both arms are bit-identical (the
difference is exactly 0, and the lab refuses such an experiment). A meaningful A/A gives the candidate the
same config with its seeds shifted (`seed_shift`): another draw of the initial weights and of the batches,
so the two arms are exchangeable (the true difference is exactly 0, by symmetry) while their difference
carries real noise, as much as two unpaired seeds. That is the hardest noise for the rule: the t bound
holds its level whatever the noise's size, and the `min_effect` margin protects the least where the noise
is largest. The candidate's weights drawn from another seed while the batches stay shared would be another
no-op, but `TrainConfig` has one seed for both, and the A/A needs no hook into the training code.

What the lab does not do: it judges one number (held-out bits per byte at the end), not curves; it trusts
the same kind of machine to give the same bits (a trial's digest names the CPU kind, so a ledger carried to
another kind trains its trials again); it runs the arms one after the other in this process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .config import Config, ConfigError, opt
from .errors import GptlibError
from .expected import cpu_kind
from .files import DocumentError, atomic_open, atomic_write
from .probe import hardware_features
from .shards import read_manifest
from .train import train
from .train_config import TrainConfig

__all__ = [
    "Rule",
    "Verdict",
    "judge",
    "t_cdf",
    "t_quantile",
    "Experiment",
    "LabError",
    "Ledger",
    "machine",
    "code_fingerprint",
    "trial_key",
    "run_trial",
    "run_experiment",
    "pin",
    "summary",
    "save_figure",
    "ARMS",
    "LEDGER_FORMAT",
    "LEDGER_VERSION",
]

ARMS = ("baseline", "candidate")
LEDGER_FORMAT, LEDGER_VERSION = "gptlib-lab-ledger", 1
KINDS = ("experiment", "trial", "look", "pin")  # what a ledger line holds, after the header line


class LabError(GptlibError, ValueError):
    "An experiment the lab cannot run as asked (declared before with another rule, ...)."


# --- the rule: Student's t, without scipy ------------------------------------------------------------


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz),
    evaluated where it converges fast (x < (a+1)/(a+b+2)) and by symmetry elsewhere."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even term
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),  # the odd term
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * result / a


def t_cdf(t: float, df: int) -> float:
    "P(T <= t) for Student's t with `df` degrees of freedom."
    tail = 0.5 * _incomplete_beta(df / (df + t * t), df / 2.0, 0.5)  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    "The t with P(T <= t) = p (0 < p < 1), by bisection on `t_cdf` (monotone), to 1e-12."
    assert 0.0 < p < 1.0 and df >= 1, f"need 0 < p < 1 and df >= 1, got p={p}, df={df}"
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    while high - low > 1e-12 * max(1.0, high):
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2.0


@dataclass
class Rule(Config):
    "the rule: declared before the runs, kept in the ledger with the experiment"

    min_effect: float = opt(
        0.01, "the smallest fall of held-out bits/byte worth keeping (the candidate must beat it)", low=0.0
    )
    level: float = opt(
        0.05,
        "the most chance of keeping a candidate no better than min_effect, all looks together (one-sided)",
        positive=True,
        below=0.5,
    )
    min_seeds: int = opt(3, "paired seeds before the first look", low=2, high=1000)
    max_seeds: int = opt(6, "the cap: still undecided at this many paired seeds, the experiment stops", low=2)

    def check(self) -> None:
        if self.max_seeds < self.min_seeds:
            raise ConfigError(f"need min_seeds <= max_seeds, got {self.min_seeds} and {self.max_seeds}")

    @property
    def looks(self) -> int:
        "How many times the rule may look: at min_seeds, then after each seed up to max_seeds."
        return self.max_seeds - self.min_seeds + 1

    @property
    def per_look(self) -> float:
        "The one-sided level of each look (Bonferroni: the looks' levels add up to `level`)."
        return self.level / self.looks


@dataclass(frozen=True)
class Verdict:
    """What the rule says of `n` paired differences: their mean, the one-sided bounds at the per-look level
    (`lower`, `upper`: together an interval of confidence 1 - 2 * per_look), and the decision: "keep",
    "reject", "undecided" (at the cap), or None (another seed is needed)."""

    n: int
    mean: float
    lower: float
    upper: float
    decision: str | None


def judge(differences: list[float], rule: Rule) -> Verdict:
    """The rule applied to the paired differences (baseline minus candidate, bits per byte) seen so far:
    before `min_seeds` of them no decision; then keep when the lower bound clears `min_effect`, reject when
    the upper bound stays under it, undecided at `max_seeds`, else None (one more seed)."""
    n = len(differences)
    assert n >= 2, f"a paired t bound needs two differences or more, got {n}"
    mean = math.fsum(differences) / n
    half = t_quantile(1.0 - rule.per_look, n - 1) * statistics.stdev(differences) / math.sqrt(n)
    lower, upper = mean - half, mean + half
    decision = None
    if n >= rule.min_seeds:
        if lower > rule.min_effect:
            decision = "keep"
        elif upper < rule.min_effect:
            decision = "reject"
        elif n >= rule.max_seeds:
            decision = "undecided"
    return Verdict(n, mean, lower, upper, decision)


# --- the experiment ----------------------------------------------------------------------------------

# what both arms must share, so that they differ only in what the candidate changes: the pinned steps and
# precision, the compiled or eager model, the data and the held-out figure
SHARED = ("max_steps", "precision", "compile", "shards", "tokenizer", "eval_batches")


@dataclass(frozen=True)
class Experiment:
    """A baseline and a candidate (`TrainConfig`s whose `seed` and `out` the lab sets per trial), the rule,
    and the seeds: trial i trains the baseline with `first_seed + i` and the candidate with that plus
    `seed_shift` (0: paired seeds; another value: an A/A, see the module docstring)."""

    name: str
    baseline: TrainConfig
    candidate: TrainConfig
    rule: Rule = field(default_factory=Rule)
    first_seed: int = 1
    seed_shift: int = 0

    def __post_init__(self):
        if not self.name or any(c.isspace() for c in self.name):
            raise ConfigError(f"an experiment needs a name without spaces, got {self.name!r}")
        if self.first_seed < 0 or self.first_seed + self.seed_shift < 0:
            raise ConfigError(
                f"seeds must be at least 0: first seed {self.first_seed}, shift {self.seed_shift}"
            )
        for arm in ARMS:
            cfg = getattr(self, arm)
            if cfg.budget:
                raise ConfigError(f"the {arm} has a budget: pin its steps (`lab pin`, then --max-steps)")
            if cfg.precision == "auto":
                raise ConfigError(f"the {arm}'s precision is auto: pin it (fp32, bf16 or fp16)")
            if not cfg.shards or not cfg.tokenizer:
                raise ConfigError(f"the {arm} needs its data: --shards and --tokenizer")
            if cfg.init_from:
                raise ConfigError(f"the {arm} starts from a run (--init-from): the lab trains from scratch")
            if cfg.stop_rising:  # a stop of its own would read as a signal, and its rerun would not stop
                raise ConfigError(
                    f"the {arm} stops when validation rises (--stop-rising): the lab pins steps"
                )
        if self.seed_shift and abs(self.seed_shift) < self.rule.max_seeds:
            # a smaller shift makes one arm's trial i the other's trial i + shift: the same run, reused, and
            # differences that are not independent
            raise ConfigError(
                f"--seed-shift {self.seed_shift} is smaller than the seed cap {self.rule.max_seeds}: "
                "the A/A's arms would share trials"
            )
        differ = [f for f in SHARED if getattr(self.baseline, f) != getattr(self.candidate, f)]
        if differ:
            raise ConfigError(f"the two arms must share {', '.join(differ)} (the pinned steps, the data)")
        if self.seed_shift == 0 and self.arm_dict("baseline") == self.arm_dict("candidate"):
            raise ConfigError(
                "the candidate is the baseline: with paired seeds both arms are bit-identical and their "
                "difference exactly 0, which shows nothing; an A/A needs --seed-shift"
            )

    def arm_dict(self, arm: str) -> dict:
        "The arm's config as the ledger keeps it: every field but the seed and the run folder."
        d = getattr(self, arm).to_dict()
        return {k: v for k, v in d.items() if k not in ("seed", "out")}

    def seeds(self, i: int) -> dict[str, int]:
        "The seed of each arm in trial i (0-based)."
        seed = self.first_seed + i
        return {"baseline": seed, "candidate": seed + self.seed_shift}

    def arm(self, arm: str, i: int) -> TrainConfig:
        "The arm's config in trial i (its run folder still unset)."
        return replace(getattr(self, arm), seed=self.seeds(i)[arm], out="")

    def declaration(self) -> dict:
        "What the ledger stores before the first trial: both arms (and what differs), the rule, the seeds."
        baseline, candidate = self.arm_dict("baseline"), self.arm_dict("candidate")
        return {
            "name": self.name,
            "baseline": baseline,
            "candidate": candidate,
            "changed": {k: [v, candidate[k]] for k, v in baseline.items() if candidate[k] != v},
            "rule": self.rule.to_dict(),
            "first_seed": self.first_seed,
            "seed_shift": self.seed_shift,
        }


# --- the machine and the code ----------------------------------------------------------------------


def machine(threads: int) -> dict:
    "The machine a trial ran on: CPU kind (name, family and model, bf16/fp16 units), torch, threads."
    return {
        "cpu": cpu_kind(),
        "features": list(hardware_features("cpu")),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "threads": threads,
    }


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_fingerprint() -> dict:
    """The training code a trial ran: the sha256 of gptlib's sources (the lab and the command line left out:
    they decide no bits of a run), and the git commit with whether the sources differ from it."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative == "lab.py" or relative.startswith("cli/"):
            continue
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return {
        "sources": digest.hexdigest(),
        "commit": _git("rev-parse", "HEAD"),
        "modified": bool(_git("status", "--porcelain", "--", ".")),
    }


def trial_key(cfg: TrainConfig, code: dict, where: dict) -> str:
    """The digest of everything that decides a trial's bits: the config (its run folder aside), the data (the
    shards' key: shards made again at the same path from other text or another tokenizer have another), the
    code's sources, the CPU kind, torch's version and the threads."""
    document = {
        "config": {k: v for k, v in cfg.to_dict().items() if k != "out"},
        "data": read_manifest(cfg.shards)["key"],
        "sources": code["sources"],
        "cpu": where["cpu"],
        "torch": where["torch"],
        "threads": where["threads"],
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


# --- the ledger ----------------------------------------------------------------------------------------


class Ledger:
    """The lab's record, `path` (JSON lines): a header line, then the experiments, trials, looks and pins.
    Read with suspicion (each line must be an object of a known kind); each line added rewrites the file
    under a temporary name and renames it. One writer at a time: the lab's commands lock its run folder."""

    def __init__(self, path):
        self.path = Path(path)

    def records(self) -> list[dict]:
        "Every record after the header; a missing (or empty) ledger is an empty one."
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DocumentError(f"{self.path} line {number} is not JSON (edited?): {e}") from e
            if not isinstance(record, dict):
                raise DocumentError(f"{self.path} line {number} is not a JSON object")
            if number == 1:
                if record.get("format") != LEDGER_FORMAT:
                    raise DocumentError(f"{self.path} is not a {LEDGER_FORMAT} file")
                if record.get("version") != LEDGER_VERSION:
                    raise DocumentError(
                        f"{self.path} has version {record.get('version')!r}; "
                        f"this gptlib reads version {LEDGER_VERSION}"
                    )
                continue
            if record.get("kind") not in KINDS:
                raise DocumentError(f"{self.path} line {number} has no known kind ({record.get('kind')!r})")
            records.append(record)
        return records

    def append(self, record: dict) -> None:
        "Add one line: the ledger as it was plus the line, written to a temporary name and renamed."
        assert record.get("kind") in KINDS, f"a ledger record needs a known kind, got {record.get('kind')!r}"
        if self.path.exists() and self.path.stat().st_size > 0:
            old = self.path.read_bytes()
        else:
            old = (json.dumps({"format": LEDGER_FORMAT, "version": LEDGER_VERSION}) + "\n").encode()
        line = json.dumps({**record, "when": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n"
        atomic_write(self.path, old + line.encode())

    def declared(self, name: str) -> dict | None:
        return next((r for r in self.records() if r["kind"] == "experiment" and r["name"] == name), None)

    def declare(self, experiment: Experiment, where: dict, code: dict) -> None:
        """Store the experiment (its arms and rule) before its first trial; a name declared before must be
        declared the same (a rule chosen after seeing results is no rule)."""
        declaration = experiment.declaration()
        before = self.declared(experiment.name)
        if before is None:
            self.append({"kind": "experiment", **declaration, "machine": where, "code": code})
            return
        changed = [k for k, v in declaration.items() if before.get(k) != v]
        if changed:
            raise LabError(
                f"{self.path} already holds an experiment {experiment.name!r} declared with another "
                f"{', '.join(changed)}: a rule is declared once, before the runs; give a new name"
            )

    def trials(self) -> dict[str, dict]:
        "The trials by key."
        return {r["key"]: r for r in self.records() if r["kind"] == "trial"}

    def looks(self, name: str) -> list[dict]:
        return [r for r in self.records() if r["kind"] == "look" and r["experiment"] == name]


# --- trials and experiments ----------------------------------------------------------------------------


def _seen(results: list[dict]) -> str:
    "What a look saw: the keys of its trials, in order."
    return json.dumps([r["keys"] for r in results], sort_keys=True)


@contextlib.contextmanager
def _threads(n: int):
    "torch's threads set to `n` within the block (a trial's bits may depend on how its sums are split)."
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_trial(cfg: TrainConfig, threads: int) -> dict | None:
    """Train one arm of one seed (or resume it from its run folder) on `threads` threads, silently; return
    its held-out bits per byte at the last step and what the training cost, or None when a signal stopped
    it (its checkpoint saved: run again to resume)."""
    resumed = (Path(cfg.out) / "metrics.jsonl").exists()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # the machine's other work, noted
    began = time.perf_counter()
    with _threads(threads):
        history = train(cfg, log=None, progress=False)
    if history and history[-1].get("stopped"):
        return None
    final = [r for r in history if r["kind"] == "val" and r["step"] == cfg.max_steps]
    assert final, f"a finished run validates at its last step; {cfg.out} has no validation at {cfg.max_steps}"
    return {
        "val_bpb": final[-1]["val_bpb"],
        "steps": cfg.max_steps,
        "precision": cfg.precision,
        "seconds": time.perf_counter() - began,
        "resumed": resumed,
        "load": load,
    }


def run_experiment(
    experiment: Experiment,
    ledger: Ledger,
    work,
    *,
    threads: int = 1,
    max_trials: int | None = None,
    log=print,
) -> Verdict | None:
    """Run `experiment` until its rule decides, trials in `work/KEY/` (kept, for resume and for a look at
    the runs), everything recorded in `ledger`. Trials already in the ledger are not trained again. Returns
    the verdict, or None when it stopped before one: `max_trials` new trials trained, or a signal."""
    where, code = machine(threads), code_fingerprint()
    ledger.declare(experiment, where, code)
    rule, name, log = experiment.rule, experiment.name, log or (lambda line: None)
    trained, differences, results = 0, [], []
    # a look is recorded once for the trials it saw (trials trained again, e.g. with other threads, are
    # looked at again)
    done = {_seen(r["results"]) for r in ledger.looks(name)}
    for i in range(rule.max_seeds):
        values, keys = {}, {}
        for arm in ARMS:
            cfg = experiment.arm(arm, i)
            key = trial_key(cfg, code, where)
            found = ledger.trials().get(key)
            if found is None:
                if max_trials is not None and trained >= max_trials:
                    return None
                result = run_trial(replace(cfg, out=str(Path(work) / key[:20])), threads)
                if result is None:
                    return None
                found = {"kind": "trial", "key": key, "experiment": name, "arm": arm, "seed": cfg.seed}
                found.update(result, config=cfg.to_dict(), code=code, machine=where)
                ledger.append(found)
                trained += 1
                figures = f"{result['val_bpb']:.4f} bits/byte ({result['seconds']:.0f} s)"
                log(f"{name}: {arm} seed {cfg.seed}: {figures}")
            values[arm], keys[arm] = found["val_bpb"], key
        differences.append(values["baseline"] - values["candidate"])
        results.append({"seeds": experiment.seeds(i), "keys": keys, **values})
        if len(differences) < rule.min_seeds:
            continue
        verdict = judge(differences, rule)
        if _seen(results) not in done:
            look = {"kind": "look", "experiment": name, "n": verdict.n, "results": results}
            look.update(
                mean=verdict.mean, lower=verdict.lower, upper=verdict.upper, decision=verdict.decision
            )
            ledger.append(look)
        log(f"{name}: {describe(verdict, rule)}")
        if verdict.decision is not None:
            return verdict
    raise AssertionError("the rule decides at max_seeds at the latest")


def describe(verdict: Verdict, rule: Rule) -> str:
    "A look in words."
    decision = verdict.decision or "one more seed"
    return (
        f"after {verdict.n} seeds the candidate is better by {verdict.mean:+.4f} bits/byte, "
        f"[{verdict.lower:+.4f}, {verdict.upper:+.4f}] at {1 - 2 * rule.per_look:.1%} "
        f"(min effect {rule.min_effect:g}): {decision}"
    )


def pin(cfg: TrainConfig, minutes: float, out, threads: int = 1) -> dict:
    """The steps and precision to pin, from the baseline `cfg` trained once to a budget of `minutes` on this
    machine (in `out`), its precision `auto` unless one was given: the steps it planned (and moved as it
    went) and the precision it kept, as its records say."""
    with _threads(threads):
        history = train(replace(cfg, budget=minutes, out=str(out)), log=None, progress=False)
    planned = [r for r in history if r["kind"] == "event" and "max_steps" in r]
    assert planned, "a budget's run records the steps it planned"
    return {"max_steps": planned[-1]["max_steps"], "precision": planned[-1]["precision"], "budget": minutes}


# --- reading the ledger ----------------------------------------------------------------------------------


def summary(records: list[dict]) -> list[dict]:
    """One row per experiment of the ledger's `records`: what the candidate changed, the last look (seeds,
    mean difference, interval, decision), and the cost (the seconds of the trials it used, and how many)."""
    trials = {r["key"]: r for r in records if r["kind"] == "trial"}
    rows = []
    for declared in (r for r in records if r["kind"] == "experiment"):
        name = declared["name"]
        looks = [r for r in records if r["kind"] == "look" and r["experiment"] == name]
        last = looks[-1] if looks else None
        used = [trials[r["keys"][arm]] for r in (last["results"] if last else []) for arm in ARMS]
        rows.append(
            {
                "name": name,
                "changed": declared["changed"],
                "seed_shift": declared["seed_shift"],
                "rule": declared["rule"],
                "n": last["n"] if last else 0,
                "mean": last["mean"] if last else None,
                "lower": last["lower"] if last else None,
                "upper": last["upper"] if last else None,
                "decision": (last["decision"] or "running") if last else "running",
                "differences": [r["baseline"] - r["candidate"] for r in last["results"]] if last else [],
                "seconds": sum(t["seconds"] for t in used),
                "trials": len(used),
            }
        )
    return rows


def save_figure(rows: list[dict], path) -> Path:
    """The paired differences of each experiment (a dot per seed), their mean and interval, and the rule's
    min_effect, as a PNG (matplotlib's Agg canvas; imported here, only when a figure is asked for)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 0.6 * len(rows) + 1.5))
    ax = fig.add_subplot()
    for y, row in enumerate(rows):
        ax.plot(row["differences"], [y] * len(row["differences"]), "o", color="tab:gray", alpha=0.6)
        if row["mean"] is not None:
            ax.errorbar(
                row["mean"],
                y,
                xerr=[[row["mean"] - row["lower"]], [row["upper"] - row["mean"]]],
                fmt="s",
                color={"keep": "tab:green", "reject": "tab:red"}.get(row["decision"], "tab:orange"),
                capsize=4,
            )
        ax.plot([row["rule"]["min_effect"]] * 2, [y - 0.4, y + 0.4], "k:")
    ax.axvline(0.0, color="k", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"{r['name']}: {r['decision']}" for r in rows])
    ax.set_xlabel(
        "baseline - candidate, held-out bits/byte (right: the candidate is better; dotted: min effect)"
    )
    fig.tight_layout()
    path = Path(path)
    with atomic_open(path) as f:
        fig.savefig(f, format="png", dpi=110)
    return path
