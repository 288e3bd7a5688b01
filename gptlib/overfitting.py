"""Validation that has risen for a long stretch: the run says so once, and may stop.

Hand-written, not generated from a notebook: it is a rule over the run's own records, not an idea of GPTs.
A run that takes many passes over a small corpus overfits. On one GPU the `gpt-25m` preset's 10,000 steps
are 130 passes over Shakespeare's 1.26 M tokens: validation was best at step 500 (1.941 bits/byte) and
3.46 at step 5,500, while the training loss fell to 0.68, and the run would have gone on for minutes past
its best checkpoint. The training loop validates every `eval_every` steps; after each validation it asks
`rising(history, patience)`:

- `rising` finds, in the run's records (`gptlib.run_folder.Records.history`: its train, val and event records,
  a resumed run's earlier ones included), the best validation so far, by bits per byte, and the latest.
  When the best is `patience` or more validations old and the latest is above it by more than
  `RISE_MARGIN` of it, and no earlier record of the run said so, it returns a `Rise`; else None. A pure
  function of the records: a resumed run, whose records up to its checkpoint are the run's, says it at the
  same step, once, as the run would have without the stop;
- `Rise.message(stopping)` is the event's text: where the best was, where validation is now, that the best
  checkpoint is kept (checkpoints are ranked by validation loss, and pruning never removes the best).

What it does not do: it judges validation alone (a training loss still falling is the sign of overfitting,
not its test), and it does not stop a run by itself: the loop stops when the run asked for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RISE_MARGIN", "RISE_KEY", "Rise", "rising"]

# the share of the best bits per byte the latest validation must be above it by: a validation of 20 batches
# moves by about half a percent from one to the next where nothing changed, a run that overfits by tens
RISE_MARGIN = 0.02
RISE_KEY = "rising"  # the event record's field (validations since the best) that says a rise was warned of


@dataclass(frozen=True)
class Rise:
    "Validation above its best for `since` validations: the best (step, bits/byte) and the latest."

    best_step: int
    best_bpb: float
    step: int
    bpb: float
    since: int

    def message(self, stopping: bool) -> str:
        "The event's words; `stopping`: the run stops here, as it was asked to."
        line = (
            f"validation has risen for {self.since} validations: {self.bpb:.3f} bits/byte at step "
            f"{self.step:,d} against the best {self.best_bpb:.3f} at step {self.best_step:,d}; the run "
            "overfits, and its best checkpoint is kept"
        )
        return f"{line}; stopping, as asked" if stopping else line


def rising(history: list[dict], patience: int, margin: float = RISE_MARGIN) -> Rise | None:
    """The rise to warn of after the latest validation of `history` (a run's records, oldest first), or None:
    the best validation (the first of the lowest bits per byte) is `patience` or more validations old, the
    latest is above it by more than `margin` of it, and no event record of `history` has warned of a rise
    (`RISE_KEY`). `patience` 0: never."""
    if patience < 0 or margin < 0:  # a caller's bug: the config checks the values a user gives
        raise ValueError(f"need patience >= 0 and margin >= 0, got {patience} and {margin}")
    if patience == 0 or any(r.get("kind") == "event" and RISE_KEY in r for r in history):
        return None
    vals = [(r["step"], r["val_bpb"]) for r in history if r.get("kind") == "val"]
    if len(vals) <= patience:
        return None
    best = min(range(len(vals)), key=lambda i: (vals[i][1], i))
    since = len(vals) - 1 - best
    (best_step, best_bpb), (step, bpb) = vals[best], vals[-1]
    if since < patience or not bpb > best_bpb * (1 + margin):
        return None
    return Rise(best_step, best_bpb, step, bpb, since)
