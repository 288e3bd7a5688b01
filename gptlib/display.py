"""How a training run is shown: log lines, a progress bar, its curves as a PNG and live.

Hand-written plumbing, not generated from a notebook: 06_training shows these and says how to read them;
drawing them is tqdm and matplotlib bookkeeping (imported only when something is drawn).

- `log_line(record)`: one line of text for a record of `gptlib.train.train` (train, val or event);
- `progress_bar(total, initial)`: a terminal progress bar, or None where none can be shown;
- `schedule_of(history)`: a run's `max_steps` and precision, as its records last said them;
- `draw_history(fig, history, references, band)`: loss (train and validation, reference losses, the gap,
  and the expected band of `gptlib.expected` shaded behind them), learning rate, gradient norm, and the
  loss scale (where a scaler runs) or the throughput;
- `save_plots(history, path)`: the same as a PNG file, written atomically;
- `LivePlot`: a `train` callback that redraws one figure in place in a Jupyter kernel.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from .files import atomic_write

__all__ = ["log_line", "progress_bar", "schedule_of", "draw_history", "save_plots", "LivePlot"]


def log_line(record: dict) -> str:
    "A record of a run as one line of text."
    if record["kind"] == "train":
        return (
            f"step {record['step']:6d} | loss {record['loss']:.4f} | lr {record['lr']:.2e} | grad norm "
            f"{record['grad_norm']:.2f} | scale {record['loss_scale']:g} | skipped {record['skipped']} | "
            f"{record['tokens_per_s']:,.0f} tok/s | MFU {record['mfu']:.1%}"
        )
    if record["kind"] == "val":
        return (
            f"step {record['step']:6d} | val loss {record['val_loss']:.4f} | "
            f"val bits/byte {record['val_bpb']:.4f}"
        )
    return f"== {record['message']}"


def progress_bar(total: int, initial: int = 0):
    """A progress bar of training steps on stderr (log lines then go through its `write`), or None when tqdm
    shows none."""
    import sys

    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)
    return None if bar.disable else bar


def draw_history(fig, history: list[dict], references: dict[str, float] | None = None, band=None) -> None:
    """Draw the training curves of `history` on `fig`: train and validation loss (with `references`, e.g.
    `gptlib.quality.reference_losses`, as dashed lines, the train/validation gap of the last validation, and
    `band`, a `gptlib.expected.Band`, shaded along this run's schedule), learning rate, gradient norm, and
    the loss scale where a loss scaler ran (else the throughput)."""
    fig.clear()
    (loss_ax, lr_ax), (norm_ax, last_ax) = fig.subplots(2, 2)
    train_records = [r for r in history if r["kind"] == "train"]
    val_records = [r for r in history if r["kind"] == "val"]
    steps = [r["step"] for r in train_records]
    if band is not None:
        _shade_band(loss_ax, history, band)
    loss_ax.plot(steps, [r["loss"] for r in train_records], label="train", lw=1, color="tab:blue")
    loss_ax.plot(
        [r["step"] for r in val_records],
        [r["val_loss"] for r in val_records],
        "o-",
        label="val",
        color="tab:orange",
    )
    for (name, value), color in zip((references or {}).items(), ("grey", "tab:purple", "tab:red")):
        loss_ax.axhline(value, ls="--", lw=1, color=color, label=f"{name} {value:.2f}")
    if val_records and train_records:
        last = val_records[-1]
        near = [r["loss"] for r in train_records if last["step"] - 50 < r["step"] <= last["step"]] or [
            train_records[-1]["loss"]
        ]
        gap = last["val_loss"] - sum(near) / len(near)
        loss_ax.annotate(
            f"val - train: {gap:+.2f}",
            (last["step"], last["val_loss"]),
            textcoords="offset points",
            xytext=(-10, 12),
            ha="right",
            fontsize=8,
        )
    loss_ax.set(title="loss (nats/token)", xlabel="step")
    loss_ax.legend(fontsize=7)
    lr_ax.plot(steps, [r["lr"] for r in train_records])
    lr_ax.set(title="learning rate", xlabel="step")
    norm_ax.plot(steps, [r["grad_norm"] for r in train_records])
    norm_ax.set(title="gradient norm (before clipping)", xlabel="step")
    if any(r["loss_scale"] != 1 for r in train_records):
        last_ax.plot(steps, [r["loss_scale"] for r in train_records])
        last_ax.set(title="loss scale (fp16)", xlabel="step", yscale="log")
    else:
        last_ax.plot(steps, [r["tokens_per_s"] for r in train_records])
        last_ax.set(title="tokens/s (no loss scaler: fp32 and bf16 need none)", xlabel="step")
    fig.tight_layout()


def schedule_of(history: list[dict]) -> tuple[int | None, str | None]:
    """`(max_steps, precision)` of a run, from its records: the last event that says them, a start's
    (`gptlib.train.train`) or the one that fixes a budget's end (`gptlib.probe.Budget.replan`); `(None, None)`
    before the run has started."""
    for record in reversed(history):
        if record.get("kind") == "event" and "max_steps" in record:
            return record["max_steps"], record.get("precision")
    return None, None


def _shade_band(ax, history: list[dict], band) -> None:
    """The band's train and validation loss envelopes, shaded in the colours of their curves, turned from
    fractions of the schedule into this run's steps (its last record that says its max_steps); nothing before
    the run has started."""
    max_steps, _ = schedule_of(history)
    if max_steps is None:
        return
    for curve, color, what in ((band.train_loss, "tab:blue", "train"), (band.val_loss, "tab:orange", "val")):
        if curve.fraction:
            steps = [f * max_steps for f in curve.fraction]
            label = f"expected {what} ({len(band.runs)} seeds)"
            ax.fill_between(steps, curve.low, curve.high, color=color, alpha=0.2, lw=0, label=label)


def save_plots(history: list[dict], path, references: dict[str, float] | None = None, band=None) -> Path:
    "The training curves as a PNG file (matplotlib's Agg canvas; no display needed), `band` shaded."
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6))
    draw_history(fig, history, references, band)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=80)
    path = Path(path)
    atomic_write(path, png.getvalue())
    return path


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class LivePlot:
    """A `train` callback: the training curves in one notebook figure, redrawn in place every `every_s`
    seconds, the expected `band` (a `gptlib.expected.Band`) shaded once the run has said its length; outside
    a Jupyter kernel it only collects records."""

    def __init__(self, every_s: float = 2.0, references: dict[str, float] | None = None, band=None):
        self.every_s, self.records, self.references, self.band = every_s, [], references, band
        self.active, self.fig, self.handle, self._last = _in_kernel(), None, None, 0.0

    def __call__(self, record: dict) -> None:
        self.records.append(record)
        if self.active and record["kind"] != "event" and time.monotonic() - self._last >= self.every_s:
            self.redraw()

    def redraw(self) -> None:
        import matplotlib.pyplot as plt
        from IPython.display import display

        if self.fig is None:
            self.fig = plt.figure(figsize=(10, 6))
            draw_history(self.fig, self.records, self.references, self.band)
            self.handle = display(self.fig, display_id=True)
            plt.close(self.fig)  # the handle shows it; the inline backend must not show it again
        else:
            draw_history(self.fig, self.records, self.references, self.band)
            self.handle.update(self.fig)
        self._last = time.monotonic()

    def finish(self) -> None:
        "Draw the final state."
        if self.active and any(r["kind"] == "train" for r in self.records):
            self.redraw()
