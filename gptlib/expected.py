"""Expected bands: a preset's curves on a CPU kind, and whether a run landed inside them.

Hand-written plumbing, not generated from a notebook: 06_training shows a band and says how to read it;
keeping envelopes is bookkeeping. "Is my loss curve normal?" has no answer from one run alone: a band
answers it with the runs of several seeds of the same recipe, trained the same way on the same kind of
CPU. A band holds, for one preset under one time budget, in one precision, on one CPU kind (its model name,
family and model numbers, and its bf16/fp16 units, `cpu_kind`), the envelope (min-max over the seeds) of

- the training loss (nats/token), each seed's logged losses averaged over a short stretch of the schedule
  first (one batch's loss moves by more than the seeds differ);
- the validation loss (nats/token) and bits per byte, between the validations each seed made.

Each curve is indexed by the fraction of the schedule (step / max_steps), not by the step: under a budget
the probe gives each run its own max_steps, a few steps more or fewer, and the fraction lines runs up
where their learning rates are alike. The committed bands live in `gptlib/bands/*.json` (made by
`benchmarks/train.py --bands`, their source runs listed in `benchmarks/RESULTS.md`).

- `cpu_kind()`: this machine's CPU model name, family and model numbers, and bf16/fp16 units; `kind_text`
  names one;
- `load_bands()`, `band_for(config, precision)`: the band of a run's configuration on this CPU kind, or
  None and the reason (another CPU kind, another recipe, a damaged bands file: no guessing); `check_bands()`
  says before a run trains whether the bands files read;
- `judge(history, band)`: the lines that say whether the run landed inside, and what a run outside usually
  means; `place(history, config)` finds the band and judges;
- `make_band(...)`, `save_bands(...)`: a band from the histories of its seeds, for the benchmark.
"""

from __future__ import annotations

import platform
import statistics
from bisect import bisect_left
from dataclasses import asdict, dataclass
from pathlib import Path

from .display import schedule_of  # the run's schedule, as its records say it
from .files import DocumentError, read_json_document, write_json
from .optim import cpu_features
from .train_config import TrainConfig

__all__ = [
    "BANDS",
    "GRID",
    "Curve",
    "Band",
    "cpu_kind",
    "kind_text",
    "load_bands",
    "check_bands",
    "band_for",
    "train_curve",
    "make_band",
    "save_bands",
    "judge",
    "place",
]

BANDS = Path(__file__).with_name("bands")  # the committed bands, one file per preset
BANDS_FORMAT, BANDS_VERSION = "gptlib-bands", 1
GRID = 40  # points along the schedule: 1/40 of a 1,400-step run is 35 steps, about 2 log lines of `cpu`
# what a band is not about, as each field of TrainConfig declares (`compared=False`): where a run writes,
# how often it logs or saves, how it compiles or reads batches, which seed it drew (the band is over seeds),
# and how its length was set (the fraction indexes it)
NOT_COMPARED = TrainConfig.names(compared=False)
STEPS_TOLERANCE = 0.15  # a run with 15 % more or fewer steps than the band's is still judged by it
# Why a run lands where it does: the causes seen most, in the order worth checking
ABOVE = (
    "a run above the band has usually trained on other text or with another tokenizer, with another learning "
    "rate or batch, in another precision, or for fewer steps than the band's runs (a budget on a busier "
    "machine gives fewer steps)"
)
BELOW = (
    "a run below the band has usually had more steps than the band's runs (a faster or quieter machine under "
    "the same budget) or other held-out text"
)


@dataclass(frozen=True)
class Curve:
    "An envelope along the schedule: `low` and `high` at each `fraction` (step / max_steps), ascending."

    fraction: list[float]
    low: list[float]
    high: list[float]

    def at(self, fraction: float) -> tuple[float, float] | None:
        "The envelope at `fraction`, on the straight line between its points; None outside them."
        low = _interpolate(list(zip(self.fraction, self.low)), fraction)
        high = _interpolate(list(zip(self.fraction, self.high)), fraction)
        return None if low is None or high is None else (low, high)


@dataclass(frozen=True)
class Band:
    """One recipe's envelope on one CPU kind (see the module docstring). `runs` lists its source runs: seed,
    max_steps, final validation bits per byte, training seconds."""

    name: str
    preset: str
    config: dict  # the fields that decide the curves (every TrainConfig field but NOT_COMPARED)
    budget: float  # minutes
    precision: str
    cpu: dict  # {"model": ..., "ids": {...}, "features": [...]}: what `cpu_kind()` said where they were made
    runs: list[dict]
    train_loss: Curve
    val_loss: Curve
    val_bpb: Curve
    source: str  # where the source runs are described

    @property
    def max_steps(self) -> float:
        "The mean max_steps of the band's runs."
        return statistics.mean(r["max_steps"] for r in self.runs)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Band:
        curves = {k: Curve(**d[k]) for k in ("train_loss", "val_loss", "val_bpb")}
        return cls(**{**d, **curves})


def cpu_kind(cpuinfo: str | None = None) -> dict:
    """This CPU's kind: its model name (from /proc/cpuinfo, or `platform.processor()` where there is none),
    its family and model numbers, and its bf16/fp16 units (`gptlib.optim.cpu_features`). Two machines of one
    kind run a step alike. The numbers tell generations of one name apart: an AMD EPYC Zen 4 (family 25) and
    a Zen 5 (family 26) both say `AMD EPYC` and have the same bf16 units, yet the Zen 5 runs the `cpu`
    preset's step about twice as fast, so a band of one would judge the other's runs by steps it never had."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    ids = {}
    for line in cpuinfo.splitlines():  # the first processor's: every core of one machine is alike
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("cpu family", "model") and key not in ids:
            ids[key] = value
    features = list(cpu_features(cpuinfo) if cpuinfo else cpu_features())
    return {"model": model, "ids": ids, "features": features}


def kind_text(kind: dict) -> str:
    "A CPU kind as the run's lines and the tables name it: `AMD EPYC family 25 model 17 (avx512_bf16)`."
    ids = kind.get("ids") or {}
    numbers = "".join(f" {key.split()[-1]} {ids[key]}" for key in ("cpu family", "model") if key in ids)
    return f"{kind['model']}{numbers} ({', '.join(kind['features']) or 'no bf16/fp16 units'})"


def load_bands(folder=None) -> list[Band]:
    "Every band in the `*.json` files of `folder` (default `BANDS`, the committed ones)."
    bands = []
    for path in sorted(Path(BANDS if folder is None else folder).glob("*.json")):
        document = read_json_document(
            path, format=BANDS_FORMAT, version=BANDS_VERSION, required=("bands",), what="bands file"
        )
        try:
            bands += [Band.from_dict(b) for b in document["bands"]]
        except (TypeError, KeyError) as e:
            raise DocumentError(f"{path} holds a malformed band ({e!r})") from e
    return bands


def check_bands(folder=None) -> str | None:
    """None when every bands file of `folder` (default `BANDS`) reads; else what is wrong, naming the file. A
    command that places its run says so before it trains: the run still trains and is plotted, and is then
    placed against no band (`band_for`)."""
    try:
        load_bands(folder)
    except DocumentError as e:
        return str(e)
    return None


# lesson 07's fields, added after bands were recorded: their defaults are what every earlier run did (lesson
# 04's GPT, AdamW), so a band without them holds runs of their defaults. Any other field a band lacks keeps
# it from judging a recipe that has the field: what an older run did there is not known
SINCE_07 = ("norm", "qk_norm", "mlp", "tied_head", "optimizer", "muon_lr")


def recipe_of(config: dict) -> dict:
    """The fields of a run's config (a `TrainConfig.to_dict()`) that decide its curves: all but NOT_COMPARED,
    lesson 07's fields at their defaults where the config predates them."""
    defaults = TrainConfig().to_dict()
    return {
        k: v for k, v in {**{f: defaults[f] for f in SINCE_07}, **config}.items() if k not in NOT_COMPARED
    }


def band_for(
    config: dict, precision: str | None = None, kind: dict | None = None, bands: list[Band] | None = None
) -> tuple[Band | None, str]:
    """The band that judges a run of `config` (a `TrainConfig.to_dict()`) in `precision` (None: any) on CPU
    `kind` (default: this one), and a line saying which it is; `(None, why)` when there is none."""
    kind = cpu_kind() if kind is None else kind
    if bands is None:
        try:
            bands = load_bands()
        except DocumentError as e:  # a damaged bands file costs the run its verdict, not its plot
            return None, f"no expected band: {e}"
    if not bands:
        return None, "no expected band: none is committed (gptlib/bands/)"
    # every field both ways: a band made before a field existed is not of a recipe that sets it
    same_recipe = [b for b in bands if recipe_of(config) == recipe_of(b.config)]
    if not same_recipe:
        presets = ", ".join(sorted({f"`{b.preset}`" for b in bands})) or "no preset"
        return None, f"no expected band for this recipe: bands exist for {presets} as the presets define them"
    here = [b for b in same_recipe if b.cpu == kind and precision in (None, b.precision)]
    if not here:
        made = "; ".join(f"{kind_text(b.cpu)} in {b.precision}" for b in same_recipe)
        return None, (
            f"no expected band for this CPU kind, {kind_text(kind)}"
            f"{f' in {precision}' if precision else ''}: bands of this recipe were made on {made}"
        )
    band = here[0]
    return band, f"expected band: {band.name} ({len(band.runs)} seeds, {band.source})"


# --- reading a history ------------------------------------------------------------------------------------


def train_curve(history: list[dict], max_steps: int, grid: int = GRID) -> tuple[list[float], list[float]]:
    """The training loss along the schedule: at each of `grid` fractions k/grid, the mean of the losses
    logged within one grid spacing of it (points with none are left out)."""
    points = [(r["step"] / max_steps, r["loss"]) for r in history if r.get("kind") == "train"]
    fractions, losses = [], []
    for k in range(1, grid + 1):
        f = k / grid
        near = [loss for x, loss in points if abs(x - f) <= 1 / grid + 1e-9]
        if near:
            fractions.append(f)
            losses.append(statistics.mean(near))
    return fractions, losses


def _val_points(history: list[dict], max_steps: int, key: str) -> list[tuple[float, float]]:
    "A run's validations as (fraction of the schedule, value), the last one of each step kept."
    points = {r["step"]: r[key] for r in history if r.get("kind") == "val"}
    return [(step / max_steps, value) for step, value in sorted(points.items())]


def _interpolate(points: list[tuple[float, float]], f: float) -> float | None:
    "The straight line through `points` (ascending fractions) at `f`; None outside them."
    if not points or not points[0][0] - 1e-9 <= f <= points[-1][0] + 1e-9:
        return None
    f = min(max(f, points[0][0]), points[-1][0])  # a fraction off by rounding reads the end point
    i = bisect_left([x for x, _ in points], f)  # the first point at or after f
    if points[i][0] == f or i == 0:
        return points[i][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (f - x0) / (x1 - x0) * (y1 - y0)


# --- making a band ---------------------------------------------------------------------------------------


def _envelope(curves: list[list[tuple[float, float]]], grid: int) -> Curve:
    "The min-max over `curves` (each a list of (fraction, value)) at the grid points all of them reach."
    fraction, low, high = [], [], []
    for k in range(1, grid + 1):
        values = [_interpolate(points, k / grid) for points in curves]
        if values and None not in values:
            fraction.append(k / grid)
            low.append(min(values))
            high.append(max(values))
    return Curve(fraction, low, high)


def make_band(
    name: str, preset: str, runs: list[tuple[dict, list[dict]]], *, source: str, kind=None, grid: int = GRID
) -> Band:
    """The band of `runs`, each `(config, history)` of one seed of the same recipe (`config` a
    `TrainConfig.to_dict()`, `history` what `gptlib.train.train` returned or `metrics.jsonl` holds)."""
    configs = [recipe_of(config) for config, _ in runs]
    assert all(c == configs[0] for c in configs), "a band's runs must share one recipe (seeds aside)"
    schedules = [schedule_of(history) for _, history in runs]
    precisions = {precision for _, precision in schedules}
    assert len(precisions) == 1 and None not in precisions, f"the runs trained in {precisions}"
    train_curves, val_loss, val_bpb, sources = [], [], [], []
    for (config, history), (max_steps, _) in zip(runs, schedules):
        train_curves.append(list(zip(*train_curve(history, max_steps, grid))))
        val_loss.append(_val_points(history, max_steps, "val_loss"))
        val_bpb.append(_val_points(history, max_steps, "val_bpb"))
        finished = [r for r in history if r.get("kind") == "event" and "finished" in r.get("message", "")]
        sources.append(
            {
                "seed": config["seed"],
                "max_steps": max_steps,
                "final_val_bpb": val_bpb[-1][-1][1],
                "final_val_loss": val_loss[-1][-1][1],
                "finished": finished[-1]["message"] if finished else None,
            }
        )
    return Band(
        name=name,
        preset=preset,
        config=configs[0],
        budget=runs[0][0].get("budget", 0.0),
        precision=precisions.pop(),
        cpu=cpu_kind() if kind is None else kind,
        runs=sources,
        train_loss=_envelope(train_curves, grid),
        val_loss=_envelope(val_loss, grid),
        val_bpb=_envelope(val_bpb, grid),
        source=source,
    )


def save_bands(bands: list[Band], path) -> None:
    "Write `bands` as one bands file (atomically), making its folder if it is the first band there."
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(
        path,
        {"format": BANDS_FORMAT, "version": BANDS_VERSION, "bands": [b.to_dict() for b in bands]},
    )


# --- judging a run ----------------------------------------------------------------------------------------


def _verdict(what: str, value: float, interval: tuple[float, float] | None, unit: str) -> tuple[str, int]:
    """A line on `value` against the band's `interval` at the same point, and where it is: 0 inside or
    within the seeds' own spread of it, 1 above, -1 below."""
    if interval is None:
        return f"{what} {value:.3f} {unit}: the band has no value at this point of the schedule", 0
    low, high = interval
    spread = max(high - low, 1e-3)  # how far apart the seeds themselves ended: a new seed may land that far
    where = f"{what} {value:.3f} {unit}, band {low:.3f}-{high:.3f}"
    if low <= value <= high:
        return f"{where}: inside", 0
    gap = value - high if value > high else low - value
    side = "above" if value > high else "below"
    gap_s, spread_s = _distinct(gap, spread)
    if gap <= spread:
        return f"{where}: just {side} ({gap_s}, within the seeds' own spread: seed-to-seed noise)", 0
    return (
        f"{where}: {side} by {gap_s}, more than the seeds spread ({spread_s})",
        1 if side == "above" else -1,
    )


def _distinct(a: float, b: float) -> tuple[str, str]:
    "`a` and `b` with 3 decimals, or with as many more (up to 5) as it takes for different values to differ."
    for digits in (3, 4, 5):
        shown = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if shown[0] != shown[1] or a == b:
            break
    return shown


# the training loss is judged at the grid points of the last tenth of the schedule: some 8 log lines of
# `cpu`, each point averaging those within 1/GRID of it (so from 0.875 of the schedule on)
TAIL = 0.1


def _tail(fractions: list[float], losses: list[float]) -> list[tuple[float, float]]:
    "The points of a training curve in the last TAIL of the schedule."
    return [(f, loss) for f, loss in zip(fractions, losses) if f >= 1 - TAIL - 1e-9]


def judge(history: list[dict], band: Band) -> list[str]:
    """The run's last lines: its final validation bits per byte and its training loss over the last tenth
    of the schedule (one grid point's few batches move by more than the seeds differ), each against the band
    at the same fractions of the schedule, and what a run outside usually means."""
    max_steps, precision = schedule_of(history)
    val = [r for r in history if r.get("kind") == "val"]
    if max_steps is None or not val:
        return ["not judged against the band: the run has no validation yet"]
    lines = []
    if precision != band.precision:
        lines.append(f"this run trained in {precision}, the band's runs in {band.precision}")
    if abs(max_steps / band.max_steps - 1) > STEPS_TOLERANCE:
        lines.append(
            f"this run had {max_steps:,d} steps, the band's {band.max_steps:,.0f}: judged by the fraction of "
            "the schedule, but fewer steps end higher (a busier machine) and more end lower"
        )
    last = val[-1]
    bpb, bpb_side = _verdict("val", last["val_bpb"], band.val_bpb.at(last["step"] / max_steps), "bits/byte")
    lines.append(bpb)
    sides = [bpb_side]
    tail = _tail(*train_curve(history, max_steps))
    if tail:  # the training loss over the run's last tenth, against the band's at the same points
        envelope = [(value, band.train_loss.at(f)) for f, value in tail]
        shared = [(value, at) for value, at in envelope if at is not None]  # the points both curves have
        mean_loss = statistics.mean(value for value, _ in shared or envelope)
        interval = None  # the band's envelope averaged over the same points
        if shared:
            interval = tuple(statistics.mean(at[side] for _, at in shared) for side in (0, 1))
        loss, loss_side = _verdict("train loss (last tenth)", mean_loss, interval, "nats/token")
        lines.append(loss)
        sides.append(loss_side)
    if 1 in sides:
        lines.append(ABOVE)
    elif -1 in sides:
        lines.append(BELOW)
    else:
        lines.append(f"inside the expected band of {len(band.runs)} seeds ({band.name}): a normal run")
    return lines


def place(
    history: list[dict], config: dict, kind: dict | None = None, bands: list[Band] | None = None
) -> tuple[Band | None, list[str]]:
    """The band of a run (its records and its resolved config, `config.json`) on CPU `kind` (default: this
    one), and the lines that place the run: which band judges it (or why none does), then `judge`'s."""
    band, line = band_for(config, schedule_of(history)[1], kind, bands)
    return band, [line] + (judge(history, band) if band is not None else [])
