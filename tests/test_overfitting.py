"""gptlib.overfitting: a run whose validation has risen for a long stretch is told so once, from its own
records, and a resumed run tells it at the same step."""

from __future__ import annotations

import pytest

from gptlib.overfitting import RISE_KEY, RISE_MARGIN, Rise, rising

# gpt-25m on one H200 (../shared/GPU.md): validated every 100 steps, best at step 500, then climbing
GPU_RUN = [2.9, 2.4, 2.1, 2.0, 1.941, 1.95, 1.99, 2.05, 2.12, 2.2, 2.3, 2.5, 2.7]


def records(bpbs, every: int = 100) -> list[dict]:
    "A run's records: a train record and a validation every `every` steps, bits per byte as given."
    out = []
    for i, bpb in enumerate(bpbs, start=1):
        out.append({"kind": "train", "step": i * every, "loss": 1.0})
        out.append({"kind": "val", "step": i * every, "val_loss": bpb * 0.9, "val_bpb": bpb})
    return out


def first_rise(bpbs, patience: int = 5):
    """The validations as the loop sees them, one at a time: the step of the first one warned of (and its
    `Rise`), with the warning recorded as the loop records it, and how many warnings there were."""
    history, warned = [], []
    for record in records(bpbs):
        history.append(record)
        if record["kind"] == "val" and (rise := rising(history, patience)) is not None:
            warned.append((record["step"], rise))
            history.append({"kind": "event", "step": record["step"], "message": "...", RISE_KEY: rise.since})
    return warned


def test_the_gpu_runs_climb_past_its_best_is_warned_of_once_five_validations_after_it():
    warned = first_rise(GPU_RUN)
    assert len(warned) == 1
    step, rise = warned[0]
    assert step == 1000 and rise == Rise(500, 1.941, 1000, 2.2, 5)
    message = rise.message(stopping=False)
    assert (
        "risen for 5 validations: 2.200 bits/byte at step 1,000 against the best 1.941 at step 500" in message
    )
    assert "best checkpoint is kept" in message and "stopping" not in message
    assert rise.message(stopping=True).endswith("stopping, as asked")


def test_a_falling_or_level_validation_is_never_warned_of():
    assert first_rise([3.0 - 0.1 * i for i in range(20)]) == []
    # above the best for many validations, but within the margin: the noise of a 20-batch validation
    level = [2.0] + [2.0 * (1 + RISE_MARGIN / 2)] * 12
    assert first_rise(level) == []


def test_the_stretch_counts_from_the_best_so_a_new_best_starts_it_again():
    bpbs = [2.0, 2.2, 2.2, 2.2, 2.2, 1.9, 2.2, 2.2, 2.2, 2.2, 2.2]  # a new best at the 6th validation
    assert [step for step, _ in first_rise(bpbs)] == [1100]
    assert first_rise(bpbs, patience=0) == []  # 0: never


def test_a_resumed_run_warns_at_the_same_step_from_the_records_it_kept():
    """A resumed run keeps its records up to its checkpoint and writes the later ones again: the warning,
    already in the kept records, is not said twice; one after the checkpoint is said again, at its step."""
    full = records(GPU_RUN)
    before = [r for r in full if r["step"] <= 1000] + [
        {"kind": "event", "step": 1000, "message": "...", RISE_KEY: 5}
    ]
    assert rising(before + [r for r in full if r["step"] == 1100], 5) is None  # said once
    kept = [r for r in full if r["step"] <= 800]  # resumed from step 800: the warning came later
    again = [step for step, _ in first_rise(GPU_RUN)]
    seen = []
    for record in [r for r in full if r["step"] > 800]:
        kept.append(record)
        if record["kind"] == "val" and rising(kept, 5) is not None:
            seen.append(record["step"])
            kept.append({"kind": "event", "step": record["step"], "message": "...", RISE_KEY: 5})
    assert seen == again == [1000]


def test_a_negative_patience_or_margin_is_a_callers_bug():
    with pytest.raises(ValueError, match="patience"):
        rising(records(GPU_RUN), -1)
    with pytest.raises(ValueError, match="margin"):
        rising(records(GPU_RUN), 5, margin=-0.1)
