"""The course's scoreboard: every model of the course scored the same way, so each number can be compared
with the last, from 04's counted bigram through its ladder and 05's sweeps to 06's run.

Hand-written tooling of the course, not part of the installed package. A score is gptlib's own validation
(`gptlib.train.evaluate`, the one 06 builds and `make run` reports): the mean cross-entropy in nats per
token and the bits per byte over every window of the course's two held-out plays (`course.setup`), special
tokens left out of the bits per byte. Each lesson adds its rows with `record` and shows the whole board with
`show`; the board lives in `data/course/` (a separate file in smoke mode, so CI never mixes its tiny runs
with real ones).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from course.pieces import LESSONS


@dataclass
class Score:
    "One row: which notebook, which model, its validation figures, and what it cost to train."

    notebook: str
    name: str
    val_loss: float  # nats per token
    val_bpb: float  # bits per byte
    note: str = ""  # e.g. "4.2 M parameters, 0.5 M tokens, 60 s on 1 thread"

    @property
    def perplexity(self) -> float:
        return math.exp(self.val_loss)


def board_path() -> Path:
    from gptlib.corpus import data_dir

    smoke = os.environ.get("GPTLIB_SMOKE") == "1"
    return data_dir() / "course" / ("scoreboard-smoke.json" if smoke else "scoreboard.json")


def load() -> list[Score]:
    "Every recorded row, in course order (then in the order recorded)."
    path = board_path()
    rows = [Score(**row) for row in json.loads(path.read_text(encoding="utf-8"))] if path.is_file() else []
    return sorted(rows, key=lambda s: LESSONS.index(s.notebook))


def record(notebook: str, name: str, result: dict, note: str = "") -> Score:
    "Add (or replace) the row `notebook`/`name` from an `evaluate` result (`val_loss`, `val_bpb`)."
    from gptlib.files import write_json

    if notebook not in LESSONS:
        raise ValueError(f"unknown lesson {notebook!r}")
    row = Score(notebook, name, float(result["val_loss"]), float(result["val_bpb"]), note)
    rows = [s for s in load() if (s.notebook, s.name) != (notebook, name)] + [row]
    board_path().parent.mkdir(parents=True, exist_ok=True)
    write_json(board_path(), [asdict(s) for s in rows])
    return row


def score(model, data, *, batch_size: int = 16, context: int | None = None) -> dict:
    """`gptlib.train.evaluate` of `model` over every window of the held-out split of `data` (a
    `course.setup.CourseData`), in fp32 on the CPU: `{"val_loss", "val_bpb", "val_tokens"}`."""
    import numpy as np
    import torch

    from gptlib.loader import eval_batches
    from gptlib.optim import choose_precision
    from gptlib.train import evaluate

    context = context or model.config.context
    batches = eval_batches(data.val, batch_size, context, None)
    byte_lengths = torch.from_numpy(np.asarray(data.tokenizer.token_byte_lengths(), dtype=np.int64))
    return evaluate(model, batches, byte_lengths, choose_precision("cpu", "fp32"))


def show(upto: str | None = None) -> str:
    "The board as a text table (the rows of the lessons up to `upto`), best bits per byte marked."
    rows = [s for s in load() if upto is None or LESSONS.index(s.notebook) <= LESSONS.index(upto)]
    if not rows:
        return "the scoreboard is empty: run the lessons from 04 on to fill it"
    best = min(s.val_bpb for s in rows)
    lines = [
        f"{'notebook':12s} {'model':34s} {'nats/token':>10s} {'bits/byte':>9s} {'perplexity':>10s}  note"
    ]
    for s in rows:
        mark = " *" if s.val_bpb == best else "  "
        figures = f"{s.val_loss:10.3f} {s.val_bpb:9.3f} {s.perplexity:10.1f}{mark}"
        lines.append(f"{s.notebook:12s} {s.name:34s} {figures} {s.note}")
    return "\n".join(lines)
